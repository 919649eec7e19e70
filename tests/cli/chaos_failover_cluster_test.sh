#!/usr/bin/env bash
# dlock chaos on a Redis Cluster (three primaries, three replicas), started
# by chaos itself (scripts/servers/redis_cluster.sh). leader-lag-kill holds
# back the replica of the primary that serves the run's key, then kills
# that primary: the replica promoted in its place has an older counter.
# Without wait_replicas the tokens go back (checker d); with it, no grant is
# made that the failover can lose. As chaos_failover_test.sh for Sentinel.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/chaos_lib.sh"
SCRIPT=$(cd "$(dirname "$0")/../../scripts/servers" && pwd)/redis_cluster.sh
trap 'stop_members; cleanup' EXIT

# run WORKLOAD [PARAMS] [SEED]: one run of 15 s (more on a retry), ttl 1 s,
# the key's primary killed at least once; kept, with the members' logs, for
# show_logs.
run() {
  "$DLOCK" chaos --server-script "$SCRIPT" --dir "$WORK" --json --seed "${3:-5}" --ttl 1s \
    --duration "$(stretched 15)" --faults leader-lag-kill --workload "$1" ${2:+--store-params "$2"} --keep
}

# show_logs JSON: what the nodes and the script logged in a failed run.
show_logs() {
  local dir f
  dir=$(run_dir "$1")
  for f in "$dir"/cluster-logs/script.log "$dir"/cluster-logs/c?.log; do
    echo "== $f"
    tail -n 15 "$f"
  done >&2
}

run_until_killed run unfenced "" ||
  fail "three unfenced runs staged no failover (a kill, then a grant): $(summary "$out")"
[ "$rc" = 3 ] || {
  fail "without wait_replicas: exited $rc, want 3 (tokens went back): $(summary "$out")"
  show_logs "$out"
}
"$PYTHON3" - "$out" <<'PY' || { fail "without wait_replicas: $(summary "$out")"; show_logs "$out"; }
import json, sys
r = json.loads(sys.argv[1])
assert r["backend"].startswith("redis+cluster://"), r["backend"]
assert r["faults_by_kind"].get("member-hold-back", 0) >= 1, r["faults_by_kind"]
checks = {c["id"]: c for c in r["run_results"][0]["checks"]}
assert checks["d"]["verdict"].lower() == "fail", checks["d"]
PY

# The fenced run must stage the failover as well, or checker d judges
# nothing: a run whose schedule slipped is made again, as above.
run_until_killed run fenced "wait_replicas=1&wait_timeout=300ms" ||
  fail "with wait_replicas: three runs staged no failover (a kill, then a grant): $(summary "$out")"
# 4: only recovery failures, which a loaded machine may cause.
[ "$rc" = 0 ] || [ "$rc" = 4 ] || { fail "with wait_replicas: exited $rc: $(summary "$out")"; show_logs "$out"; }
"$PYTHON3" - "$out" <<'PY' || { fail "with wait_replicas: $(summary "$out")"; show_logs "$out"; }
import json, sys
r = json.loads(sys.argv[1])
assert r["backend"].startswith("redis+cluster://") and "wait_replicas=1" in r["backend"], r["backend"]
assert r["violations"] == 0, r["violations"]
assert r["faults_by_kind"].get("member-hold-back", 0) >= 1, r["faults_by_kind"]
checks = {c["id"]: c for c in r["run_results"][0]["checks"]}
assert checks["d"]["verdict"].lower() == "pass", checks["d"]
PY
[ -n "$(member_pids)" ] && fail "members left running"

[ "$failures" = 0 ] || exit 1
echo "chaos failover on a redis cluster: ok"
