#!/usr/bin/env bash
# dlock once: three concurrent shells, CMD runs exactly once; a failing CMD
# is not recorded, so a later call runs it again. Against a server store when
# run with its fixture ($DLOCK_TEST_URI_FILE); keys are fresh per run, since
# run-once records outlive a test run on a long-lived server (30 days by
# default).
source "$(dirname "$0")/lib.sh"
use_fixture_store
P="once-$$-$RANDOM"  # key prefix: fresh on a long-lived server
RUNS="$WORK/runs"
: >"$RUNS"

pids=()
for s in 1 2 3; do
  "$DLOCK" once "$P/reconcile/2026-11-29" --wait 30s -- sh -c 'echo "$0" >>"$1"; sleep 0.3' "$s" "$RUNS" 2>>"$WORK/err" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a 'dlock once' exited $?"; done
[ "$(wc -l <"$RUNS")" = 1 ] || fail "the command ran $(wc -l <"$RUNS") times, want 1"
grep -q "not running it again" "$WORK/err" || fail "the others did not say why they skipped: $(cat "$WORK/err")"
expect_exit 0 "is already done" -- "$DLOCK" once "$P/reconcile/2026-11-29" -- sh -c 'echo late >>"$0"' "$RUNS"
[ "$(wc -l <"$RUNS")" = 1 ] || fail "ran again after it was done"

# A failing run is not recorded.
expect_exit 3 "" -- "$DLOCK" once "$P/flaky" -- sh -c 'echo try >>"$0"; exit 3' "$RUNS"
expect_exit 0 "" -- "$DLOCK" once "$P/flaky" -- sh -c 'echo retry >>"$0"' "$RUNS"
expect_exit 0 "is already done" -- "$DLOCK" once "$P/flaky" -- sh -c 'echo again >>"$0"' "$RUNS"
[ "$(grep -c -E '^(try|retry|again)$' "$RUNS")" = 2 ] || fail "flaky: $(cat "$RUNS")"

# A record kept for 2s: done within it, run again after it. (Measured: the
# second run must come after the first run's record ended, which the store
# judges; the loop asks until it runs, and a run inside 2s fails.)
start=$(date +%s%3N)
expect_exit 0 "" -- "$DLOCK" once "$P/short" --keep 2s -- sh -c 'echo short >>"$0"' "$RUNS"
until "$DLOCK" once "$P/short" --keep forever -- sh -c 'echo short >>"$0"' "$RUNS" 2>/dev/null &&
  [ "$(grep -c '^short$' "$RUNS")" = 2 ]; do
  (( $(date +%s%3N) - start < 60000 )) || fail "the 2s record never ended"
  sleep 0.2
done
(( $(date +%s%3N) - start >= 2000 )) || fail "ran again $(( $(date +%s%3N) - start )) ms after a 2s record"
expect_exit 0 "is already done" -- "$DLOCK" once "$P/short" -- true
expect_exit 64 "--keep" -- "$DLOCK" once "$P/bad" --keep 0s -- true
expect_exit 64 "--keep" -- "$DLOCK" once "$P/bad" --keep soon -- true
expect_exit 64 "" -- "$DLOCK" exec "$P/bad" --keep 1d -- true

# A done key can still be locked: the record and the lock do not meet.
expect_exit 0 "" -- "$DLOCK" exec "$P/flaky" -- true
expect_exit 64 "" -- "$DLOCK" once "" -- true
finish
