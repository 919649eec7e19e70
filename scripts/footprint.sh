#!/usr/bin/env bash
# The footprint figures of docs/benchmarks.md, outside CI: a fresh server of
# STORE (the project's own script), its size read with its own tools before,
# KEYS distinct keys acquired and released by dlock_bench_footprint, and its
# size read again — right after, and after the store's own housekeeping
# (PostgreSQL: VACUUM; MariaDB: ANALYZE, then OPTIMIZE; etcd: compaction to the current revision and a
# defragmentation; SQLite: a checkpoint). One JSON line from the bench, then
# the store's own figures.
#
#   scripts/footprint.sh STORE [KEYS] [THREADS] [ROUNDS]
#
# STORE: sqlite postgres mariadb redis etcd zookeeper. ROUNDS (default 1) repeats
# the KEYS on the same server, each round under a fresh prefix, so that a
# size that stays put from one round to the next shows it is bounded.
#
# Uses build/dlock_bench_footprint (build it first), or $FOOTPRINT. The
# store's URI reaches it in $DLOCK_BACKEND, never in argv (a test server's
# password is in it).
set -euo pipefail
cd "$(dirname "$0")/.."
store=${1:?usage: scripts/footprint.sh STORE [KEYS] [THREADS]}
keys=${2:-1000000}
threads=${3:-8}
rounds=${4:-1}
bench=${FOOTPRINT:-$PWD/build/dlock_bench_footprint}
[ -x "$bench" ] || { echo "footprint.sh: $bench is missing; build first" >&2; exit 69; }
dir=$(mktemp -d /tmp/dlock-footprint.XXXXXX)
stop() { [ "$store" = sqlite ] || bash "scripts/servers/$store.sh" stop "$dir/server" >/dev/null 2>&1 || true; }
trap stop EXIT

# size: what the store itself says it keeps, one line.
case $store in
  sqlite)
    uri="sqlite://$dir/locks.db?synchronous=off"
    size() {
      sqlite3 "$dir/locks.db" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
      echo "pages $(sqlite3 "$dir/locks.db" 'PRAGMA page_count') holders $(sqlite3 "$dir/locks.db" 'SELECT count(*) FROM dlock_holders') meta $(sqlite3 "$dir/locks.db" 'SELECT count(*) FROM dlock_meta')"
    }
    housekeeping() { :; }
    ;;
  postgres)
    bash scripts/servers/postgres.sh start "$dir/server" >/dev/null
    uri=$(cat "$dir/server/uri")
    # psql reads the password from a file of its own, not from its argv.
    ( umask 077 && echo "$uri" | sed -n 's|^postgres://\([^:]*\):\([^@]*\)@\([^:/]*\):\([0-9]*\)/\(.*\)$|\3:\4:\5:\1:\2|p' >"$dir/pgpass" )
    export PGPASSFILE=$dir/pgpass
    conn=$(echo "$uri" | sed 's|^\(postgres://[^:]*\):[^@]*@|\1@|')
    sql() { psql "$conn" -Atc "$1"; }
    size() {
      echo "rows $(sql 'SELECT count(*) FROM dlock_locks') queue $(sql 'SELECT count(*) FROM dlock_locks_queue') table_bytes $(sql "SELECT pg_total_relation_size('dlock_locks')")"
    }
    # VACUUM is what autovacuum does: the space is reused, the file keeps
    # its size; VACUUM FULL (an exclusive lock) gives the file back.
    housekeeping() { sql 'VACUUM dlock_locks' >/dev/null; }
    full_housekeeping() { sql 'VACUUM FULL dlock_locks' >/dev/null; }
    ;;
  mariadb)
    bash scripts/servers/mariadb.sh start "$dir/server" >/dev/null
    uri=$(cat "$dir/server/uri")
    # As the server's root over its Unix socket: no password anywhere.
    sql() { bash scripts/servers/mariadb.sh sql "$dir/server" -N -B -e "$1"; }
    size() {
      local t n=""
      for t in "" _sharers _queue _done _breaks; do
        n="$n ${t:-_locks} $(sql "SELECT count(*) FROM dlock_locks$t")"
      done
      echo "rows${n//_/} table_bytes $(sql "SELECT data_length + index_length FROM information_schema.tables WHERE table_schema = 'dlock' AND table_name = 'dlock_locks'")"
    }
    # OPTIMIZE rebuilds the table (InnoDB's VACUUM FULL): the file shrinks.
    housekeeping() { sql 'ANALYZE TABLE dlock_locks' >/dev/null; }
    full_housekeeping() { sql 'OPTIMIZE TABLE dlock_locks' >/dev/null; }
    ;;
  redis)
    bash scripts/servers/redis.sh start "$dir/server" >/dev/null
    uri=$(cat "$dir/server/uri")
    port=${uri##*:}
    port=${port%%/*}
    size() {
      echo "dbsize $(redis-cli -p "$port" DBSIZE) used_memory $(redis-cli -p "$port" INFO memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')"
    }
    housekeeping() { :; }
    ;;
  etcd)
    bash scripts/servers/etcd.sh start "$dir/server" >/dev/null
    uri=$(cat "$dir/server/uri")
    endpoints=${uri#etcd://}
    endpoints=${endpoints%%/*}
    ctl() { ETCDCTL_API=3 etcdctl --endpoints="$endpoints" "$@"; }
    size() {
      local status
      status=$(ctl endpoint status -w json)
      echo "keys $(ctl get '' --prefix --keys-only | grep -c . || true) revision $(echo "$status" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["Status"]["header"]["revision"])') db_bytes $(echo "$status" | python3 -c 'import json,sys; print(" ".join(str(e["Status"]["dbSize"]) for e in json.load(sys.stdin)))')"
    }
    housekeeping() {
      local rev
      rev=$(ctl endpoint status -w json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["Status"]["header"]["revision"])')
      # A defragmentation rewrites the whole file: minutes for a large one.
      ctl --command-timeout=600s compaction --physical "$rev" >/dev/null
      ctl --command-timeout=600s defrag --cluster >/dev/null
    }
    ;;
  zookeeper)
    bash scripts/servers/zookeeper.sh start "$dir/server" >/dev/null
    uri=$(cat "$dir/server/uri")
    port=$(bash scripts/servers/zookeeper.sh port "$dir/server" 1)
    size() {
      local m
      m=$(exec 3<>"/dev/tcp/127.0.0.1/$port" && echo mntr >&3 && cat <&3)
      echo "znodes $(echo "$m" | sed -n 's/^zk_znode_count\t//p') data_bytes $(echo "$m" | sed -n 's/^zk_approximate_data_size\t//p')"
    }
    housekeeping() { :; }
    ;;
  *) echo "footprint.sh: unknown store '$store'" >&2; exit 64 ;;
esac

# A first key makes the store's fixed objects (tables, counters,
# directories), so the baseline is what any used store has.
DLOCK_BACKEND=$uri "$bench" - 1 1 >/dev/null
echo "before: $(size)"
for ((round = 1; round <= rounds; round++)); do
  start=$(date +%s)
  DLOCK_BACKEND=$uri "$bench" - "$keys" "$threads"
  echo "round $round seconds: $(($(date +%s) - start))"
  echo "round $round after: $(size)"
  housekeeping
  echo "round $round after housekeeping: $(size)"
done
if declare -F full_housekeeping >/dev/null; then
  full_housekeeping
  echo "after full housekeeping: $(size)"
fi
