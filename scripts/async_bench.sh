#!/usr/bin/env bash
# The asynchronous API's figures of docs/benchmarks.md, outside CI: a fresh
# server of STORE (the project's own script), then dlock_bench_async's four
# modes — PENDING acquisitions pending at once, the uncontended cycle
# blocking against asynchronous, KEYS distinct keys at once, and waiters on
# one key at 10, 100 and 1,000 (over 2, 4 and 10 processes), with the
# store's own count of commands read around each waiters run. One JSON line
# per run.
#
#   scripts/async_bench.sh STORE [PENDING] [KEYS] [SECONDS]
#
# STORE: sqlite postgres mariadb redis etcd zookeeper. Uses
# build/dlock_bench_async (build it first), or $ASYNC_BENCH. The store's URI
# reaches it in $DLOCK_BACKEND, never in argv.
set -euo pipefail
cd "$(dirname "$0")/.."
store=${1:?usage: scripts/async_bench.sh STORE [PENDING] [KEYS] [SECONDS]}
pending=${2:-10000}
keys=${3:-10000}
seconds=${4:-10}
bench=${ASYNC_BENCH:-$PWD/build/dlock_bench_async}
[ -x "$bench" ] || { echo "async_bench.sh: $bench is missing; build first" >&2; exit 69; }
dir=$(mktemp -d /tmp/dlock-async-bench.XXXXXX)
stop() {
  [ "$store" = sqlite ] || bash "scripts/servers/$store.sh" stop "$dir/server" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap stop EXIT

# work: the store's own count of what it was asked (one number), for
# $DLOCK_WORK_CMD; none for SQLite, which has no server.
work=""
case $store in
  sqlite) uri="sqlite://$dir/locks.db" ;;
  postgres)
    bash scripts/servers/postgres.sh start "$dir/server" >/dev/null
    uri=$(cat "$dir/server/uri")
    ( umask 077 && echo "$uri" | sed -n 's|^postgres://\([^:]*\):\([^@]*\)@\([^:/]*\):\([0-9]*\)/\(.*\)$|\3:\4:\5:\1:\2|p' >"$dir/pgpass" )
    export PGPASSFILE=$dir/pgpass
    # shellcheck disable=SC2001 # a back-reference
    conn=$(echo "$uri" | sed 's|^\(postgres://[^:]*\):[^@]*@|\1@|')
    # Transactions: each statement dlock sends is one.
    work="psql '$conn' -Atc 'SELECT sum(xact_commit + xact_rollback) FROM pg_stat_database'"
    ;;
  mariadb)
    bash scripts/servers/mariadb.sh start "$dir/server" >/dev/null
    uri=$(cat "$dir/server/uri")
    work="bash scripts/servers/mariadb.sh sql '$dir/server' -N -B -e \"SHOW GLOBAL STATUS LIKE 'Questions'\" | cut -f2"
    ;;
  redis)
    bash scripts/servers/redis.sh start "$dir/server" >/dev/null
    uri=$(cat "$dir/server/uri")
    port=${uri##*:}
    port=${port%%/*}
    work="redis-cli -p $port INFO stats | sed -n 's/^total_commands_processed:\([0-9]*\).*/\1/p'"
    ;;
  etcd)
    bash scripts/servers/etcd.sh start "$dir/server" >/dev/null
    uri=$(cat "$dir/server/uri")
    endpoints=${uri#etcd://}
    endpoints=${endpoints%%/*}
    # Every gRPC call the members handled (ranges, txns, watches, leases).
    work="for e in ${endpoints//,/ }; do curl -s http://\$e/metrics; done | awk '/^grpc_server_handled_total/ {n += \$2} END {print n}'"
    ;;
  zookeeper)
    bash scripts/servers/zookeeper.sh start "$dir/server" >/dev/null
    uri=$(cat "$dir/server/uri")
    work="for n in 1 2 3; do p=\$(bash scripts/servers/zookeeper.sh port '$dir/server' \$n); (exec 3<>/dev/tcp/127.0.0.1/\$p && echo mntr >&3 && cat <&3); done | awk '/^zk_packets_received/ {n += \$2} END {print n}'"
    ;;
  *) echo "async_bench.sh: unknown store '$store'" >&2; exit 64 ;;
esac
export DLOCK_BACKEND=$uri
# The bench runs it with sh; the commands above need bash.
if [ -n "$work" ]; then
  printf '%s\n' "$work" >"$dir/work.sh"
  work="bash $dir/work.sh"
fi
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$bench" - pending "$pending"
"$bench" - cycle 2000
"$bench" - distinct "$keys"
for spread in "10 2" "100 4" "1000 10"; do
  # shellcheck disable=SC2086 # two words: waiters and processes
  DLOCK_WORK_CMD=$work "$bench" - waiters $spread $((seconds * 1000))
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
