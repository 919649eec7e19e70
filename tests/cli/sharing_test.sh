#!/usr/bin/env bash
# Issue #10 end to end: `dlock exec --shared` (readers share, a writer
# excludes them and is not starved), `--permits N`, `dlock status --waits`
# naming a deadlock cycle built with nested `dlock exec` (the child inherits
# DLOCK_SESSION) and telling a slow holder apart, and `dlock leader`.
# Against a server store when run with its fixture ($DLOCK_TEST_URI_FILE).
# Nothing here asserts on durations: processes wait for each other through
# marker files, each wait bounded so that a broken lock fails instead of
# hanging.
source "$(dirname "$0")/lib.sh"
use_fixture_store
P="sharing-$$-$RANDOM"  # key prefix: fresh on a long-lived server
M="$WORK/m"
mkdir -p "$M"

# await FILE: wait (at most 30 s) for a marker file.
await() {
  local i
  for ((i = 0; i < 600; i++)); do [ -e "$1" ] && return 0; sleep 0.05; done
  fail "timed out waiting for $1"
  return 1
}
# A holder that marks itself in and stays until told to go:
#   hold NAME [exec flags] KEY
hold() {
  local name=$1
  shift
  "$DLOCK" exec "$@" --ttl 3s --wait 30s -- \
    sh -c 'touch "$0.in"; i=0; while [ ! -e "$0.go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done' \
    "$M/$name"
}

# --- Readers share: each stays until the other is in, so both exit only if
# they overlapped.
hold r1 --shared "$P/rw" & r1=$!
hold r2 --shared "$P/rw" & r2=$!
await "$M/r1.in" && await "$M/r2.in"
expect_exit 75 "" -- "$DLOCK" exec "$P/rw" --no-wait -- true   # a writer is kept out
touch "$M/r1.go" "$M/r2.go"
wait $r1 || fail "reader 1 exited $?"
wait $r2 || fail "reader 2 exited $?"

# --- A waiting writer is not starved: readers that come after it wait.
hold r3 --shared "$P/rw" & r3=$!
await "$M/r3.in"
hold w1 "$P/rw" & w1=$!
for ((i = 0; i < 600; i++)); do
  "$DLOCK" status --waits --json "$P/rw" 2>/dev/null | grep -q '"verdict"' && break
  sleep 0.05
done
expect_exit 75 "" -- "$DLOCK" exec "$P/rw" --shared --no-wait -- true
[ -e "$M/w1.in" ] && fail "the writer got in while a reader held the key"
touch "$M/r3.go"
await "$M/w1.in"
touch "$M/w1.go"
wait $r3 || fail "reader 3 exited $?"
wait $w1 || fail "writer exited $?"

# --- A semaphore of 2 permits.
hold s1 --permits 2 "$P/sem" & s1=$!
hold s2 --permits 2 "$P/sem" & s2=$!
await "$M/s1.in" && await "$M/s2.in"
expect_exit 75 "" -- "$DLOCK" exec "$P/sem" --permits 2 --no-wait -- true
"$DLOCK" status --json "$P/sem" >"$WORK/sem.json" || fail "status exited $?"
[ "$(grep -c '"mode": "permits 2"' "$WORK/sem.json")" = 2 ] || fail "status: $(cat "$WORK/sem.json")"
touch "$M/s1.go" "$M/s2.go"
wait $s1 || fail "permit holder 1 exited $?"
wait $s2 || fail "permit holder 2 exited $?"
expect_exit 64 "permits" -- "$DLOCK" exec "$P/sem" --permits 0 -- true
expect_exit 64 "do not combine" -- "$DLOCK" exec "$P/sem" --permits 2 --shared -- true

# --- A deadlock cycle, built by hand: each party holds one key and, inside,
# waits for the other's (the nested dlock inherits DLOCK_SESSION, so it is
# the same party). Plus a party waiting behind a slow, live holder.
# Each takes its second key only once the other holds its first: without
# that, one could take both before the other starts, and there would be no
# deadlock to find.
cross() {  # cross NAME FIRST SECOND OTHER (exec: the job's pid is dlock's)
  exec "$DLOCK" exec "$2" --label "$1" --ttl 3s --wait 30s -- \
    sh -c 'touch "$0.in"; i=0; while [ ! -e "$3.in" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
           exec "$1" exec "$2" --wait 30s -- true' "$M/$1" "$DLOCK" "$3" "$M/$4"
}
cross alpha "$P/a" "$P/b" beta & x1=$!
cross beta "$P/b" "$P/a" alpha & x2=$!
hold slow --label slow-holder "$P/c" & x3=$!
await "$M/slow.in"
"$DLOCK" exec "$P/c" --label behind --wait 30s -- true & x4=$!
got=
for ((i = 0; i < 600; i++)); do
  "$DLOCK" status --waits "$P/" >"$WORK/waits" 2>&1
  code=$?
  if [ $code = 3 ] && grep -q "behind a holder" "$WORK/waits"; then got=1; break; fi
  sleep 0.05
done
if [ -z "$got" ]; then
  fail "no cycle named (exit $code): $(cat "$WORK/waits")"
  # What the store shows, to tell a listing problem from a scenario problem.
  "$DLOCK" status "$P/" >&2
  "$DLOCK" status --waits --json "$P/" >&2
  ls "$M" >&2
  jobs -l >&2
fi
grep -q "DEADLOCK: 2 parties" "$WORK/waits" || fail "cycle members: $(cat "$WORK/waits")"
grep -q "(alpha)" "$WORK/waits" && grep -q "(beta)" "$WORK/waits" || fail "labels: $(cat "$WORK/waits")"
sed -n '/not deadlocked/,$p' "$WORK/waits" | grep -q "slow-holder" ||
  fail "the slow holder is not shown as such: $(cat "$WORK/waits")"
grep -q -e "renewals arriving" -e "alive while its store session is" "$WORK/waits" ||
  fail "renewals: $(cat "$WORK/waits")"
"$DLOCK" status --waits --json "$P/" >"$WORK/waits.json"
[ $? = 3 ] || fail "--json exit"
grep -q '"verdict": "cycle"' "$WORK/waits.json" || fail "json: $(cat "$WORK/waits.json")"
grep -q '"verdict": "behind-holder"' "$WORK/waits.json" || fail "json: $(cat "$WORK/waits.json")"
kill -TERM $x1 $x2 2>/dev/null  # break the deadlock: dlock forwards it to its child
wait $x1 $x2 2>/dev/null
touch "$M/slow.go"
wait $x3 || fail "slow holder exited $?"
wait $x4 || fail "the waiter behind the slow holder exited $?"
"$DLOCK" status --waits "$P/" >"$WORK/waits" 2>&1 || fail "status --waits after: exit $?"

# --- Leader election: campaign with exec --label, observe with dlock leader.
expect_exit 75 "no leader" -- "$DLOCK" leader "$P/election"
hold lead-a --label node-a:8080 "$P/election" & la=$!
await "$M/lead-a.in"
"$DLOCK" leader "$P/election" --json >"$WORK/leader.json" || fail "leader exited $?"
grep -q '"label": "node-a:8080"' "$WORK/leader.json" || fail "leader: $(cat "$WORK/leader.json")"
term=$(sed -n 's/.*"term": \([0-9]*\).*/\1/p' "$WORK/leader.json")
"$DLOCK" leader "$P/election" --after "$term" --wait 30s >"$WORK/next" 2>&1 & watch=$!
hold lead-b --label node-b:8080 "$P/election" & lb=$!
touch "$M/lead-a.go"  # resign
await "$M/lead-b.in"
wait $watch || fail "the observer exited $?: $(cat "$WORK/next")"
grep -q "node-b:8080" "$WORK/next" || fail "observer saw: $(cat "$WORK/next")"
touch "$M/lead-b.go"
wait $la $lb
expect_exit 64 "" -- "$DLOCK" leader ""
finish
