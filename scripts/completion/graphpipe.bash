# Bash completion for graphpipe-plan, graphpipe-executor, graphpipe-profile and graphpipe-launch.
# Subcommands and flags come from the program's own --help each time, so they never go stale;
# a flag's value and everything else complete as file names. Installed to
# share/bash-completion/completions (one link per program); from a source tree:
#   source scripts/completion/graphpipe.bash

# The words of section $2 ("Subcommands" or "Options") of help text $1: subcommand names, or
# every --flag and -f a line mentions.
_graphpipe_help_words() {
  local section=$2
  if [ "$section" = Subcommands ]; then
    printf '%s\n' "$1" | sed -n '/^Subcommands:/,/^$/p' | awk 'NR > 1 && NF { print $1 }'
  else
    # CLI11 writes "  -h,--help", "  --devices INT:..." and "  --tls-cert TEXT"; the launcher
    # writes its usage lines as "  --plan FILE".
    printf '%s\n' "$1" | grep -oE '(^|[ ,])--?[A-Za-z][A-Za-z0-9-]*' | sed 's/^[ ,]*//' | sort -u
  fi
}

_graphpipe() {
  local cur=${COMP_WORDS[COMP_CWORD]} prog=${COMP_WORDS[0]} help subs sub="" i w
  COMPREPLY=()
  help=$("$prog" --help 2>/dev/null) || return 0
  subs=$(_graphpipe_help_words "$help" Subcommands)
  # The subcommand: the first word before the cursor that is one.
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=${COMP_WORDS[i]}
    if [ -n "$subs" ] && printf '%s\n' "$subs" | grep -qxF -- "$w"; then
      sub=$w
      help=$("$prog" "$sub" --help 2>/dev/null) || return 0
      break
    fi
  done
  if [[ $cur == -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$(_graphpipe_help_words "$help" Options)" -- "$cur")
  elif [ -z "$sub" ] && [ -n "$subs" ]; then
    mapfile -t COMPREPLY < <(compgen -W "$subs" -- "$cur")
  fi
  # Nothing matched: bash's default (file names), as `complete -o default` asks.
  return 0
}

complete -o default -F _graphpipe graphpipe-plan graphpipe-executor graphpipe-profile \
  graphpipe-launch
