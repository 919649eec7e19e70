#!/usr/bin/env bash
# dlock chaos on a replicated PostgreSQL (a primary and a streaming standby,
# scripts/servers/postgres_replicated.sh), started by chaos itself; a
# failover manager's promotion is played by the script's `kill`.
# leader-lag-kill holds the standby back, so that grants are not replicated,
# then kills the primary and promotes the standby: with asynchronous
# replication its counter is older and the tokens go back (checker d); with
# synchronous replication (postgres_sync.sh) no acknowledged grant is lost.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/chaos_lib.sh"
SERVERS=$(cd "$(dirname "$0")/../../scripts/servers" && pwd)

# The members' roots are in /tmp, outside $WORK: the script names them in
# the cluster's log (chaos keeps it next to the cluster's directory).
member_roots() {
  cat "$WORK"/*/dlock-chaos-cluster-*.log 2>/dev/null |
    sed -n 's|^postgres_replicated.sh: member [12] in \(/tmp/dlock-pg\.[A-Za-z0-9]*\).*|\1|p' |
    sort -u
}
leftovers() {
  local root
  for root in $(member_roots); do
    [ -e "$root" ] && echo "$root"
    pgrep -f "$root/data" >/dev/null && echo "$root (running)"
  done
  return 0
}
kill_leftovers() {
  local root
  for root in $(member_roots); do
    pkill -KILL -f "$root/data" 2>/dev/null
    rm -rf "$root"
  done
}
trap 'kill_leftovers; cleanup' EXIT

# run SCRIPT WORKLOAD SECONDS SEED: one run of SECONDS (more on a retry) in
# $WORK/SCRIPT (kept: its history is read below), ttl 1 s, the primary
# killed at least once unless the schedule slipped (run_until_killed tries
# another seed then).
run() {
  mkdir -p "$WORK/$1"
  "$DLOCK" chaos --server-script "$SERVERS/$1" --dir "$WORK/$1" --json --keep --seed "$4" \
    --ttl 1s --duration "$(stretched "$3")" --faults leader-lag-kill --workload "$2"
}

run_until_killed run postgres_replicated.sh unfenced 12 ||
  fail "asynchronous: three runs staged no failover (a kill, then a grant): $(summary "$out")"
[ "$rc" = 3 ] || fail "asynchronous: exited $rc, want 3 (tokens went back): $(summary "$out")"
"$PYTHON3" - "$out" <<'PY' || fail "asynchronous: $(summary "$out")"
import json, sys
r = json.loads(sys.argv[1])
assert r["backend"].startswith("postgres://"), r["backend"]
assert "target_session_attrs=read-write" in r["backend"], r["backend"]
assert r["faults_by_kind"].get("member-hold-back", 0) >= 1, r["faults_by_kind"]
checks = {c["id"]: c for c in r["run_results"][0]["checks"]}
assert checks["d"]["verdict"].lower() == "fail", checks["d"]
PY
[ -n "$(member_roots)" ] || fail "asynchronous: the cluster's log names no member"
[ -z "$(leftovers)" ] || fail "asynchronous: left behind: $(leftovers)"

# Synchronous: nothing acknowledged is lost, so the tokens never go back
# (checker d). The workload is fenced: while the standby is held back no
# commit completes, renewals included, so a holder's lease can run out in
# the middle of its write, and an unfenced write then overlaps the next
# holder's — a stall, which the fence is for, not a lost grant. The
# promoted primary commits nothing until its new standby streams (the old
# primary's restart, as long after the kill as the hold-back lasted, plus a
# few seconds), which on a loaded machine may exceed checker i's bound: i
# is not required; a grant after the failover is.
run_until_killed run postgres_sync.sh fenced 16 ||
  fail "synchronous: three runs staged no failover (a kill, then a grant): $(summary "$out")"
# 4: only recovery failures (checker i).
[ "$rc" = 0 ] || [ "$rc" = 4 ] || fail "synchronous: exited $rc: $(summary "$out")"
"$PYTHON3" - "$out" "$(run_dir "$out")/history.jsonl" <<'PY' || fail "synchronous: $(summary "$out")"
import json, sys
r = json.loads(sys.argv[1])
assert r["violations"] == 0, r["violations"]
assert r["faults_by_kind"].get("member-hold-back", 0) >= 1, r["faults_by_kind"]
checks = {c["id"]: c for c in r["run_results"][0]["checks"]}
assert checks["d"]["verdict"].lower() == "pass", checks["d"]
events = [json.loads(line) for line in open(sys.argv[2])]
kill = next(i for i, e in enumerate(events) if e["op"] == "member-kill-unreplicated")
assert any(e["op"] == "acquire" and e["type"] == "ok" for e in events[kill:]), \
    "no grant after the failover"
PY
[ -z "$(leftovers)" ] || fail "synchronous: left behind: $(leftovers)"

[ "$failures" = 0 ] || exit 1
echo "chaos failover on postgres: ok"
