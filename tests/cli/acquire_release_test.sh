#!/usr/bin/env bash
# dlock acquire / dlock release: a lock that outlives the command that took
# it, held by a detached holder and ended by its handle from a later step —
# across processes, after the holder is killed with -9, interrupted while
# waiting, and refused bad input without leaving anything held.
source "$(dirname "$0")/lib.sh"
use_fixture_store
export XDG_RUNTIME_DIR="$WORK/run"
mkdir -m 700 "$XDG_RUNTIME_DIR"

held_json() { "$DLOCK" status "$1" --json 2>/dev/null; }
is_held() { held_json "$1" | grep -q "\"key\": \"$1\""; }
# The holder's pid, from its label (host:pid).
holder_pid() { held_json "$1" | sed -n 's/.*"label": "[^"]*:\([0-9]*\)".*/\1/p' | head -1; }
sockets() { find "$XDG_RUNTIME_DIR/dlock" -name '*.sock' 2>/dev/null | wc -l; }

# A TTL renewals get through on this machine now, at least 2 s.
ttl_ms=$(renewable_ttl_ms 2000) || fail "exec probe failed"

# Held after the command returned, by one holder, with the token it printed;
# renewed past twice its TTL; others are refused meanwhile.
h=$("$DLOCK" acquire build --ttl "${ttl_ms}ms" 3>"$WORK/fd3") || fail "acquire failed"
echo "handle: $h"
[[ "$h" =~ ^build:[0-9a-f]{32}:[0-9]+$ ]] || fail "handle '$h' is not KEY:OWNER:TOKEN"
token=${h##*:}
is_held build || fail "nothing holds 'build' after acquire returned"
[ "$(held_json build | sed -n 's/.*"token": \([0-9]*\).*/\1/p')" = "$token" ] ||
  fail "the store's token is not the handle's $token: $(held_json build)"
pid=$(holder_pid build)
[ -n "$pid" ] && kill -0 "$pid" || fail "no holder process ($pid)"
ls -l "/proc/$pid/fd" | grep -q fd3 && fail "the holder kept the caller's descriptor 3 open"
[ "$(ps -o sid= -p "$pid" | tr -d ' ')" = "$pid" ] || fail "the holder has no session of its own"
sleep "$(awk -v t="$ttl_ms" 'BEGIN { print 2.5 * t / 1000 }')"
is_held build || fail "the lease was not renewed past 2.5 ttls"
expect_exit 75 "held by another owner" -- "$DLOCK" exec build --no-wait -- true

# Released from another process by the handle; the holder is gone and the key
# free; a second release says no holder (79).
expect_exit 0 "" -- "$DLOCK" release "$h"
wait_for 20 sh -c "! kill -0 $pid 2>/dev/null" || fail "the holder $pid outlived its release"
is_held build && fail "'build' is still held after release"
[ "$(sockets)" = 0 ] || fail "a socket was left: $(ls "$XDG_RUNTIME_DIR/dlock")"
expect_exit 0 "" -- "$DLOCK" exec build --no-wait -- true
expect_exit 79 "no holder of key 'build'" -- "$DLOCK" release "$h"

# --format env: eval-able exports; release takes $DLOCK_HANDLE, and the
# token fences a write; a key with spaces and a colon survives the trip.
eval "$("$DLOCK" acquire 'odd key:1' --format env)" || fail "acquire --format env failed"
[ "$DLOCK_KEY" = 'odd key:1' ] || fail "DLOCK_KEY is '$DLOCK_KEY'"
[ -n "$DLOCK_TOKEN" ] || [[ "${DLOCK_BACKEND:-}" == redlock* ]] || fail "no DLOCK_TOKEN"
[[ "$DLOCK_HANDLE" != *' '* ]] || fail "the handle '$DLOCK_HANDLE' is not one word"
is_held 'odd key:1' || fail "'odd key:1' is not held"
if [ -n "$DLOCK_TOKEN" ]; then
  mkdir "$WORK/out"
  echo data | "$DLOCK" fence write --dir "$WORK/out" report.csv || fail "fenced write refused"
fi
expect_exit 0 "" -- "$DLOCK" release
unset DLOCK_HANDLE DLOCK_KEY DLOCK_TOKEN

# A holder killed with -9: the lease expires as usual (a waiter gets the key
# within its wait), and the handle reports the loss.
h=$("$DLOCK" acquire crash --ttl "${ttl_ms}ms") || fail "acquire crash failed"
pid=$(holder_pid crash)
kill -9 "$pid"
expect_exit 0 "" -- "$DLOCK" exec crash --wait 60s -- true
expect_exit 79 "its lease was lost" -- "$DLOCK" release "$h"

# Interrupted while waiting: the waiting holder gives up, nothing is left
# behind, and the first holder's key stays its own.
h=$("$DLOCK" acquire busy) || fail "acquire busy failed"
"$DLOCK" acquire busy --wait 60s >"$WORK/second" 2>"$WORK/second.err" &
waiter=$!
# Interrupt only once it listens: a background job starts with SIGINT
# ignored (the shell's rule), and acquire blocks it (then reads it) before
# it starts its holder. Earlier, the signal would be lost, not tested.
wait_for 30 sh -c "[ \$(( 0x\$(awk '/^SigBlk:/ { print \$2 }' /proc/$waiter/status) & 2 )) != 0 ] &&
  pgrep -P $waiter >/dev/null" || fail "the waiting acquire never blocked SIGINT or forked"
kill -INT "$waiter"
wait "$waiter"
code=$?
[ "$code" = 130 ] || fail "an interrupted acquire exited $code, want 130: $(cat "$WORK/second.err")"
[ -s "$WORK/second" ] && fail "an interrupted acquire printed a handle: $(cat "$WORK/second")"
expect_exit 0 "" -- "$DLOCK" release "$h"
wait_for 20 sh -c "! '$DLOCK' status busy --json | grep -q '\"key\": \"busy\"'" ||
  fail "the interrupted waiter took 'busy' after all"
wait_for 20 sh -c "[ \$(find '$XDG_RUNTIME_DIR/dlock' -name '*.sock' | wc -l) = 0 ]" ||
  fail "holders left behind: $(ls "$XDG_RUNTIME_DIR/dlock")"

# Refused: a held key with --no-wait (75, no holder left), bad flags and
# handles (64), and a holders' directory others may enter (77, the lock
# given back).
h=$("$DLOCK" acquire taken) || fail "acquire taken failed"
expect_exit 75 "held by another owner" -- "$DLOCK" acquire taken --no-wait
[ "$(sockets)" = 1 ] || fail "a refused acquire left a holder: $(ls "$XDG_RUNTIME_DIR/dlock")"
expect_exit 0 "" -- "$DLOCK" release "$h"
expect_exit 64 "--format 'xml' is not one of: word, env" -- "$DLOCK" acquire k --format xml
expect_exit 64 "--ttl" -- "$DLOCK" acquire k --ttl 5
expect_exit 64 "no key given" -- "$DLOCK" acquire
expect_exit 64 "is not a handle" -- "$DLOCK" release nonsense
expect_exit 64 "is not a handle" -- "$DLOCK" release "k:$(printf '0%.0s' {1..32}):x"
expect_exit 64 "is not a handle" -- "$DLOCK" release "a%zz:0123456789abcdef0123456789abcdef:1"
expect_exit 64 "no handle given" -- "$DLOCK" release
chmod 755 "$XDG_RUNTIME_DIR/dlock"
expect_exit 77 "not a private directory" -- "$DLOCK" acquire opened
is_held opened && fail "a refused acquire left 'opened' held"
chmod 700 "$XDG_RUNTIME_DIR/dlock"
finish
