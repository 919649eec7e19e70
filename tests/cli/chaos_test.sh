#!/usr/bin/env bash
# dlock chaos smoke runs (a few seconds each) on the store under test: with
# fencing, pauses produce rejected stale writes and no violation; without
# (the positive control), the checkers catch the damage.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/chaos_lib.sh"
# A store whose leases come in coarse units (etcd: whole seconds) needs a
# longer TTL, and a longer run to fit the faults in.
TTL=${CHAOS_TTL:-200ms}
DURATION=${CHAOS_DURATION:-4s}
backend=()
scheme=sqlite
if [ -n "${DLOCK_TEST_URI_FILE:-}" ]; then
  backend=(--backend "$(cat "$DLOCK_TEST_URI_FILE")")
  scheme=$(sed 's|:.*||' "$DLOCK_TEST_URI_FILE")
fi

check() {  # check NAME JSON PYTHON-ASSERTIONS
  "$PYTHON3" - "$2" <<PY || fail "$1: $2"
import json, sys
r = json.loads(sys.argv[1])
for k in ("runs", "operations", "faults_injected", "stale_writes_rejected", "violations", "seed"):
    assert k in r, k
# The runs went to the store under test (not a default SQLite file).
assert r["backend"].startswith("$scheme"), r["backend"]
$3
PY
}

# try_duration N: the run's duration for try N (1, 2, 3) of a pause run,
# `stretched` (chaos_lib.sh) from DURATION when it is in whole seconds. A
# sanitizer build on a loaded machine may get too little done in DURATION
# for a pause to catch a write in flight; a longer run tests the same thing.
try_duration() {
  if [[ "$DURATION" =~ ^([0-9]+)s$ ]]; then
    attempt=$1
    stretched "${BASH_REMATCH[1]}"
  else
    echo "$DURATION"
  fi
}

# Pauses only, so that every fault is a pause that can produce a stale
# write. No run may show a violation; one (of up to three) must show a
# pause's stale write rejected, with work done around every fault.
fenced_ok=""
for try in 1 2 3; do
  out=$("$DLOCK" chaos "${backend[@]}" --faults pause --duration "$(try_duration $try)" --ttl "$TTL" \
    --seed $((6 + try)) --json --dir "$WORK")
  rc=$?
  [ "$rc" = 0 ] || fail "fenced run exited $rc"
  check fenced "$out" 'assert r["violations"] == 0, r["violations"]'
  if "$PYTHON3" - "$out" <<'PY'; then
import json, sys
r = json.loads(sys.argv[1])
ok = (r["faults_by_kind"].get("pause", 0) >= 1 and r["stale_writes_rejected"] >= 1
      and r["operations"] >= 2 * r["faults_injected"] + 5)
sys.exit(0 if ok else 1)
PY
    fenced_ok=yes
    break
  fi
  echo "fenced try $try: no stale write, or little work around the faults; again, longer" >&2
done
[ -n "$fenced_ok" ] || fail "fenced: no pause produced a stale write in three runs: $out"

# The positive control: without fencing the checkers catch the damage, in
# one run of up to three (a run whose pauses caught no write finds none).
unfenced_ok=""
for try in 1 2 3; do
  out=$("$DLOCK" chaos "${backend[@]}" --workload unfenced --faults pause \
    --duration "$(try_duration $try)" --ttl "$TTL" --seed $((6 + try)) --json --dir "$WORK")
  rc=$?
  case "$rc" in
    3) check unfenced "$out" 'assert r["violations"] > 0, r["violations"]'
       unfenced_ok=yes
       break ;;
    0) echo "unfenced try $try: the control found nothing; again, longer" >&2 ;;
    *) fail "unfenced run exited $rc, want 3 (violations) or 0" ;;
  esac
done
[ -n "$unfenced_ok" ] || fail "unfenced: the positive control found nothing in three runs"

# Every fault kind, with a report that names the checks.
"$DLOCK" chaos "${backend[@]}" --faults pause,kill,clock-step --duration "$DURATION" --ttl "$TTL" --seed 11 \
  --report "$WORK/report.html" --dir "$WORK" >"$WORK/mixed.txt"
rc=$?
[ "$rc" = 0 ] || fail "mixed-fault run exited $rc: $(cat "$WORK/mixed.txt")"
grep -q "seed 11" "$WORK/mixed.txt" || fail "the seed is not printed"
grep -q "id=checks" "$WORK/report.html" || fail "report has no checker table"

# A store restart, where the store's script can do one: its header lists
# `restart DIR` for the whole store (redis.sh restarts only a chaos
# cluster's member, `restart DIR N`: its servers keep no data to come back
# with). The harness only notes a failed restart script in the fault log,
# so look there: a restart that did not happen tested nothing.
if [ -n "${DLOCK_TEST_SERVER_SCRIPT:-}" ] &&
  grep -Eq "^#   [a-z_]+\.sh restart DIR( \[N\])?  " "$DLOCK_TEST_SERVER_SCRIPT"; then
  # A quote and a space in the run directory: the script runs from argv,
  # never through a shell.
  restart_dir="$WORK/it's a dir"
  mkdir -p "$restart_dir"
  out=$("$DLOCK" chaos "${backend[@]}" --faults store-restart --server-script "$DLOCK_TEST_SERVER_SCRIPT" \
    --server-dir "$DLOCK_TEST_SERVER_DIR" --duration "$DURATION" --ttl "$TTL" --seed 5 --keep \
    --dir "$restart_dir" --json)
  rc=$?
  # 4: only recovery failures (a store whose sessions outlast the ttl may
  # take longer to hand the key out again); never 3.
  [ "$rc" = 0 ] || [ "$rc" = 4 ] || fail "store-restart run exited $rc"
  check store-restart "$out" '
assert r["violations"] == 0, r["violations"]
assert r["faults_by_kind"].get("store-down", 0) >= 1, r["faults_by_kind"]'
  ls "$restart_dir"/*/faults.log >/dev/null || fail "the run kept no fault log"
  grep -q "store-up" "$restart_dir"/*/faults.log || fail "the store never came back up"
  if grep -h "restart script failed" "$restart_dir"/*/faults.log; then
    fail "the store's script could not restart it"
  fi
fi

# A bounded campaign: no run starts after --time-limit.
if [ "$scheme" = sqlite ]; then
  out=$("$DLOCK" chaos --faults pause --duration 1s --ttl 200ms --runs 50 --time-limit 1500ms \
    --seed 9 --json --dir "$WORK")
  check time-limit "$out" '
assert r["stopped_by_time_limit"] is True, r
assert 1 <= r["runs"] < 50 and len(r["run_results"]) == r["runs"], r["runs"]'
fi

# Bad input.
expect_exit 64 "--time-limit" -- "$DLOCK" chaos --time-limit soon
expect_exit 64 "unknown fault 'fire'" -- "$DLOCK" chaos --faults pause,fire
expect_exit 64 "--workload 'sloppy'" -- "$DLOCK" chaos --workload sloppy
expect_exit 64 "too short" -- "$DLOCK" chaos --duration 100ms --ttl 1s
expect_exit 64 "--seed 'x'" -- "$DLOCK" chaos --seed x
finish
