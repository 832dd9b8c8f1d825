#!/usr/bin/env bash
# The browser check's probe (ci/report-probe.js) finds what it claims to: run on tests/browser/planted.html,
# ci/check-report-browser.sh must fail and count exactly the planted faults per figure, and none in the
# page's good figure (a wide one that scrolls in a container on purpose).
# Usage: tests/browser/test_probe.sh OUT_DIR. Exit 0 as expected, 1 not, 77 Chromium is not installed.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:?usage: test_probe.sh OUT_DIR}"
rm -rf "$out"
bash "$here/../../ci/check-report-browser.sh" --html "$here/planted.html" "$out" >"$out.log" 2>&1
rc=$?
[ "$rc" -eq 77 ] && { cat "$out.log"; exit 77; }
status=0
[ "$rc" -eq 1 ] || { echo "FAIL: the check exited $rc on the planted page, not 1 (see $out.log)"; status=1; }
# SVG id, then the counts it must report.
while read -r svg want; do
  line="$(grep " $svg " "$out/summary.txt" 2>/dev/null)"
  if [ -z "$line" ]; then echo "FAIL: no result for $svg (see $out.log)"; status=1; continue; fi
  for kv in $want; do
    case "$line" in
      *" $kv "*|*" $kv") ;;
      *) echo "FAIL: $svg: wanted $kv in: $line"; status=1 ;;
    esac
  done
done <<'WANT'
planted-overlap-clip BAD overlaps=1 clipped=1 noticks=0 unlegended=0 collapsed=0
planted-ticks-legend-collapse BAD overlaps=0 clipped=0 noticks=2 unlegended=2 collapsed=1
planted-shrunk BAD overlaps=0 clipped=0 minfont=4.0
planted-good OK overlaps=0 clipped=0 noticks=0 unlegended=0 collapsed=0 minfont=11.0 scrolls
WANT
[ "$status" -eq 0 ] && echo "the probe counts every planted fault and nothing in the good figure"
exit "$status"
