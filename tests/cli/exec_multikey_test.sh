#!/usr/bin/env bash
# dlock exec with several keys (--key): one canonical order, so two commands
# asking for {a, b} and {b, a} in a loop never deadlock; all or nothing;
# every token exported. And --max-hold.
source "$(dirname "$0")/lib.sh"
LOG="$WORK/log"
: >"$LOG"

RUNS=$(repeats 100)
loop() {  # loop FIRST SECOND TAG
  local i
  for ((i = 0; i < RUNS; i++)); do
    "$DLOCK" exec "$1" --key "$2" --wait 60s -- \
      sh -c 'echo "start $0" >>"$1"; echo "end $0" >>"$1"' "$3" "$LOG" || return 1
  done
}
loop a b ab & p1=$!
loop b a ba & p2=$!
wait $p1 || fail "the {a, b} loop failed"
wait $p2 || fail "the {b, a} loop failed"
[ "$(wc -l <"$LOG")" = $((4 * RUNS)) ] || fail "log has $(wc -l <"$LOG") lines, want $((4 * RUNS))"
awk '$1=="start"{if(open){print "overlap at " NR; bad=1} open=1} $1=="end"{open=0} END{exit bad}' "$LOG" ||
  fail "two holders of {a, b} overlapped"

# Every key's token is exported; DLOCK_KEY is the primary (positional) key.
out=$("$DLOCK" exec zeta --key alpha -- sh -c 'echo "$DLOCK_KEY $DLOCK_KEY_COUNT $DLOCK_KEY_0 $DLOCK_KEY_1 ${DLOCK_TOKEN_0:+t0} ${DLOCK_TOKEN_1:+t1}"')
[ "$out" = "zeta 2 alpha zeta t0 t1" ] || fail "environment with two keys: '$out'"

# All or nothing: c is held elsewhere, so {a, c} gives up and leaves a free.
"$DLOCK" exec c --ttl 30s -- sleep 30 &
holder=$!
for _ in $(seq 1200); do "$DLOCK" status c --json | grep -q '"key": "c"' && break; sleep 0.05; done
expect_exit 75 "gave up waiting for key 'c'" -- "$DLOCK" exec a --key c --wait 200ms -- true
held=$("$DLOCK" status --json | "$PYTHON3" -c 'import json,sys; print(" ".join(r["key"] for r in json.load(sys.stdin)))')
[ "$held" = "c" ] || fail "after a failed multi-key acquire, held: '$held'"
kill -TERM $holder
wait $holder

# --max-hold: renewals stop, the lease lapses, the command is terminated.
"$DLOCK" exec hung --ttl 600ms --max-hold 500ms -- sleep 30 2>"$WORK/hung.err"
rc=$?
[ "$rc" = 79 ] || fail "max-hold exec exited $rc, want 79"
grep -q "its max hold 500ms was reached" "$WORK/hung.err" || fail "no max-hold reason: $(cat "$WORK/hung.err")"
expect_exit 64 "--max-hold must be positive" -- "$DLOCK" exec k --max-hold 0s -- true
finish
