#!/usr/bin/env bash
# Writes bash completion for the dlock command to OUTPUT, from its
# own --help: the subcommands (two levels: `dlock fence write`) and each
# one's flags. A flag shown with a value (`--ttl TEXT=30s`) completes file
# names for its value; after `--` the words are a command's.
#
#   dlock_completion.sh <dlock binary> <output>
set -euo pipefail
dlock=${1:?usage: dlock_completion.sh <dlock binary> <output>}
mkdir -p "$(dirname "${2:?}")"
exec >"$2.tmp"

# subcommands <words...>: the subcommands `dlock <words> --help` lists.
subcommands() {
  "$dlock" "$@" --help | awk '/^Subcommands:/ { on = 1; next }
                               on && /^  [a-z]/ { print $1 }
                               on && /^$/ { exit }'
}
# flags <words...>: "name" or "name=" (takes a value) per flag of the
# options section of `dlock <words> --help`.
flags() {
  "$dlock" "$@" --help | awk '
    /^Options:/ { on = 1; next }
    on && /^$/ { exit }
    on && /^  -/ {
      # The flag names and value type, up to the gap before the help text.
      spec = substr($0, 3)
      sub(/  .*/, "", spec)
      split(spec, part, " ")
      value = (part[2] ~ /^[A-Z]+([=:[].*)?$/) ? "=" : ""
      n = split(part[1], names, ",")
      for (i = 1; i <= n; i++) print names[i] value
    }'
}

# case_arm <path> <words...>: one arm of the case on the subcommand path.
case_arm() {
  local path=$1 words subs flag names="" valued=""
  shift
  subs=$(subcommands "$@" | tr '\n' ' ')
  for flag in $(flags "$@"); do
    names="$names ${flag%=}"
    [ "${flag%=}" = "$flag" ] || valued="$valued ${flag%=}"
  done
  words="$subs${names# }"
  printf '    "%s") words="%s"; valued="%s" ;;\n' "$path" "${words% }" "${valued# }"
}

version=$("$dlock" --version)
cat <<HEAD
# bash completion for dlock, generated from \`dlock --help\` ($version)
# by cmake/dlock_completion.sh.
_dlock() {
  local cur=\${COMP_WORDS[COMP_CWORD]} prev=\${COMP_WORDS[COMP_CWORD - 1]}
  local path="" words="" valued="" i word
  # The subcommand path so far: the words naming subcommands, flags and
  # their values skipped; after -- come a command's own words.
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=\${COMP_WORDS[i]}
    if [ "\$word" = "--" ]; then
      if declare -F _command_offset >/dev/null; then
        _command_offset \$((i + 1))
      else
        COMPREPLY=(\$(compgen -c -- "\$cur"))
      fi
      return 0
    fi
    _dlock_words "\$path"
    if [[ " \$words " == *" \$word "* && \$word != -* ]]; then
      path="\${path:+\$path }\$word"
    fi
  done
  _dlock_words "\$path"
  if [[ " \$valued " == *" \$prev "* ]]; then
    COMPREPLY=(\$(compgen -f -- "\$cur"))
    return 0
  fi
  COMPREPLY=(\$(compgen -W "\$words" -- "\$cur"))
}
# _dlock_words <path>: sets words (subcommands and flags) and valued (the
# flags that take a value) for the subcommand path.
_dlock_words() {
  case \$1 in
HEAD
case_arm ""
for sub in $(subcommands); do
  case_arm "$sub" "$sub"
  for subsub in $(subcommands "$sub"); do
    case_arm "$sub $subsub" "$sub" "$subsub"
  done
done
cat <<'TAIL'
    *) words=""; valued="" ;;
  esac
}
complete -F _dlock dlock
TAIL
mv "$2.tmp" "$2"
