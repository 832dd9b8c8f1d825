#!/usr/bin/env bash
# Browser check of report.html (issue 10): renders a real report in headless Chromium and fails unless
#   1. the page, exactly as written, loads with no console message at all: the page has no script, so any
#      message is the browser complaining (a blocked external load under the page's Content-Security-Policy,
#      a parse problem);
#   2. in a copy with a small probe script (and the CSP that would block it removed), every figure exists,
#      each of its SVGs is laid out with a real size, holds drawn marks, text and two axes, and has a
#      caption (figure 4 only when bench results were given);
#   3. a full-page screenshot (PNG) is written, for a person to look at.
#
# Usage: ci/check-report-browser.sh [--pacheck BIN] [--html FILE [--expect-bench]] [OUT_DIR]
#   --pacheck BIN  the pacheck binary (default: build/default/cli/pacheck); without --html the script runs
#                  `pacheck run --suite tail-poison --kernel cpu.vector_v --kernel cpu.reference
#                  --report-dir OUT_DIR/run` and a small `pacheck bench` A/B, and checks both pages
#                  (OUT_DIR/run/report.html from --report-dir, and OUT_DIR/run/report-bench.html from
#                  `pacheck report --bench`)
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
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
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

# The probe: for each expected figure, one line "OK ..." or what is wrong, plus the page height.
probe_script() {
  cat <<'EOF'
<script>
(function () {
  var ids = PACHECK_IDS, lines = [];
  ids.forEach(function (id) {
    var el = document.getElementById(id);
    if (!el) { lines.push('MISSING ' + id); return; }
    if (!el.querySelector('figcaption') || el.querySelector('figcaption').textContent.indexOf('Good') < 0)
      lines.push('NOCAPTION ' + id);
    var svgs = el.querySelectorAll('svg');
    if (!svgs.length) { lines.push('NOSVG ' + id); return; }
    svgs.forEach(function (s) {
      var r = s.getBoundingClientRect(), bb = s.getBBox();
      var marks = s.querySelectorAll('rect, polyline, polygon, circle, line').length;
      var texts = Array.prototype.filter.call(s.querySelectorAll('text'), function (t) {
        return t.getComputedTextLength() > 0; }).length;
      var axes = s.querySelectorAll('.x-axis').length > 0 && s.querySelectorAll('.y-axis').length > 0;
      var ok = r.width >= 200 && r.height >= 80 && bb.width > 0 && bb.height > 0 && marks >= 8 && texts >= 4 && axes;
      lines.push((ok ? 'OK ' : 'EMPTY ') + id + ' ' + s.id + ' ' + Math.round(r.width) + 'x' + Math.round(r.height) +
                 ' marks=' + marks + ' texts=' + texts + ' axes=' + axes);
    });
  });
  lines.push('HEIGHT ' + Math.ceil(document.documentElement.scrollHeight));
  var pre = document.createElement('pre');
  pre.id = 'pacheck-browser-check';
  pre.textContent = '\n' + lines.join('\n') + '\n';
  document.body.appendChild(pre);
})();
</script>
EOF
}

# check_page FILE NAME WANT_BENCH: the three checks above on one page.
check_page() {
  local page="$1" name="$2" want_bench="$3"
  local ids='["fig-fault-matrix","fig-error-length","fig-margin"'
  [ "$want_bench" = 1 ] && ids="$ids"',"fig-bench-ratio"'
  ids="$ids]"
  if [ ! -s "$page" ]; then fail "$name: $page is missing or empty"; return; fi

  # 2. the probe, in a copy of the page.
  local probe="$out/$name.probe.html"
  grep -v 'http-equiv="Content-Security-Policy"' "$page" | sed 's#</body>#PACHECK_PROBE</body>#' >"$probe.tmp"
  probe_script | sed "s#PACHECK_IDS#$ids#" >"$out/$name.probe.js"
  python3 - "$probe.tmp" "$out/$name.probe.js" "$probe" <<'EOF'
import sys
page, script, out = sys.argv[1:4]
text = open(page, encoding='utf-8').read()
text = text.replace('PACHECK_PROBE', open(script, encoding='utf-8').read(), 1)
open(out, 'w', encoding='utf-8').write(text)
EOF
  rm -f "$probe.tmp" "$out/$name.probe.js"
  chrome --window-size=1280,2000 --dump-dom "file://$probe" >"$out/$name.dom.html" 2>"$out/$name.probe.log" \
    || fail "$name: chromium --dump-dom exited $? (see $out/$name.probe.log)"
  local result
  result="$(sed -n '/<pre id="pacheck-browser-check">/,/<\/pre>/p' "$out/$name.dom.html" | sed 's/<[^>]*>//g' | grep -v '^$')"
  if [ -z "$result" ]; then
    fail "$name: the probe did not run (no result in the DOM)"
  else
    echo "$result" | sed "s/^/  [$name] /"
    echo "$result" | grep -Ev '^(OK|HEIGHT) ' | while read -r line; do echo "FAIL: $name: $line"; done
    echo "$result" | grep -Eqv '^(OK|HEIGHT) ' && status=1
    for id in $(echo "$ids" | tr -d '[]"' | tr ',' ' '); do
      echo "$result" | grep -q "^OK $id " || fail "$name: figure $id not drawn"
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

if [ -n "$html" ]; then
  check_page "$html" "$(basename "$html" .html)" "$expect_bench"
else
  if [ ! -x "$pacheck" ]; then echo "FAIL: no pacheck binary at $pacheck (give --pacheck BIN)"; exit 1; fi
  run="$out/run"
  "$pacheck" run --suite tail-poison --kernel cpu.vector_v --kernel cpu.reference --report-dir "$run" --threads 2 \
    >"$out/run.log" 2>&1
  rc=$?
  # 0: all cells pass and the negative control is caught. Anything else is a broken build, not a page.
  [ "$rc" -eq 0 ] || fail "pacheck run exited $rc (see $out/run.log)"
  "$pacheck" bench --suite tail-poison --kernel cpu.vector_v --kernel cpu.vector_v_masked --filter 'd128 bs16 bf16' \
    --samples 3 --warmup 1 --min-sample-ms 0.2 --json "$out/bench.json" >"$out/bench.log" 2>&1 \
    || fail "pacheck bench exited $? (see $out/bench.log)"
  "$pacheck" report "$run" --bench "$out/bench.json" --out "$run/report-bench.html" >>"$out/bench.log" 2>&1 \
    || fail "pacheck report exited $? (see $out/bench.log)"
  check_page "$run/report.html" report 0
  check_page "$run/report-bench.html" report-bench 1
fi

if [ "$status" -eq 0 ]; then echo "report browser check passed; output in $out"; else echo "report browser check FAILED; output in $out"; fi
exit "$status"
