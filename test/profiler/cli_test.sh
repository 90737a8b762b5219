#!/usr/bin/env bash
# graphpipe-profile as a user runs it.
set -u
bin=$1
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; else echo "ok: $1"; fi; }

out=$("$bin" devices --json); rc=$?
check "devices --json exits 0" '[ $rc -eq 0 ]'
check "devices --json names the host cores" 'echo "$out" | grep -q "\"logical_cores\":[1-9]"'
check "devices --json says whether CUDA is built" 'echo "$out" | grep -Eq "\"built\":(true|false)"'
out=$("$bin" devices); rc=$?
check "devices prints the cpu line" '[ $rc -eq 0 ] && echo "$out" | grep -q "^cpu "'
"$bin" nonsense >/dev/null 2>&1; rc=$?
check "unknown subcommand exits 2" '[ $rc -eq 2 ]'
exit $fail
