#!/usr/bin/env bash
# The generated bash completion (cmake/dlock_completion.sh), driven as bash
# drives it: COMP_WORDS and COMP_CWORD set, _dlock called, COMPREPLY read.
#
#   completion_test.sh <dlock binary> <completion file>
set -u
DLOCK=${1:?usage: completion_test.sh <dlock binary> <completion file>}
COMPLETION=${2:?}
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlock-completion-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# complete WORDS...: what completing the last word offers, sorted, one line.
complete_words() {
  (cd "$WORK" && bash -c 'source "$0"; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _dlock
                          printf "%s\n" "${COMPREPLY[@]}" | sort -u | tr "\n" " "' \
     "$COMPLETION" "$@")
}
# expect 'offered words' WORDS...
expect() {
  local want=$1 got
  shift
  got=$(complete_words "$@")
  got=${got% }
  if [ "$got" = "$want" ]; then
    echo "ok: '$*' -> $got"
  else
    fail "'$*' offers '$got', want '$want'"
  fi
}

subcommands=$("$DLOCK" --help | awk '/^Subcommands:/ { on = 1; next }
                                    on && /^  [a-z]/ { print $1 }
                                    on && /^$/ { exit }' | sort | tr '\n' ' ')
expect "--help --version -h $(echo $subcommands)" dlock ""
expect "exec" dlock ex
expect "--ttl" dlock exec orders/42 --tt
expect "--backend --breaks --count --help --interval --json --waits --watch" dlock status --backend sqlite:///tmp/x.db --
expect "write" dlock fence w
expect "--dir" dlock fence write --d
expect "--help --version" dlock --
touch "$WORK/urifile"
expect "urifile" dlock exec k --backend ur        # a flag's value: file names
expect "" dlock exec k --ttl 10s -- nosuchcommandxyz  # a command's words
# Every flag of every subcommand is offered after it.
for sub in $subcommands; do
  for flag in $("$DLOCK" "$sub" --help | awk '/^Options:/ { on = 1; next } on && /^$/ { exit }
                                                 on && /^  -/ { split($1, n, ","); print n[length(n)] }'); do
    [[ " $(complete_words dlock "$sub" "$flag") " == *" $flag "* ]] ||
      fail "dlock $sub $flag is not offered"
  done
done

[ "$failures" = 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo "all ok"
