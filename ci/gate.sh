#!/usr/bin/env bash
# Gates a kernel on pacheck's `gate` suite: builds the kernel plugin (and pacheck, unless $PACHECK names a
# binary), runs the suite with the plugin's kernels isolated in child processes, writes the reports CI
# reads (results.jsonl, report.json, junit.xml, summary.md) and exits with pacheck's code:
#   0 every cell passed, 1 some cell failed, 2 usage/input error (a plugin that does not build or load),
#   3 instrument blind (a negative control was not caught, or the comparator self-test failed).
#
# Usage: ci/gate.sh [--plugin-src DIR [--plugin-lib NAME]] [--plugin LIB.so]... [--kernel NAME]...
#                   [--suite S] [--device D] [--shard I/N] [--report-dir DIR] [-- EXTRA_PACHECK_RUN_ARGS...]
#   --plugin-src DIR   CMake project of the kernel plugin; built in DIR/build-pacheck-gate with
#                      PACHECK_INCLUDE_DIR (and CPATH) pointing at pacheck's include/ for kernel_abi.h
#   --plugin-lib NAME  which built library to load when the project builds several (file name, e.g. libk.so)
#   --plugin LIB.so    an already built plugin (repeatable)
#   --kernel NAME      kernels to gate (default: every kernel the plugins register; built-ins need --kernel)
#   --suite S          default gate; --device default: the first GPU, else the CPU
#   --shard I/N        one CI job of N (pacheck merge combines the report directories)
#   --report-dir DIR   default pacheck-reports
# Environment: PACHECK (pacheck binary; default: build this checkout in $PACHECK_BUILD_DIR, default
# build/gate), GITHUB_STEP_SUMMARY (summary.md is appended to it when set, as GitHub Actions shows it).
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

plugin_src="" plugin_lib="" suite="gate" device="" shard="" report_dir="pacheck-reports"
plugins=() kernels=() extra=()
while [ $# -gt 0 ]; do
  case "$1" in
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

# pacheck itself.
pacheck="${PACHECK:-}"
if [ -z "$pacheck" ]; then
  build="${PACHECK_BUILD_DIR:-$root/build/gate}"
  echo "gate.sh: building pacheck in $build" >&2
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DPACHECK_BUILD_TESTS=OFF >&2 &&
    cmake --build "$build" --target pacheck >&2 || { echo "gate.sh: pacheck did not build" >&2; exit 2; }
  pacheck="$build/cli/pacheck"
fi
[ -x "$pacheck" ] || { echo "gate.sh: no pacheck binary at '$pacheck'" >&2; exit 2; }

# The kernel plugin.
if [ -n "$plugin_src" ]; then
  pbuild="$plugin_src/build-pacheck-gate"
  echo "gate.sh: building the plugin in $pbuild" >&2
  CPATH="$root/include${CPATH:+:$CPATH}" cmake -S "$plugin_src" -B "$pbuild" "${generator[@]}" \
      -DCMAKE_BUILD_TYPE=Release -DPACHECK_INCLUDE_DIR="$root/include" -DPACHECK_ROOT="$root" >&2 &&
    CPATH="$root/include${CPATH:+:$CPATH}" cmake --build "$pbuild" >&2 ||
    { echo "gate.sh: the plugin in $plugin_src did not build" >&2; exit 2; }
  if [ -n "$plugin_lib" ]; then
    mapfile -t libs < <(find "$pbuild" -name "$plugin_lib" -type f)
  else
    mapfile -t libs < <(find "$pbuild" -name '*.so' -type f -not -path '*/CMakeFiles/*')
  fi
  if [ "${#libs[@]}" -ne 1 ]; then
    echo "gate.sh: found ${#libs[@]} plugin libraries in $pbuild (${libs[*]:-none}); name one with --plugin-lib" >&2
    exit 2
  fi
  plugins+=("${libs[0]}")
fi

args=(run --suite "$suite" --report-dir "$report_dir")
[ -n "$device" ] && args+=(--device "$device")
[ -n "$shard" ] && args+=(--shard "$shard")
for p in "${plugins[@]}"; do args+=(--plugin "$p"); done
for k in "${kernels[@]}"; do args+=(--kernel "$k"); done
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
