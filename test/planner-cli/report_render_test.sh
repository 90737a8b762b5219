#!/usr/bin/env bash
# The plan report renders: headless Chromium screenshots it, and the PNG is not blank (the stage
# graph's, the timeline's and the memory bars' colours are on it). Chromium is a test dependency
# (scripts/install-deps.sh installs chromium-headless-shell): without it this test FAILS.
set -u
plan_bin=$1
tmp=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$tmp" && mkdir -p "$tmp"
tmp=$(cd "$tmp" && pwd)
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }

browser=()
if command -v chromium-headless-shell >/dev/null; then
  browser=(chromium-headless-shell)
elif command -v chromium >/dev/null; then
  browser=(chromium --headless)
else
  echo "FAIL: neither chromium-headless-shell nor chromium is installed; the report's rendering"
  echo "      test needs one: apt-get install chromium-headless-shell (scripts/install-deps.sh)"
  exit 1
fi

screenshot() {  # html png
  timeout 120 "${browser[@]}" --no-sandbox --disable-gpu --hide-scrollbars \
    --user-data-dir="$tmp/profile" --window-size=1200,2000 --screenshot="$2" "file://$1" \
    >"$tmp/chromium.log" 2>&1
}

"$plan_bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 4 --batch 16 \
  --out "$tmp/plan.pb" >/dev/null; rc=$?
check "search writes the plan" '[ $rc -eq 0 ]'
for i in 0 1 2 3 4 5; do
  echo "{\"iteration\":$i,\"loss\":0.$((9 - i)),\"samples_per_s\":$((20000 + 1000 * i))}"
done > "$tmp/m.jsonl"
"$plan_bin" report "$tmp/plan.pb" --metrics "$tmp/m.jsonl" --out "$tmp/report.html" >/dev/null
rc=$?
check "report writes the HTML" '[ $rc -eq 0 ] && [ -s "$tmp/report.html" ]'

screenshot "$tmp/report.html" "$tmp/report.png"; rc=$?
check "${browser[0]} screenshots the report" '[ $rc -eq 0 ] && [ -s "$tmp/report.png" ]' ||
  cat "$tmp/chromium.log"
# Forward and backward spans, the bottleneck's outline, the memory bars.
python3 "$here/png_colors.py" "$tmp/report.png" --color 4e79a7 --color f28e2b --color c0392b \
  --color 59a14f; rc=$?
check "the screenshot shows the report's drawings" '[ $rc -eq 0 ]'

# The check itself fails on a blank page.
printf '<!DOCTYPE html>\n<html><body></body></html>\n' > "$tmp/blank.html"
screenshot "$tmp/blank.html" "$tmp/blank.png"; rc=$?
check "${browser[0]} screenshots a blank page" '[ $rc -eq 0 ] && [ -s "$tmp/blank.png" ]'
python3 "$here/png_colors.py" "$tmp/blank.png" >/dev/null; rc=$?
check "a blank screenshot fails the check" '[ $rc -eq 1 ]'

exit $fail
