#!/usr/bin/env bash
# shellcheck disable=SC2046  # $(restart STORE)'s words are meant to split
# The long chaos campaigns behind docs/guarantees.md, outside CI.
#
#   scripts/campaign.sh [--runs N] [--control-runs M] [--time-limit D]
#                       [--duration L] [--out DIR] [CAMPAIGN...]
#
# For each campaign, the fenced workload and then the unfenced control with
# the same seed and faults, at most N runs (default 200) and M runs (default
# N) each, and at most D long each (default 60m: no run starts after it).
# The control only shows that the checkers catch what the fence prevents,
# which a few runs do; the fenced runs are the claim. --duration sets every run's
# length (default: each campaign's own, 10-30 s), so that 200 runs fit in
# the time there is. Campaigns (default: all):
#
#   sqlite     the embedded store: pause, kill, clock-step
#   postgres   every fault the store's setup supports, store-restart included
#   mariadb    the same
#   redis      the same but store-restart (redis.sh has no restart verb)
#   etcd       the same, ttl 1 s (etcd leases are whole seconds)
#   zookeeper  the same
#   etcd-members, zookeeper-members
#              faults inside the cluster only: a member isolated, the leader
#              isolated, paused or killed; the cluster is started by dlock
#              chaos itself with proxies on its peer links
#   redis-failover, redis-failover-wait
#              Redis with Sentinel (a primary, a replica, three sentinels,
#              started by dlock chaos): the primary killed, killed with
#              grants its replica never had (leader-lag-kill), or paused;
#              without and with wait_replicas=1
#   redis-cluster-failover, redis-cluster-failover-wait
#              the same on a Redis Cluster (three primaries, three replicas,
#              started by dlock chaos): the primary serving the run's key
#              fails over; without and with wait_replicas=1
#   postgres-failover, postgres-failover-sync
#              PostgreSQL with a streaming standby (started by dlock chaos),
#              promoted when the primary is killed, or killed with grants
#              the standby never had; asynchronous and synchronous
#              replication
#
# Writes DIR/<campaign>-<workload>.json (dlock chaos --json) and
# DIR/table.md, one Markdown row per campaign and workload. Uses build/dlock
# (build it first: cmake --preset default && cmake --build build), or $DLOCK.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=200 control_runs="" limit=60m duration="" out=campaign-$(date +%Y%m%d-%H%M)
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --control-runs) control_runs=$2; shift 2 ;;
    --time-limit) limit=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -*) sed -n '2,38p' "$0" >&2; exit 64 ;;
    *) break ;;
  esac
done
campaigns=("$@")
[ ${#campaigns[@]} -gt 0 ] ||
  campaigns=(sqlite postgres mariadb redis etcd zookeeper etcd-members zookeeper-members
    redis-failover redis-failover-wait redis-cluster-failover redis-cluster-failover-wait
    postgres-failover postgres-failover-sync)
DLOCK=${DLOCK:-$PWD/build/dlock}
[ -x "$DLOCK" ] || { echo "campaign.sh: build/dlock is missing; build first" >&2; exit 69; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
servers=$out/servers
stop_servers() {
  local s
  for s in postgres mariadb redis etcd zookeeper; do
    [ -d "$servers/$s" ] && scripts/servers/"$s".sh stop "$servers/$s" >/dev/null 2>&1
  done
  return 0
}
trap stop_servers EXIT

# chaos NAME WORKLOAD ARGS...: one campaign's JSON in DIR/NAME-WORKLOAD.json.
chaos() {
  local name=$1 workload=$2
  shift 2
  mkdir -p "$out/runs"
  local n=$runs
  [ "$workload" = fenced ] || n=${control_runs:-$runs}
  echo "campaign.sh: $name, $workload (at most $n runs, $limit)" >&2
  local args=() prev=""
  for a in "$@"; do  # --duration L replaces the campaign's own
    [ "$prev" = --duration ] && [ -n "$duration" ] && a=$duration
    args+=("$a")
    prev=$a
  done
  # 3 and 4 (violations, recovery failures) are findings, not failures here.
  "$DLOCK" chaos --workload "$workload" --runs "$n" --time-limit "$limit" --json \
    --dir "$out/runs" "${args[@]}" >"$out/$name-$workload.json" || [ $? -le 4 ]
}

# both NAME ARGS...: the fenced workload, then the unfenced control.
both() {
  chaos "$1" fenced "${@:2}"
  chaos "$1" unfenced "${@:2}"
}

# server STORE: starts it (once) and prints its URI with one member's
# address, which the proxies of the partition, delay and drop faults need.
server() {
  local store=$1 dir=$servers/$1
  [ -f "$dir/uri" ] || scripts/servers/"$store".sh start "$dir" >/dev/null
  case $store in
    etcd) echo "etcd://$(scripts/servers/etcd.sh endpoint "$dir" 1)" ;;
    zookeeper) echo "zk://127.0.0.1:$(scripts/servers/zookeeper.sh port "$dir" 1)/dlock" ;;
    *) cat "$dir/uri" ;;
  esac
}

restart() { echo --server-script "scripts/servers/$1.sh" --server-dir "$servers/$1"; }

ALL=pause,kill,partition,delay,drop,clock-step
# Member faults only: what the cluster's own faults do, nothing else.
MEMBERS=member-isolate,leader-isolate,leader-pause,leader-kill
# A leader-follower store's failovers.
FAILOVER=leader-kill,leader-lag-kill,leader-pause
for c in "${campaigns[@]}"; do
  case $c in
    sqlite) both sqlite --faults pause,kill,clock-step --duration 10s --ttl 500ms --seed 1000 ;;
    postgres | zookeeper)
      both "$c" --backend "$(server "$c")" --faults "$ALL,store-restart" $(restart "$c") \
        --duration 10s --ttl 500ms --seed 2000 ;;
    mariadb) both mariadb --backend "$(server mariadb)" --faults "$ALL,store-restart" \
      $(restart mariadb) --duration 15s --ttl 500ms --seed 2500 ;;
    redis) both redis --backend "$(server redis)" --faults "$ALL" --duration 10s --ttl 500ms \
      --seed 3000 ;;
    etcd) both etcd --backend "$(server etcd)" --faults "$ALL,store-restart" $(restart etcd) \
      --duration 10s --ttl 1s --seed 4000 ;;
    zookeeper-members) both "$c" --server-script scripts/servers/zookeeper.sh --faults "$MEMBERS" \
      --duration 15s --ttl 500ms --seed 6000 ;;
    etcd-members) both "$c" --server-script scripts/servers/etcd.sh --faults "$MEMBERS" \
      --duration 20s --ttl 1s --seed 7000 ;;
    redis-failover) both "$c" --server-script scripts/servers/redis.sh --faults "$FAILOVER" \
      --duration 30s --ttl 2s --seed 8000 ;;
    redis-failover-wait) both "$c" --server-script scripts/servers/redis.sh --faults "$FAILOVER" \
      --store-params "wait_replicas=1&wait_timeout=500ms" --duration 30s --ttl 2s --seed 8000 ;;
    redis-cluster-failover) both "$c" --server-script scripts/servers/redis_cluster.sh \
      --faults "$FAILOVER" --duration 30s --ttl 2s --seed 8500 ;;
    redis-cluster-failover-wait) both "$c" --server-script scripts/servers/redis_cluster.sh \
      --faults "$FAILOVER" --store-params "wait_replicas=1&wait_timeout=500ms" --duration 30s \
      --ttl 2s --seed 8500 ;;
    postgres-failover) both "$c" --server-script scripts/servers/postgres_replicated.sh \
      --faults leader-kill,leader-lag-kill --duration 30s --ttl 2s --seed 9000 ;;
    postgres-failover-sync) both "$c" --server-script scripts/servers/postgres_sync.sh \
      --faults leader-kill,leader-lag-kill --duration 30s --ttl 2s --seed 9000 ;;
    *) echo "campaign.sh: unknown campaign '$c'" >&2; exit 64 ;;
  esac
done

python3 - "$out" "${campaigns[@]}" >"$out/table.md" <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
print("| campaign | workload | runs | operations | faults | stale writes rejected "
      "| violations (runs) | recovery failures |")
print("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |")
for name in names:
    for workload in ("fenced", "unfenced"):
        r = json.load(open(f"{out}/{name}-{workload}.json"))
        kinds = " / ".join(f"{k} {n}" for k, n in sorted(r["faults_by_kind"].items()))
        print(f"| {name} | {workload} | {r['runs']} | {r['operations']:,} | "
              f"{r['faults_injected']} ({kinds}) | {r['stale_writes_rejected']} | "
              f"**{r['violations']}** ({r['runs_with_violations']}) | {r['recovery_failures']} |")
PY
cat "$out/table.md"
