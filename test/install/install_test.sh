#!/usr/bin/env bash
# `cmake --install` as a user runs it: into a fresh prefix, then the installed programs used from
# there alone (PATH of the prefix, no source tree or build directory named): a search with an
# installed cluster preset, a launched two-rank job, the man pages and the bash completion.
# Usage: install_test.sh BUILD_DIR TMP_DIR
set -uo pipefail
build=$(cd "$1" && pwd) tmp=$2
rm -rf "$tmp" && mkdir -p "$tmp"
prefix=$tmp/prefix
fail=0
check() {  # check NAME COMMAND...
  local name=$1
  shift
  if eval "$@"; then echo "ok: $name"; else echo "FAIL: $name"; fail=1; fi
}

cmake --install "$build" --prefix "$prefix" > "$tmp/install.log" 2>&1; rc=$?
check "cmake --install succeeds" '[ $rc -eq 0 ] || { cat "$tmp/install.log"; false; }'
for f in bin/graphpipe-plan bin/graphpipe-executor bin/graphpipe-profile bin/graphpipe-launch; do
  check "$f is installed and executable" '[ -x "$prefix/$f" ]'
done
check "the cluster presets are installed" '[ -f "$prefix/share/graphpipe/clusters/dgx-h100.pbtxt" ]'
check "the docs are installed" \
  '[ -f "$prefix/share/doc/graphpipe/README.md" ] && [ -f "$prefix/share/doc/graphpipe/planner.md" ]'

# Only the prefix on PATH; the programs run from a directory outside the source tree.
export PATH="$prefix/bin:/usr/bin:/bin"
cd "$tmp"

# An installed binary reads the presets installed beside it: one that exists only there works.
sed 's/^name: .*/name: "install-only"/' "$prefix/share/graphpipe/clusters/cpu-local.pbtxt" \
  > "$prefix/share/graphpipe/clusters/install-only.pbtxt"
graphpipe-plan --log-level warn search --model zoo:tiny-mmt --cluster install-only --devices 2 \
  --batch 16 --micro-batches 4 --optimizer sgd --out "$tmp/plan.pb" > "$tmp/search.log" 2>&1; rc=$?
check "the installed planner finds a preset installed beside it" \
  '[ $rc -eq 0 ] && [ -s "$tmp/plan.pb" ] || { cat "$tmp/search.log"; false; }'
"$build/bin/graphpipe-plan" search --model zoo:tiny-mmt --cluster install-only --devices 2 \
  --batch 16 --out "$tmp/no.pb" > "$tmp/build-search.log" 2>&1; rc=$?
check "the build tree's planner reads the source presets, not the prefix" \
  '[ $rc -eq 2 ] && grep -q "install-only" "$tmp/build-search.log"'

# The installed launcher starts the installed executor (no build/ under the prefix).
graphpipe-launch --plan "$tmp/plan.pb" --nprocs 2 --iterations 2 \
  --log-dir "$tmp/runs" > "$tmp/launch.log" 2>&1; rc=$?
check "the installed launcher trains the plan with the installed executor" \
  '[ $rc -eq 0 ] && grep -q "summary: 2 iterations" "$tmp/launch.log" || { tail -20 "$tmp/launch.log"; false; }'

# Man pages: from --help, with every subcommand's options.
man1=$prefix/share/man/man1
for p in graphpipe-plan graphpipe-executor graphpipe-profile; do
  check "man page $p.1 is installed" '[ -s "$man1/$p.1" ]'
done
check "graphpipe-plan.1 has a SUBCOMMANDS section with search and its --devices" \
  'grep -q "^\.SH SUBCOMMANDS" "$man1/graphpipe-plan.1" && grep -q "^\.SS search" "$man1/graphpipe-plan.1" && grep -q -- "--devices" "$man1/graphpipe-plan.1"'
check "graphpipe-executor.1 names the program in its synopsis and documents run --plan" \
  'grep -q "graphpipe-executor" "$man1/graphpipe-executor.1" && grep -q "^\.SS run" "$man1/graphpipe-executor.1" && grep -q -- "--plan" "$man1/graphpipe-executor.1"'
if command -v groff > /dev/null; then
  check "graphpipe-plan.1 renders without roff warnings" \
    '[ -z "$(groff -man -Tutf8 -ww -z "$man1/graphpipe-plan.1" 2>&1)" ]'
fi

# Bash completion, as bash-completion loads it (the file named after the command).
complete_words() {  # complete_words WORD... : what TAB offers after the last word
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _graphpipe
           printf "%s\n" "${COMPREPLY[@]}"' _ \
    "$prefix/share/bash-completion/completions/$1" "$@"
}
check "completion: graphpipe-plan se -> search" '[ "$(complete_words graphpipe-plan se)" = search ]'
check "completion: graphpipe-plan --log-level warn in -> inspect (a flag value is no subcommand)" \
  '[ "$(complete_words graphpipe-plan --log-level warn in)" = inspect ]'
check "completion: graphpipe-plan search --dev -> --devices among others" \
  'grep -qx -- --devices <<< "$(complete_words graphpipe-plan search --dev)"'
check "completion: graphpipe-plan search --micro-b -> search's flag, not another command's" \
  '[ "$(complete_words graphpipe-plan search --micro-b)" = --micro-batches ]'
check "completion: graphpipe-executor run --pl -> --plan" \
  'grep -qx -- --plan <<< "$(complete_words graphpipe-executor run --pl)"'
check "completion: graphpipe-launch --npr -> --nprocs among others" \
  'grep -qx -- --nprocs <<< "$(complete_words graphpipe-launch --npr)"'
check "completion: after a subcommand a plain word completes as a file name (nothing offered)" \
  '[ -z "$(complete_words graphpipe-plan search pla)" ]'

exit $fail
