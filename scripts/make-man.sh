#!/usr/bin/env bash
# make-man.sh BINARY OUT.1: a man page from BINARY's own --help (help2man), with a SUBCOMMANDS
# section holding each subcommand's --help, so that `man graphpipe-plan` says what
# `graphpipe-plan search --help` does. Run by the build (target `man`), installed to man1.
set -euo pipefail
bin=$1 out=$2
mkdir -p "$(dirname "$out")"
name=$(basename "$bin")
# Called by name from PATH, so that its usage line names the program, not the build directory.
PATH="$(cd "$(dirname "$bin")" && pwd):$PATH"
bin=$name
include=$(mktemp)
trap 'rm -f "$include"' EXIT
# The subcommands are the words listed under "Subcommands:" in the top-level --help.
subs=$("$bin" --help | sed -n '/^Subcommands:/,/^$/p' | awk 'NR > 1 && NF { print $1 }')
{
  echo "[SUBCOMMANDS]"
  for s in $subs; do
    echo ".SS $s"
    echo ".nf"
    # Lines starting with a dot or a quote would be read as roff requests: escape them.
    "$bin" "$s" --help | sed 's/\\/\\\\/g; s/^\([.'"'"']\)/\\\&\1/'
    echo ".fi"
  done
  echo "[SEE ALSO]"
  echo "graphpipe-plan(1), graphpipe-executor(1), graphpipe-profile(1); README.md and docs/ of the source."
} > "$include"
help2man --no-info --no-discard-stderr --name "$("$bin" --help | head -1 | sed 's/^[^:]*: *//')" \
  --include "$include" --output "$out" "$name"
