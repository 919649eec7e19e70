#!/usr/bin/env bash
# dlock once: three concurrent shells, CMD runs exactly once; a failing CMD
# is not recorded, so a later call runs it again.
source "$(dirname "$0")/lib.sh"
RUNS="$WORK/runs"
: >"$RUNS"

pids=()
for s in 1 2 3; do
  "$DLOCK" once reconcile/2026-11-29 --wait 30s -- sh -c 'echo "$0" >>"$1"; sleep 0.3' "$s" "$RUNS" 2>>"$WORK/err" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a 'dlock once' exited $?"; done
[ "$(wc -l <"$RUNS")" = 1 ] || fail "the command ran $(wc -l <"$RUNS") times, want 1"
grep -q "not running it again" "$WORK/err" || fail "the others did not say why they skipped: $(cat "$WORK/err")"
expect_exit 0 "is already done" -- "$DLOCK" once reconcile/2026-11-29 -- sh -c 'echo late >>"$0"' "$RUNS"
[ "$(wc -l <"$RUNS")" = 1 ] || fail "ran again after it was done"

# A failing run is not recorded.
expect_exit 3 "" -- "$DLOCK" once flaky -- sh -c 'echo try >>"$0"; exit 3' "$RUNS"
expect_exit 0 "" -- "$DLOCK" once flaky -- sh -c 'echo retry >>"$0"' "$RUNS"
expect_exit 0 "is already done" -- "$DLOCK" once flaky -- sh -c 'echo again >>"$0"' "$RUNS"
[ "$(grep -c -E '^(try|retry|again)$' "$RUNS")" = 2 ] || fail "flaky: $(cat "$RUNS")"
expect_exit 64 "" -- "$DLOCK" once "" -- true
finish
