#!/usr/bin/env bash
# dlock demo: the fenced story rejects the paused holder's write (balance 120),
# the unfenced one loses B's update (balance 110), --json tells the same story,
# and bad flags exit 64. Short leases keep the whole script to a few seconds;
# lib.sh's private XDG_STATE_HOME keeps it off the real default store.
source "$(dirname "$0")/lib.sh"
exec </dev/null
start_s=$SECONDS

# 1. Fenced: A's late write is rejected with A's token and B's, B's survives.
"$DLOCK" demo --ttl 500ms >"$WORK/fenced" 2>"$WORK/fenced.err"
rc=$?
[ "$rc" = 0 ] || fail "demo --ttl 500ms exited $rc: $(cat "$WORK/fenced.err")"
token_a=$(sed -n 's/.* A  *acquired demo\/ledger with fencing token \([0-9][0-9]*\).*/\1/p' "$WORK/fenced")
token_b=$(sed -n 's/.* B  *acquired demo\/ledger with fencing token \([0-9][0-9]*\).*/\1/p' "$WORK/fenced")
if [ -z "$token_a" ] || [ -z "$token_b" ]; then
  fail "no 'acquired' lines for A and B: $(cat "$WORK/fenced")"
else
  [ "$token_b" = $((token_a + 1)) ] || fail "B's token $token_b is not A's $token_a + 1"
  grep -qF "REJECTED, stale token $token_a < $token_b for key demo/ledger" "$WORK/fenced" ||
    fail "no 'REJECTED, stale token $token_a < $token_b for key demo/ledger': $(cat "$WORK/fenced")"
fi
grep -qF "final balance=120" "$WORK/fenced" || fail "fenced demo: no 'final balance=120': $(cat "$WORK/fenced")"
grep -qF "B's +20 is lost" "$WORK/fenced" && fail "fenced demo says B's update was lost"
echo "ok: fenced demo, tokens $token_a < $token_b"

# 2. Unfenced: A's write lands on top of B's.
"$DLOCK" demo --no-fence --ttl 500ms >"$WORK/unfenced" 2>"$WORK/unfenced.err"
rc=$?
[ "$rc" = 0 ] || fail "demo --no-fence exited $rc: $(cat "$WORK/unfenced.err")"
grep -qF "final balance=110" "$WORK/unfenced" || fail "unfenced: no 'final balance=110': $(cat "$WORK/unfenced")"
grep -qF "B's +20 is lost" "$WORK/unfenced" || fail "unfenced: no \"B's +20 is lost\": $(cat "$WORK/unfenced")"
grep -qF "REJECTED" "$WORK/unfenced" && fail "unfenced demo rejected a write"
echo "ok: unfenced demo"

# 3. JSON.
"$DLOCK" demo --json --ttl 300ms >"$WORK/json" 2>"$WORK/json.err"
rc=$?
[ "$rc" = 0 ] || fail "demo --json exited $rc: $(cat "$WORK/json.err")"
"$PYTHON3" - "$WORK/json" <<'PY' || fail "demo --json: $(cat "$WORK/json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["fenced"] is True, d["fenced"]
assert isinstance(d["token_a"], int) and isinstance(d["token_b"], int), d
assert 0 < d["token_a"] < d["token_b"], (d["token_a"], d["token_b"])
assert d["stale_write_rejected"] is True, d["stale_write_rejected"]
assert d["lost_update"] is False, d["lost_update"]
assert d["final_balance"] == 120, d["final_balance"]
assert d["ttl_ms"] == 300, d["ttl_ms"]
events = d["events"]
assert isinstance(events, list) and len(events) >= 8, events
t = [e["t_ms"] for e in events]
assert all(isinstance(x, int) for x in t), t
assert t == sorted(t) and t[-1] > t[0], f"t_ms not increasing: {t}"
# The pause lasts at least the lease: B acquires no sooner than ttl after A.
acq = {e["actor"]: e for e in events if e.get("event") == "acquired"}
assert acq["A"]["token"] == d["token_a"] and acq["B"]["token"] == d["token_b"], acq
assert acq["B"]["t_ms"] - acq["A"]["t_ms"] >= 250, acq
writes = {e["actor"]: e for e in events if e.get("event") == "write"}
assert writes["B"]["accepted"] is True, writes
assert writes["A"]["accepted"] is False, writes
assert writes["A"]["detail"] == "stale token %d < %d for key demo/ledger" % (
    d["token_a"], d["token_b"]), writes["A"]
PY
echo "ok: demo --json"

# 4. Bad input: one line, exit 64, and nothing started.
expect_exit 64 "ttl 0ms is out of range" -- "$DLOCK" demo --ttl 0s
expect_exit 64 "too long for a demo" -- "$DLOCK" demo --ttl 5m
expect_exit 64 "--backend" -- "$DLOCK" demo --backend bogus://
expect_exit 64 "invalid duration" -- "$DLOCK" demo --ttl soon

# Nothing was left held, and the demo's workers are gone.
held=$("$DLOCK" status --json)
[ "$held" = "[]" ] || fail "a lock was left held: $held"
pgrep -f "demo-worker.*$XDG_STATE_HOME" >/dev/null && fail "a demo worker outlived the demo"

elapsed=$((SECONDS - start_s))
# Well under 15 s, plus what starting dlock costs here now (a sanitizer
# build, a loaded machine) for the ~20 processes above.
start_ms=$(slowest_ms 3 "$DLOCK" --version) || fail "dlock --version failed"
bound=$((15 + 20 * start_ms / 1000))
[ "$elapsed" -lt "$bound" ] || fail "the demo tests took ${elapsed}s, want under ${bound}s (a start ${start_ms} ms)"
echo "took ${elapsed}s (bound ${bound}s)"
finish
