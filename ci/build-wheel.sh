#!/usr/bin/env bash
# Builds the pacheck wheel into dist/ (docs/PYTHON.md) and checks it (ci/check-wheel.py): CPU only by default,
# --cuda for the CUDA backend (nvcc, sm_90 unless CMAKE_CUDA_ARCHITECTURES is passed in EXTRA). Each kind keeps
# its own build folder (build/wheel, build/wheel-cuda), and ccache is used when it is installed.
# Usage: ci/build-wheel.sh [--cuda] [EXTRA pip --config-settings=... options...]
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
dir=build/wheel
if [ "${1:-}" = "--cuda" ]; then
  shift
  dir=build/wheel-cuda
  args+=(--config-settings=cmake.define.PACHECK_CUDA=ON)
  if command -v ccache >/dev/null; then args+=(--config-settings=cmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=ccache); fi
fi
if command -v ccache >/dev/null; then
  args+=(--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache --config-settings=cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache)
fi
mkdir -p dist
python3 -m pip wheel . --no-deps -w dist --config-settings=build-dir="$dir" "${args[@]}" "$@"
wheel=$(ls -t dist/pacheck-*.whl | head -1)
python3 ci/check-wheel.py "$wheel"
echo "$wheel"
