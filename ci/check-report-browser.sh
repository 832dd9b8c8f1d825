#!/usr/bin/env bash
# Browser check of report.html (issues 10 and 21): renders real reports in headless Chromium and fails unless
#   1. the page, exactly as written, loads with no console message at all: the page has no script, so any
#      message is the browser complaining (a blocked external load under the page's Content-Security-Policy,
#      a parse problem);
#   2. in a copy with the probe ci/report-probe.js (and the CSP that would block it removed), every figure
#      exists with a caption, each of its SVGs is laid out with a real size, holds drawn marks, text and two
#      axes, and is readable as laid out at 1280 px: no two text boxes overlap, no text is clipped by its svg
#      or the page, every axis has tick labels, every legend entry names a series that is drawn, distinct
#      context lengths are drawn apart, no text renders under 9 px, no figure is wider than the page unless
#      it scrolls in a container, and the page does not scroll sideways (ci/report-probe.js says exactly);
#   3. a full-page screenshot (PNG) is written, for a person to look at.
#
# Usage: ci/check-report-browser.sh [--pacheck BIN] [--html FILE [--expect-bench]] [OUT_DIR]
#   --pacheck BIN  the pacheck binary (default: build/default/cli/pacheck); without --html the script checks
#                  the reports of runs of every size the figures must hold up at (about 40 s of CPU on 2 cores):
#                    one      1 result   (boundary, one clean cell, cpu.reference)
#                    ten      10 results (boundary --filter ctx17, five kernels)
#                    mid      64 results (tail-poison, cpu.vector_v and cpu.reference), and the same page with
#                             a small `pacheck bench` A/B (report-bench, figure 4)
#                    gate-wide  3,252 results: gate run once with cpu.reference, copied for 12 kernels, two
#                             of them negative controls (ci/synth-report.py: real results, scaled metrics)
#                    gate-deep  2,169 cells of one kernel: gate's 271 cells for 8 seeds, half of them at
#                             shifted context lengths (100 distinct lengths), and a 64-sequence batch
#                  Each page is OUT_DIR/NAME.html; the counts per figure are collected in OUT_DIR/summary.txt.
#   --html FILE    check this page instead (what a failing check looks like: give it a broken page)
#   OUT_DIR        default: a fresh temporary directory (kept, and named on the last line)
# Exit: 0 checked and good, 1 a check failed, 77 Chromium is not installed (ctest reports a skip).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pacheck="$root/build/default/cli/pacheck"
html=""
expect_bench=0
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --pacheck) pacheck="$2"; shift 2 ;;
    --html) html="$2"; shift 2 ;;
    --expect-bench) expect_bench=1; shift ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    -*) echo "check-report-browser: unknown option '$1'" >&2; exit 2 ;;
    *) out="$1"; shift ;;
  esac
done

browser=""
for b in chromium chromium-browser; do
  if command -v "$b" >/dev/null 2>&1; then browser="$(command -v "$b")"; break; fi
done
if [ -z "$browser" ]; then
  echo "SKIP: Chromium is not installed, so report.html cannot be checked in a browser" \
       "(install it with: ci/install-deps.sh --browser)"
  exit 77
fi

[ -n "$out" ] || out="$(mktemp -d /tmp/pacheck-report-browser.XXXXXX)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
status=0
fail() { echo "FAIL: $*"; status=1; }

# Headless Chromium with a throwaway profile (parallel runs must not share one), no sandbox (CI runs as
# root in a container), and every host name unresolvable, so a page that tried the network could not.
chrome() {
  local profile
  profile="$(mktemp -d "$out/profile.XXXXXX")"
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --no-first-run --no-default-browser-check \
    --hide-scrollbars --user-data-dir="$profile" --host-resolver-rules="MAP * ~NOTFOUND" \
    --enable-logging=stderr --v=0 "$@"
  local rc=$?
  rm -rf "$profile"
  return $rc
}

# check_page FILE NAME WANT_BENCH: the three checks above on one page.
check_page() {
  local page="$1" name="$2" want_bench="$3"
  local ids='["fig-fault-matrix","fig-error-length","fig-margin"'
  [ "$want_bench" = 1 ] && ids="$ids"',"fig-bench-ratio"'
  ids="$ids]"
  if [ ! -s "$page" ]; then fail "$name: $page is missing or empty"; return; fi
  echo "$name: $page"

  # 2. the probe, in a copy of the page (it can only run there: the page's CSP forbids scripts).
  local probe="$out/$name.probe.html"
  python3 - "$page" "$root/ci/report-probe.js" "$ids" "$probe" <<'EOF'
import sys
page, script, ids, out = sys.argv[1:5]
text = open(page, encoding='utf-8').read()
text = '\n'.join(l for l in text.split('\n') if 'http-equiv="Content-Security-Policy"' not in l)
probe = '<script>window.PACHECK_IDS = ' + ids + ';</script>\n<script>\n' + open(script, encoding='utf-8').read() + '</script>\n'
text = text.replace('</body>', probe + '</body>', 1) if '</body>' in text else text + probe
open(out, 'w', encoding='utf-8').write(text)
EOF
  chrome --window-size=1280,2000 --dump-dom "file://$probe" >"$out/$name.dom.html" 2>"$out/$name.probe.log" \
    || fail "$name: chromium --dump-dom exited $? (see $out/$name.probe.log)"
  local result
  result="$(sed -n '/<pre id="pacheck-browser-check">/,/<\/pre>/p' "$out/$name.dom.html" | sed 's/<[^>]*>//g' \
            | python3 -c 'import html, sys; sys.stdout.write(html.unescape(sys.stdin.read()))' | grep -v '^$')"
  if [ -z "$result" ]; then
    fail "$name: the probe did not run (no result in the DOM)"
  else
    echo "$result" | sed "s/^/  [$name] /"
    echo "$result" | grep -E '^(OK|BAD) fig' | sed "s/^/$name /" >>"$out/summary.txt"
    local bad
    bad="$(echo "$result" | grep -Ev '^(OK |HEIGHT |  )')"
    if [ -n "$bad" ]; then
      while read -r line; do fail "$name: $line"; done <<<"$bad"
    fi
    for id in $(echo "$ids" | tr -d '[]"' | tr ',' ' '); do
      echo "$result" | grep -Eq "^(OK|BAD) $id " || fail "$name: figure $id not drawn"
    done
  fi

  # 1 and 3. the page as written: screenshot, and no console message.
  local height
  height="$(echo "$result" | sed -n 's/^HEIGHT //p')"
  [ -n "$height" ] || height=6000
  [ "$height" -gt 16000 ] && height=16000
  height=$((height + 40))
  chrome --screenshot="$out/$name.png" --window-size="1280,$height" "file://$(cd "$(dirname "$page")" && pwd)/$(basename "$page")" \
    >/dev/null 2>"$out/$name.browser.log" || fail "$name: chromium --screenshot exited $? (see $out/$name.browser.log)"
  if grep -E ':CONSOLE[:(]|Uncaught' "$out/$name.browser.log" >"$out/$name.console.txt"; then
    fail "$name: console messages while loading the page:"
    sed 's/^/    /' "$out/$name.console.txt"
  else
    echo "  [$name] no console messages"
  fi
  local size
  size="$(stat -c %s "$out/$name.png" 2>/dev/null || echo 0)"
  if [ "$size" -lt 20000 ]; then
    fail "$name: screenshot $out/$name.png is missing or blank-sized ($size bytes)"
  else
    echo "  [$name] screenshot $out/$name.png (${size} bytes, 1280x$height)"
  fi
}

# run_case NAME ARGS...: `pacheck run ARGS --report-dir OUT_DIR/NAME`, which must exit 0 (every cell passes
# and every negative control is caught: anything else is a broken build, not a page); the page is NAME.html.
run_case() {
  local name="$1"
  shift
  "$pacheck" run "$@" --threads 2 --quiet --report-dir "$out/$name" >"$out/$name.log" 2>&1
  local rc=$?
  [ "$rc" -eq 0 ] || fail "pacheck run $* exited $rc (see $out/$name.log)"
  cp "$out/$name/report.html" "$out/$name.html" 2>/dev/null || fail "$name: no report.html in $out/$name"
}

: >"$out/summary.txt"
if [ -n "$html" ]; then
  check_page "$html" "$(basename "$html" .html)" "$expect_bench"
else
  if [ ! -x "$pacheck" ]; then echo "FAIL: no pacheck binary at $pacheck (give --pacheck BIN)"; exit 1; fi
  run_case one --suite boundary --kernel cpu.reference --filter '^h16/8 d128 bs16 bf16 ctx17 vllm seed7 clean$'
  run_case ten --suite boundary --filter ctx17 --kernel cpu.reference --kernel cpu.vector_v_masked --kernel cpu.split_kv \
    --kernel cpu.online --kernel cpu.two_pass
  run_case mid --suite tail-poison --kernel cpu.vector_v --kernel cpu.reference
  "$pacheck" bench --suite tail-poison --kernel cpu.vector_v --kernel cpu.vector_v_masked --filter 'd128 bs16 bf16' \
    --samples 3 --warmup 1 --min-sample-ms 0.2 --json "$out/bench.json" >"$out/bench.log" 2>&1 \
    || fail "pacheck bench exited $? (see $out/bench.log)"
  "$pacheck" report "$out/mid" --bench "$out/bench.json" --out "$out/report-bench.html" >>"$out/bench.log" 2>&1 \
    || fail "pacheck report --bench exited $? (see $out/bench.log)"
  # Gate-sized pages from one real gate run (ci/synth-report.py says what it copies and what it changes).
  run_case gate-ref --suite gate --kernel cpu.reference
  synth() {
    local name="$1"
    shift
    python3 "$root/ci/synth-report.py" "$out/gate-ref/report.json" "$out/$name.json" "$@" >>"$out/synth.log" 2>&1 \
      && "$pacheck" report "$out/$name.json" --out "$out/$name.html" >>"$out/synth.log" 2>&1 \
      || fail "$name: synthesising or rendering its report failed (see $out/synth.log)"
  }
  synth gate-wide --kernels 12 --controls 2
  synth gate-deep --seeds 8 --spread-lengths --long-batch
  for name in one ten mid gate-wide gate-deep; do check_page "$out/$name.html" "$name" 0; done
  check_page "$out/report-bench.html" report-bench 1
fi

echo "per figure (ci/report-probe.js says what each count is):"
sed 's/^/  /' "$out/summary.txt"
echo "took ${SECONDS} s"
if [ "$status" -eq 0 ]; then echo "report browser check passed; output in $out"; else echo "report browser check FAILED; output in $out"; fi
exit "$status"
