#!/usr/bin/env bash
# Gates a kernel on pacheck's `gate` suite: builds the kernel repository against an installed pacheck (made
# once: this checkout is built and installed into the prefix unless the prefix already holds one, so CI can
# cache the prefix between jobs), runs the suite with the plugin's kernels isolated in child processes and
# the device's built-in negative controls (--with-controls), writes the reports CI
# reads (results.jsonl, report.json, junit.xml, summary.md, report.html, evidence.json) and exits with
# pacheck's code:
#   0 every cell passed, 1 some cell failed, 2 usage/input error (a plugin that does not build or load),
#   3 instrument blind (a negative control was not caught, or the comparator self-test failed).
#
# Usage: ci/gate.sh [--prefix DIR] [--plugin-src DIR [--plugin-lib NAME]] [--plugin LIB.so]... [--kernel NAME]...
#                   [--suite S] [--device D] [--shard I/N] [--report-dir DIR] [-- EXTRA_PACHECK_RUN_ARGS...]
#        ci/gate.sh --install-only [--prefix DIR]
#   --prefix DIR       an installed pacheck (`cmake --install`'s prefix: DIR/bin/pacheck, DIR/lib/cmake/pacheck);
#                      when DIR/bin/pacheck is missing, this checkout is built (no tests) and installed into
#                      DIR first. Default $PACHECK_PREFIX, else build/gate-prefix in this checkout
#   --install-only     make sure the prefix holds pacheck, then stop (a CI job that fills the cache)
#   --plugin-src DIR   the kernel repository's CMake project, built in DIR/build-pacheck-gate against the
#                      prefix (CMAKE_PREFIX_PATH, for find_package(pacheck)); PACHECK_INCLUDE_DIR (and CPATH)
#                      also name the installed headers, for a project that includes kernel_abi.h by path
#   --plugin-lib NAME  the one built library to load (file name, e.g. libk.so); default: every .so the
#                      project builds, but those with GPU kernels when the device is the CPU
#   --plugin LIB.so    an already built plugin (repeatable)
#   --kernel NAME      kernels to gate (default: every kernel the plugins register; built-ins need --kernel)
#   --suite S          default gate; --device default: the first GPU, else the CPU
#   --shard I/N        one CI job of N (pacheck merge combines the report directories)
#   --report-dir DIR   default pacheck-reports
# Environment: PACHECK (a pacheck binary to use instead of the prefix's; --plugin-src then also looks for the
# package next to it), PACHECK_BUILD_DIR (where the prefix's pacheck is built; default build/gate),
# GITHUB_STEP_SUMMARY (summary.md is appended to it when set, as GitHub Actions shows it).
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
usage() { sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# The kind of device the run uses: --device's, else what pacheck picks by default (the first CUDA or HIP
# device when one is built and present, else the CPU), from `pacheck list devices`.
device_kind() {
  if [ -n "$device" ]; then echo "${device%%:*}"; return; fi
  "$pacheck" list devices | awk '$1 != "cpu" && $2 == "built" && $3 > 0 { print $1; found = 1; exit }
                                 END { if (!found) print "cpu" }'
}
# Whether a plugin library registers a GPU kernel (the device column of `pacheck list kernels`).
gpu_library() {
  "$pacheck" list kernels --plugin "$1" | grep -F "[plugin $1]" | awk '$2 != "cpu" { gpu = 1 } END { exit !gpu }'
}

prefix="${PACHECK_PREFIX:-$root/build/gate-prefix}" install_only=0
plugin_src="" plugin_lib="" suite="gate" device="" shard="" report_dir="pacheck-reports"
plugins=() kernels=() extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix="${2:?--prefix needs a directory}"; shift 2 ;;
    --install-only) install_only=1; shift ;;
    --plugin-src) plugin_src="${2:?--plugin-src needs a directory}"; shift 2 ;;
    --plugin-lib) plugin_lib="${2:?--plugin-lib needs a file name}"; shift 2 ;;
    --plugin) plugins+=("${2:?--plugin needs a library}"); shift 2 ;;
    --kernel) kernels+=("${2:?--kernel needs a name}"); shift 2 ;;
    --suite) suite="${2:?--suite needs a name}"; shift 2 ;;
    --device) device="${2:?--device needs a device}"; shift 2 ;;
    --shard) shard="${2:?--shard needs I/N}"; shift 2 ;;
    --report-dir) report_dir="${2:?--report-dir needs a directory}"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) usage ;;
    *) echo "gate.sh: unknown option '$1'" >&2; usage ;;
  esac
done

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi

# pacheck itself: the binary named by $PACHECK, else the prefix's, installed there first when missing.
case "$prefix" in /*) ;; *) prefix="$PWD/$prefix" ;; esac
pacheck="${PACHECK:-}"
if [ -z "$pacheck" ]; then
  if [ -x "$prefix/bin/pacheck" ]; then
    echo "gate.sh: using the pacheck installed in $prefix" >&2
  else
    build="${PACHECK_BUILD_DIR:-$root/build/gate}"
    echo "gate.sh: no pacheck in $prefix: building this checkout in $build and installing it there" >&2
    cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DPACHECK_BUILD_TESTS=OFF >&2 &&
      cmake --build "$build" >&2 && cmake --install "$build" --prefix "$prefix" >&2 ||
      { echo "gate.sh: pacheck did not build or install" >&2; exit 2; }
  fi
  pacheck="$prefix/bin/pacheck"
elif [ ! -d "$prefix/lib/cmake/pacheck" ]; then
  prefix="$(cd "$(dirname "$pacheck")/.." && pwd)"   # $PACHECK from a prefix: its own package
fi
[ -x "$pacheck" ] || { echo "gate.sh: no pacheck binary at '$pacheck'" >&2; exit 2; }
[ "$install_only" = 1 ] && { echo "gate.sh: pacheck installed in $prefix" >&2; exit 0; }

# The kernel plugin, built against the installed package (find_package(pacheck) finds it through
# CMAKE_PREFIX_PATH) or, for a project that includes kernel_abi.h by path, its include directory.
if [ -n "$plugin_src" ]; then
  pbuild="$plugin_src/build-pacheck-gate"
  include="$prefix/include"
  [ -f "$include/pacheck/kernel_abi.h" ] || include="$root/include"
  echo "gate.sh: building the plugin in $pbuild against $prefix" >&2
  CPATH="$include${CPATH:+:$CPATH}" cmake -S "$plugin_src" -B "$pbuild" "${generator[@]}" \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" -DPACHECK_INCLUDE_DIR="$include" >&2 &&
    CPATH="$include${CPATH:+:$CPATH}" cmake --build "$pbuild" >&2 ||
    { echo "gate.sh: the plugin in $plugin_src did not build" >&2; exit 2; }
  if [ -n "$plugin_lib" ]; then
    mapfile -t libs < <(find "$pbuild" -name "$plugin_lib" -type f)
    [ "${#libs[@]}" -eq 1 ] ||
      { echo "gate.sh: found ${#libs[@]} libraries named $plugin_lib in $pbuild (${libs[*]:-none})" >&2; exit 2; }
  else
    mapfile -t libs < <(find "$pbuild" -name '*.so' -type f -not -path '*/CMakeFiles/*' | sort)
    [ "${#libs[@]}" -gt 0 ] || { echo "gate.sh: the project in $plugin_src built no .so library" >&2; exit 2; }
  fi
  kind=$(device_kind)
  for lib in "${libs[@]}"; do
    if [ "$kind" = cpu ] && gpu_library "$lib"; then
      echo "gate.sh: leaving out $lib: its kernels need a GPU and the device is the CPU" >&2
    else
      plugins+=("$lib")
    fi
  done
  [ "${#plugins[@]}" -gt 0 ] || { echo "gate.sh: no plugin library of $plugin_src runs on the CPU" >&2; exit 2; }
fi

args=(run --suite "$suite" --report-dir "$report_dir")
[ -n "$device" ] && args+=(--device "$device")
[ -n "$shard" ] && args+=(--shard "$shard")
for p in "${plugins[@]}"; do args+=(--plugin "$p"); done
for k in "${kernels[@]}"; do args+=(--kernel "$k"); done
# The device's built-in negative controls run beside the kernel on the cells where their planted faults
# must show, so the reports and evidence.json show the checks failing on this device. On a device with none
# built, the flag adds nothing and the run's summary says that no control ran.
args+=(--with-controls)
args+=("${extra[@]}")

echo "gate.sh: $pacheck ${args[*]}" >&2
"$pacheck" "${args[@]}"
rc=$?

if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$report_dir/summary.md" ]; then
  cat "$report_dir/summary.md" >>"$GITHUB_STEP_SUMMARY"
fi
case $rc in
  0) what="every cell passed" ;;
  1) what="some cell failed" ;;
  2) what="usage or input error" ;;
  3) what="instrument blind" ;;
  *) what="pacheck itself died (signal $((rc > 128 ? rc - 128 : 0)))" ;;
esac
echo "gate.sh: exit $rc ($what); reports in $report_dir" >&2
exit $rc
