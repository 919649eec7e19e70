#!/usr/bin/env bash
# A holder stopped (SIGSTOP) past its TTL on etcd: its session lease expires
# server-side, the next holder gets the lock with a larger token, and the
# holder, resumed, learns at once that it lost: `dlock exec` kills its child
# and exits 79. Needs the etcd fixture ($DLOCK_TEST_URI_FILE).
source "$(dirname "$0")/lib.sh"
export DLOCK_BACKEND=$(cat "${DLOCK_TEST_URI_FILE:?needs the etcd fixture}")
name="pause-$$-$RANDOM"
now_ms() { date +%s%3N; }
# What one uncontended `dlock exec` costs here (start, connect, acquire,
# release): the bounds below are a few of these on top of a fixed part,
# so that a slow build or a busy machine moves them.
cost=$(slowest_ms 3 "$DLOCK" exec "$name-probe" --ttl 2s -- true) || {
  fail "an uncontended dlock exec failed"
  finish
}

"$DLOCK" exec "$name" --ttl 2s -- \
  sh -c 'echo $$ >"$0.pid"; echo "$DLOCK_TOKEN" >"$0.tmp"; mv "$0.tmp" "$0"; exec sleep 60' "$WORK/first" \
  2>"$WORK/first.err" &
holder=$!
for ((i = 0; i < 200; i++)); do [ -s "$WORK/first" ] && break; sleep 0.05; done
[ -s "$WORK/first" ] || { fail "the first holder never started"; finish; }
first=$(cat "$WORK/first")

# The key as the store lists it: 0 while it is held, 1 once it is not, 2
# when the listing itself failed (a loaded machine: look again).
held() {
  local out
  out=$("$DLOCK" status "$name" --json 2>/dev/null) || return 2
  printf '%s' "$out" | grep -q "\"key\": \"$name\""
}
key_gone() { held; [ $? = 1 ]; }

kill -STOP "$holder"
stopped=$(now_ms)
# etcd ends the lease once its TTL has passed since the last renewal it
# heard, by a check every half second that a busy machine delays: watch
# for the key to go rather than guess how long that takes.
wait_for 60 key_gone || {
  fail "the stopped holder's key was still held 60 s after its 2 s lease"
  kill -CONT "$holder"
  finish
}
expired=$(($(now_ms) - stopped))  # reported: when the last renewal was is not known here

start=$(now_ms)
second=$("$DLOCK" exec "$name" --ttl 2s --wait 5s -- sh -c 'echo "$DLOCK_TOKEN"')
rc=$?
[ "$rc" = 0 ] || fail "the second holder exited $rc"
# The key is free: about one exec.
[ "$(($(now_ms) - start))" -lt $((1000 + 2 * cost)) ] || fail "the second holder waited $(($(now_ms) - start)) ms for a free key (one exec: $cost ms)"
[ "${second:-0}" -gt "$first" ] || fail "token $second is not above the stopped holder's $first"

resumed=$(now_ms)
kill -CONT "$holder"
wait "$holder"
rc=$?
took=$(($(now_ms) - resumed))
[ "$rc" = 79 ] || fail "the resumed holder exited $rc, want 79 (lease lost): $(cat "$WORK/first.err")"
# One renewal round trip, a signal to its child and an exit.
[ "$took" -lt $((1000 + 4 * cost)) ] || fail "the resumed holder took $took ms to notice (one exec costs $cost ms)"
grep -q "lost" "$WORK/first.err" || fail "no loss message: $(cat "$WORK/first.err")"
child=$(cat "$WORK/first.pid")
if kill -0 "$child" 2>/dev/null; then fail "the child $child survived the lost lease"; kill -9 "$child"; fi
echo "lease ended ${expired} ms after the stop; tokens $first then $second; resumed holder exited 79 after ${took} ms (one exec: $cost ms)"
finish
