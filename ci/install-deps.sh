#!/usr/bin/env bash
# Installs pacheck's build and test dependencies from Debian packages.
# Idempotent: safe to run again; apt-get skips what is already installed.
# Usage: ci/install-deps.sh [--hip] [--browser] [--fuzz] [--numpy]
#   --hip      also install Debian's hipcc, libamdhip64-dev and rocm-device-libs (HIP backend build)
#   --browser  also install chromium (HTML report checks)
#   --fuzz     also install clang and libclang-rt-14-dev (libFuzzer: ci/fuzz-smoke.sh)
#   --numpy    also pip-install NumPy from PyPI for python3 (the case-file round trip, examples/python)
set -euo pipefail

want_hip=0
want_browser=0
want_fuzz=0
want_numpy=0
for arg in "$@"; do
  case "$arg" in
    --hip) want_hip=1 ;;
    --browser) want_browser=1 ;;
    --fuzz) want_fuzz=1 ;;
    --numpy) want_numpy=1 ;;
    *) echo "install-deps.sh: unknown option '$arg' (known: --hip, --browser, --fuzz, --numpy)" >&2; exit 2 ;;
  esac
done

sudo_cmd=""
if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi

pkgs=(
  build-essential cmake ninja-build pkg-config git python3 python3-pip
  libeigen3-dev libfmt-dev libgtest-dev librapidcheck-dev libcli11-dev
  nlohmann-json3-dev libtomlplusplus-dev librandom123-dev libssl-dev libpugixml-dev
  python3-pytest python3-numpy python3-pytest-xdist python3-venv
)
if [ "$want_hip" = 1 ]; then pkgs+=(hipcc libamdhip64-dev rocm-device-libs); fi
if [ "$want_browser" = 1 ]; then pkgs+=(chromium); fi
if [ "$want_fuzz" = 1 ]; then pkgs+=(clang libclang-rt-14-dev); fi

export DEBIAN_FRONTEND=noninteractive
$sudo_cmd apt-get update -qq
$sudo_cmd apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
echo "install-deps.sh: installed ${#pkgs[@]} packages: ${pkgs[*]}"
if [ "$want_numpy" = 1 ]; then
  # Debian's own python3 refuses pip outside a venv (PEP 668); other interpreters take it as is.
  python3 -m pip install --quiet numpy 2>/dev/null || python3 -m pip install --quiet --break-system-packages numpy
  python3 -c 'import numpy; print("install-deps.sh: numpy", numpy.__version__)'
fi
