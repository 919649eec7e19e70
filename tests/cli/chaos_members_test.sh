#!/usr/bin/env bash
# dlock chaos with faults inside the store: a cluster (ZooKeeper or etcd,
# $2) that chaos starts itself, every link between members through a fault
# proxy. A member cut off, the leader cut off, paused or killed while a
# worker holds the key: with fencing, no violation and no grant from the
# cut-off side.
source "$(dirname "$0")/lib.sh"
STORE=${2:?usage: chaos_members_test.sh DLOCK zookeeper|etcd}
SCRIPT=$(cd "$(dirname "$0")/../../scripts/servers" && pwd)/$STORE.sh
# etcd leases come in whole seconds.
TTL=500ms DURATION=16s SCHEME=zk://
[ "$STORE" = etcd ] && TTL=1s DURATION=20s SCHEME=etcd://
# Members left behind by a chaos process that died are still ours to stop.
trap 'pkill -KILL -f "$WORK/dlock-chaos-cluster" 2>/dev/null; cleanup' EXIT

expect_exit 64 "give --server-script" -- \
  "$DLOCK" chaos --faults leader-pause --duration 4s --dir "$WORK"
expect_exit 64 "no --backend" -- \
  "$DLOCK" chaos --backend zk://127.0.0.1:1/x --server-script "$SCRIPT" --faults leader-pause \
  --duration 4s --dir "$WORK"
# Refused once the links are known, before any member starts.
expect_exit 64 "is for leader-follower stores" -- \
  "$DLOCK" chaos --server-script "$SCRIPT" --faults leader-lag-kill --duration 4s --dir "$WORK"
pgrep -f "$WORK/dlock-chaos-cluster" >/dev/null && fail "a refused run left members running"
out=$("$DLOCK" chaos --server-script "$SCRIPT" --dir "$WORK" --json --seed 3 --ttl "$TTL" \
  --duration "$DURATION" --faults member-isolate,leader-isolate,leader-pause,leader-kill,pause)
rc=$?
# 4: only recovery failures, which a loaded machine may cause; 3 would be
# a safety violation.
[ "$rc" = 0 ] || [ "$rc" = 4 ] || fail "fenced run exited $rc: $out"
"$PYTHON3" - "$out" "$SCHEME" <<'PY' || fail "fenced run: $out"
import json, sys
r = json.loads(sys.argv[1])
assert r["backend"].startswith(sys.argv[2]), r["backend"]
assert r["violations"] == 0, r["violations"]
kinds = r["faults_by_kind"]
member = {k: kinds.get(k, 0) for k in ("isolate", "member-pause", "member-kill")}
assert sum(member.values()) >= 2, kinds
checks = {c["id"]: c for c in r["run_results"][0]["checks"]}
assert checks["h"]["verdict"] in ("pass", "unknown"), checks["h"]
if member["isolate"]:
    assert checks["h"]["verdict"] == "pass", checks["h"]
assert r["operations"] >= 2 * r["faults_injected"] + 5, r["operations"]
PY
# The cluster is gone with the run.
pgrep -f "$WORK/dlock-chaos-cluster" >/dev/null && fail "ensemble members left running"

# SIGTERM ends the campaign early and takes its cluster down with it.
mkdir -p "$WORK/term"
"$DLOCK" chaos --server-script "$SCRIPT" --dir "$WORK/term" --faults leader-pause --ttl "$TTL" \
  --duration 120s >"$WORK/term.out" 2>&1 &
pid=$!
for ((i = 0; i < 180; i++)); do
  grep -q "^dlock chaos:" "$WORK/term.out" && break
  sleep 0.5
done
grep -q "^dlock chaos:" "$WORK/term.out" || fail "the campaign did not start: $(cat "$WORK/term.out")"
kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" = 143 ] || fail "SIGTERM: exited $rc, want 143: $(tail -3 "$WORK/term.out")"
grep -q "interrupted" "$WORK/term.out" || fail "SIGTERM: no message: $(tail -3 "$WORK/term.out")"
pgrep -f "$WORK/term/dlock-chaos-cluster" >/dev/null && fail "SIGTERM left members running"

[ "$failures" = 0 ] || exit 1
echo "chaos members on $STORE: ok"
