#!/usr/bin/env bash
# The generated man pages (cmake/dlock_man.sh): one for dlock and one per
# subcommand `dlock --help` lists, each showing its command's flags, and
# `man --warnings` renders every one without a warning.
#
#   man_test.sh <dlock binary> <directory of the pages>
set -u
DLOCK=${1:?usage: man_test.sh <dlock binary> <man1 directory>}
MAN_DIR=${2:?}
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
export MANWIDTH=80 LC_ALL=C.UTF-8

subcommands=$("$DLOCK" --help | awk '/^Subcommands:/ { on = 1; next }
                                    on && /^  [a-z]/ { print $1 }
                                    on && /^$/ { exit }')
# A page, rendered: hyphenation and the page's own escapes out of the way.
render() { man -l "$1" 2>/dev/null | col -b | tr -s ' \n' ' '; }
# Flags in `dlock <words> --help`, as names.
flags() {
  "$DLOCK" "$@" --help | awk '/^Options:/ { on = 1; next } on && /^$/ { exit }
                              on && /^  -/ { split($1, n, ","); print n[length(n)] }'
}

for page in dlock $(printf 'dlock-%s\n' $subcommands); do
  file="$MAN_DIR/$page.1"
  if [ ! -f "$file" ]; then
    fail "no page $page.1"
    continue
  fi
  warnings=$(man --warnings -l "$file" 2>&1 >/dev/null)
  [ -z "$warnings" ] || fail "$page.1: man --warnings: $warnings"
  text=$(render "$file")
  sub=${page#dlock}
  sub=${sub#-}
  for flag in $(flags $sub); do
    [[ $text == *"$flag"* ]] || fail "$page.1 does not show $flag"
  done
  echo "ok: $page.1 renders clean, with every flag"
done
text=$(render "$MAN_DIR/dlock.1")
for sub in $subcommands; do
  [[ $text == *"$sub"* ]] && grep -q "^\.BR dlock-$sub (1)" "$MAN_DIR/dlock.1" ||
    fail "dlock.1 does not list or refer to $sub"
done
[[ $text == *"$("$DLOCK" --version)"* ]] || fail "dlock.1 does not carry $("$DLOCK" --version)"

[ "$failures" = 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo "all ok"
