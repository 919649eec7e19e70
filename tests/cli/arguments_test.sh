#!/usr/bin/env bash
# How dlock reads a command line (issue 17): from the command's first word
# on everything is the command's, with or without --; every key may come
# from --key; unknown words and options are named with a suggestion; a
# duration beyond what a clock can hold is refused; a key full of terminal
# escapes is printed escaped, never acted on.
source "$(dirname "$0")/lib.sh"

# The command's own flags stay the command's.
out=$("$DLOCK" exec k echo hello --ttl 5s)
[ "$out" = "hello --ttl 5s" ] || fail "exec k echo hello --ttl 5s printed '$out'"
out=$("$DLOCK" exec k --ttl 5s -- echo --backend x)
[ "$out" = "--backend x" ] || fail "after --, '--backend x' is the command's; printed '$out'"
# With --backend after the command word, dlock must not lock in that store.
out=$("$DLOCK" exec k sh -c 'echo "$DLOCK_BACKEND"' --backend "sqlite://$WORK/other.db")
[ "$out" = "sqlite://$XDG_STATE_HOME/dlock/locks.db" ] || fail "a command's --backend moved the lock: $out"
[ -e "$WORK/other.db" ] && fail "a command's --backend opened another store"
out=$("$DLOCK" once job/1 echo done --wait 1s)
[ "$out" = "done --wait 1s" ] || fail "once job/1 echo done --wait 1s printed '$out'"
echo "ok: every word from the command on is the command's"

# A flag takes no value: the option after it keeps its own (CLI11 2.1 says a
# flag has a value's size, and --no-wait once swallowed the --ttl after it).
out=$("$DLOCK" exec k --no-wait --ttl 5s -- echo ran)
[ "$out" = ran ] || fail "exec k --no-wait --ttl 5s -- echo ran printed '$out'"
out=$("$DLOCK" exec k --shared --label reader --ttl 5s echo ran)
[ "$out" = ran ] || fail "exec k --shared --label reader --ttl 5s echo ran printed '$out'"
echo "ok: a flag before an option with a value"

# Every key from --key.
out=$("$DLOCK" exec --key a --key b -- sh -c 'echo "$DLOCK_KEY_COUNT $DLOCK_KEY_0 $DLOCK_KEY_1"')
[ "$out" = "2 a b" ] || fail "exec --key a --key b -- CMD: '$out'"
expect_exit 64 "no key given" -- "$DLOCK" exec -- true
expect_exit 64 "no command given" -- "$DLOCK" exec k
expect_exit 64 "no command given" -- "$DLOCK" exec k --

# Unknown words are named, with the nearest known one.
expect_exit 64 "unknown command 'stauts' for 'dlock'; did you mean 'status'?" -- "$DLOCK" stauts
expect_exit 64 "unknown command 'wirte' for 'dlock fence'; did you mean 'write'?" -- "$DLOCK" fence wirte
expect_exit 64 "unknown option '--tll' for 'dlock exec'; did you mean '--ttl'?" -- "$DLOCK" exec k --tll 5s -- true
expect_exit 64 "unknown option '--jsn' for 'dlock status'; did you mean '--json'?" -- "$DLOCK" status --jsn
expect_exit 64 "unknown command 'xyzzy' for 'dlock' (see 'dlock --help')" -- "$DLOCK" xyzzy

# Durations a clock cannot hold: refused, naming the maximum.
expect_exit 64 "--wait: invalid duration '2600000h' (longer than the maximum, 8760h" -- \
  "$DLOCK" exec k --wait 2600000h -- true
expect_exit 64 "--max-hold: invalid duration '2600000h' (longer than the maximum, 8760h" -- \
  "$DLOCK" exec k --max-hold 2600000h -- true
out=$("$DLOCK" exec k --wait 8760h --max-hold 8760h -- echo ok)
[ "$out" = ok ] || fail "the longest durations were refused: '$out'"

# A key with terminal escapes is printed escaped: no ESC, BEL, CR or C1
# control reaches the terminal from status, leader or a message.
key=$(printf 'evil\033]0;pwned\007\rFAKE\xc2\x9b')
"$DLOCK" exec "$key" --ttl 30s -- sleep 30 &
holder=$!
wait_for 30 sh -c "'$DLOCK' status evil | grep -q evil" || fail "the holder never showed"
controls() { LC_ALL=C grep -c "$(printf '[\001-\010\013-\037\177]\\|\302[\200-\237]')" "$1"; }
"$DLOCK" status >"$WORK/status.out"
"$DLOCK" leader "$key" >"$WORK/leader.out"
"$DLOCK" exec "$key" --no-wait -- true 2>"$WORK/msg.out"
"$DLOCK" status --waits >"$WORK/waits.out"
for f in status leader msg waits; do
  [ "$(controls "$WORK/$f.out")" = 0 ] || fail "$f printed a control character: $(cat -v "$WORK/$f.out")"
done
grep -qF 'evil\x1b]0;pwned\x07\x0dFAKE\xc2\x9b' "$WORK/status.out" || fail "status: $(cat "$WORK/status.out")"
grep -qF "key 'evil\\x1b]0;pwned" "$WORK/msg.out" || fail "message: $(cat "$WORK/msg.out")"
[ "$(wc -l <"$WORK/status.out")" = 2 ] || fail "status printed a fake row: $(cat -v "$WORK/status.out")"
kill "$holder"; wait "$holder" 2>/dev/null
echo "ok: keys are printed escaped"
finish
