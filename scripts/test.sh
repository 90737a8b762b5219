#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test (CTest). Exits non-zero on any failure.
# GPU tests are skipped (not passed) on machines without a GPU. Ends with the number of Catch2
# cases and assertions CTest ran, against the number the test binaries list.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
cd "$root/build"
rc=0
# The whole output is kept in build/ctest-output.log: CI logs keep only a test's first and last
# lines, so what failed is repeated at the end.
ctest --output-on-failure -j "${GP_JOBS:-$(nproc)}" --timeout 600 2>&1 | tee ctest-output.log ||
  rc=$?
if [ "$rc" -ne 0 ]; then
  echo "--- failed checks and assertions (all of the output: build/ctest-output.log) ---"
  grep -E -A3 "^[0-9]+: FAIL|^FAIL|FAILED:" ctest-output.log | tail -n 80 || true
fi
python3 "$root/test/support/check_catch_cases.py" summary "$root/build/test/catch-ledger" || rc=1
exit "$rc"
