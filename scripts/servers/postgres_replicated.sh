#!/usr/bin/env bash
# A replicated PostgreSQL for `dlock chaos --server-script` (the contract is
# in harness/linked_cluster.h): a primary and one streaming standby, members
# numbered 1 and 2, on free loopback ports, started as postgres.sh starts
# its single server (Debian's postgresql package, no systemd).
#
#   postgres_replicated.sh configure-linked DIR  no links (replication is not
#                                 proxied); DIR/members = 2; nothing started
#   postgres_replicated.sh launch DIR  member 1 the primary (role and database
#                                 `dlock`, password auth), member 2 a standby
#                                 made with pg_basebackup -R, streaming before
#                                 this returns; prints the URI and writes
#                                 DIR/uri: postgres://dlock:PASSWORD@127.0.0.1:P1,
#                                 127.0.0.1:P2/dlock?target_session_attrs=read-write
#   postgres_replicated.sh leader DIR   the member that is primary and serving
#   postgres_replicated.sh kill DIR N   crash member N (immediate shutdown, no
#                                 checkpoint); if it was the primary, promote
#                                 the other at once
#   postgres_replicated.sh restart DIR N  after a kill: N comes back as a
#                                 standby of the current primary (data wiped,
#                                 pg_basebackup -R again, no pg_rewind), ready
#                                 when it streams
#   postgres_replicated.sh hold-back DIR  stop the standby (SIGSTOP) and push
#                                 ~60 MB of WAL through the primary, so that
#                                 what the primary writes next stays on the
#                                 primary only; prints the standby's number
#   postgres_replicated.sh pause|resume DIR N  SIGSTOP / SIGCONT every process
#                                 of member N (postmaster and its children)
#   postgres_replicated.sh settle DIR   until the standby streams from the
#                                 primary (between chaos runs)
#   postgres_replicated.sh port DIR N   member N's port
#   postgres_replicated.sh stop DIR     stop both (immediate), remove everything
#
# Failover: PostgreSQL has no failover manager of its own. `kill` plays the
# one operators run (Patroni, repmgr): the moment the primary dies its
# standby is promoted (pg_ctl promote), with whatever WAL it had received.
# Asynchronous replication loses what the standby had not received.
#
# Synchronous mode, when the environment has DLOCK_PG_SYNC=1 (the wrapper
# postgres_sync.sh sets it): synchronous_standby_names='*' and
# synchronous_commit=on on every member, so a commit is acknowledged only
# once the standby has it; after a failover the new primary waits for its
# new standby in turn (writes stall until `restart` has made one).
#
# Each member N has its own root, a fresh /tmp/dlock-pg.* directory owned by
# the server's user (as postgres.sh: the `postgres` user when run as root),
# named in DIR/N.root; its data in ROOT/data, its log in ROOT/log, its Unix
# socket in ROOT; its port in DIR/N.port. The superuser connects over that
# socket only; the role `replicator` may replicate from 127.0.0.1 without a
# password (pg_hba.conf, loopback only); `dlock` needs its password.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/pg_lib.sh"

die() {
  echo "postgres_replicated.sh: $*" >&2
  exit 1
}

root_of() {
  [ -s "$dir/$1.root" ] || die "no member '$1' under $dir"
  cat "$dir/$1.root"
}
port_of() { cat "$dir/$1.port"; }

# su_psql N ARGS...: psql as the superuser over member N's Unix socket, a
# few seconds at most (a stopped member must not hang the caller).
su_psql() {
  local n=$1
  shift
  PGCONNECT_TIMEOUT=3 timeout 10 "$BIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 \
    -h "$(root_of "$n")" -p "$(port_of "$n")" -U postgres -d postgres "$@"
}

# member_pids N: member N's postmaster and its children (none if it is down).
member_pids() {
  local data pid
  data=$(root_of "$1")/data
  [ -s "$data/postmaster.pid" ] || return 0
  pid=$(head -n 1 "$data/postmaster.pid" 2>/dev/null) || return 0
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  echo "$pid"
  pgrep -P "$pid" || true
}

# signal_member N SIG: SIG to the postmaster first (a stopped postmaster
# starts no new children), then to its children.
signal_member() {
  local pid
  for pid in $(member_pids "$1"); do kill "-$2" "$pid" 2>/dev/null || true; done
}

is_running() {
  as_owner "$BIN/pg_ctl" -D "$(root_of "$1")/data" status >/dev/null 2>&1
}

# start_member N: start member N's server on its port and wait until it
# accepts connections (a standby: once it is consistent).
start_member() {
  local n=$1 root
  root=$(root_of "$n")
  as_owner "$BIN/pg_ctl" -D "$root/data" -w -t 60 -l "$root/log" \
    -o "-p $(port_of "$n") -k $root -c listen_addresses=127.0.0.1 -c cluster_name=dlock$n" \
    start >/dev/null || { tail -n 20 "$root/log" >&2; die "member $n did not start"; }
  wait_for_port "$(port_of "$n")" 30
}

# crash_member N: immediate shutdown (SIGQUIT: no checkpoint, crash recovery
# on the next start), even when N is stopped; waits until it is gone.
crash_member() {
  local n=$1 i
  is_running "$n" || return 0
  as_owner "$BIN/pg_ctl" -D "$(root_of "$n")/data" -m immediate -W stop >/dev/null 2>&1 || true
  signal_member "$n" CONT
  rm -f "$dir/$n.paused"
  for ((i = 0; i < 300; i++)); do
    is_running "$n" || return 0
    sleep 0.05
  done
  signal_member "$n" KILL
  for ((i = 0; i < 100; i++)); do
    is_running "$n" || return 0
    sleep 0.05
  done
  die "member $n did not stop"
}

# new_root N: a fresh root for member N, owned by the servers' user.
new_root() {
  local root
  root=$(mktemp -d /tmp/dlock-pg.XXXXXX)
  [ "$(id -u)" -eq 0 ] && chown postgres: "$root"
  chmod 700 "$root"
  echo "$root" >"$dir/$1.root"
  # For whoever must clean up after a run that did not stop it (the log).
  echo "postgres_replicated.sh: member $1 in $root" >&2
}

# The settings of every member (pg_basebackup copies the primary's file).
member_conf() {
  printf '%s\n' "max_connections = 200" "wal_level = replica" "max_wal_senders = 10" \
    "hot_standby = on" "wal_keep_size = '512MB'"
  if [ "${DLOCK_PG_SYNC:-}" = 1 ]; then
    printf '%s\n' "synchronous_standby_names = '*'" "synchronous_commit = on"
  fi
}

init_primary() {
  local root password
  new_root 1
  root=$(root_of 1)
  free_port >"$dir/1.port"
  password=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
  (umask 077; echo "$password" >"$dir/password")
  as_owner "$BIN/initdb" -D "$root/data" -U postgres -E UTF8 --locale=C --no-sync \
    --auth-local=trust --auth-host=scram-sha-256 --no-instructions >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; exit 1; }
  member_conf | as_owner tee -a "$root/data/postgresql.conf" >/dev/null
  # First match wins: replication for `replicator` from loopback, no password.
  { echo "host replication replicator 127.0.0.1/32 trust"; cat "$root/data/pg_hba.conf"; } |
    as_owner tee "$root/data/pg_hba.conf.new" >/dev/null
  as_owner mv "$root/data/pg_hba.conf.new" "$root/data/pg_hba.conf"
  start_member 1
  # Local commits: in synchronous mode there is no standby yet to wait for.
  PGOPTIONS='-c synchronous_commit=local' su_psql 1 \
    -c "CREATE ROLE dlock LOGIN CREATEROLE PASSWORD '$password'" \
    -c "CREATE ROLE replicator LOGIN REPLICATION" \
    -c "CREATE DATABASE dlock OWNER dlock" >/dev/null
}

# await_streaming PRIMARY STANDBY: until the primary's pg_stat_replication
# shows the standby streaming (and, in synchronous mode, as its synchronous
# standby): the next failover has a standby to promote.
await_streaming() {
  local primary=$1 standby=$2 want=streaming i state
  [ "${DLOCK_PG_SYNC:-}" = 1 ] && want="streaming sync"
  for ((i = 0; i < 600; i++)); do
    state=$(su_psql "$primary" -c "SELECT state || ' ' || sync_state FROM pg_stat_replication
                                   WHERE application_name = 'dlock$standby'" 2>/dev/null) || true
    case "$state" in "$want"*) return 0 ;; esac
    sleep 0.05
  done
  die "member $standby is not streaming from member $primary after 30 s (state '$state')"
}

# make_standby N PRIMARY: member N, a fresh copy of PRIMARY following it.
make_standby() {
  local n=$1 primary=$2 root
  root=$(root_of "$n")
  as_owner rm -rf "$root/data"
  as_owner "$BIN/pg_basebackup" -h 127.0.0.1 -p "$(port_of "$primary")" -U replicator \
    -D "$root/data" -R -X stream -c fast --no-sync >"$dir/$n.basebackup.log" 2>&1 ||
    { cat "$dir/$n.basebackup.log" >&2; die "pg_basebackup of member $n from member $primary failed"; }
  start_member "$n"
  await_streaming "$primary" "$n"
}

# current_leader: the member that serves and is not in recovery.
current_leader() {
  local n
  for n in 1 2; do
    [ -e "$dir/$n.paused" ] && continue
    [ "$(su_psql "$n" -c 'SELECT pg_is_in_recovery()' 2>/dev/null)" = f ] && { echo "$n"; return 0; }
  done
  echo "postgres_replicated.sh: no member under $dir is a serving primary" >&2
  return 1
}

pause_member() {
  signal_member "$1" STOP
  : >"$dir/$1.paused"
}

resume_member() {
  signal_member "$1" CONT
  rm -f "$dir/$1.paused"
}

# Stops the standby, then writes ~60 MB of WAL through the primary: the
# loopback socket buffers between them (a few MB) fill and the walsender
# waits, so whatever the primary commits next is on its own disk only.
# The filler commits locally: in synchronous mode it would wait forever.
hold_back() {
  local leader other
  leader=$(current_leader) || return 1
  other=$((3 - leader))
  pause_member "$other"
  # A primary that died meanwhile: the standby runs on (stopped for good,
  # nothing could be promoted).
  if ! PGOPTIONS='-c synchronous_commit=local' su_psql "$leader" \
    -c "CREATE TABLE dlock_filler AS SELECT repeat('x', 1000) AS x FROM generate_series(1, 60000)" \
    -c "DROP TABLE dlock_filler" >/dev/null; then
    resume_member "$other"
    echo "postgres_replicated.sh: writing through member $leader failed: the standby runs on" >&2
    return 1
  fi
  # For the log: how far the standby is behind.
  su_psql "$leader" -c "SELECT 'hold-back: standby ' || application_name || ' sent up to ' ||
      sent_lsn || ', primary at ' || pg_current_wal_lsn() FROM pg_stat_replication" >&2 || true
  echo "$other"
}

# kill_member N: crash N; a failover manager would promote the standby at
# once if N was the primary (a standby.signal file marks a standby).
kill_member() {
  local n=$1 other=$((3 - $1)) was_primary=1
  [ -e "$(root_of "$n")/data/standby.signal" ] && was_primary=0
  is_running "$n" || was_primary=0
  crash_member "$n"
  [ "$was_primary" = 1 ] || return 0
  is_running "$other" || die "member $n, the primary, is down and member $other is not running"
  resume_member "$other"  # a held-back standby: let it take what reached it
  as_owner "$BIN/pg_ctl" -D "$(root_of "$other")/data" -w -t 60 promote >/dev/null ||
    die "member $other could not be promoted"
}

restart_member() {
  local n=$1 leader
  leader=$(current_leader) || return 1
  [ "$leader" = "$n" ] && return 0
  crash_member "$n"
  make_standby "$n" "$leader"
}

stop_all() {
  local n root
  for n in 1 2; do
    [ -s "$dir/$n.root" ] || continue
    root=$(cat "$dir/$n.root")
    if [ -d "$root/data" ]; then crash_member "$n" || true; fi
    case $root in /tmp/dlock-pg.*) rm -rf "$root" ;; esac
  done
  rm -rf "$dir"
}

# timed VERB CMD...: runs CMD and logs how long it took (stderr: the
# cluster's log, under chaos), so that campaigns show launch, failover and
# restart times.
timed() {
  local what=$1 start
  shift
  start=$(date +%s%N)
  "$@"
  echo "postgres_replicated.sh: $what took $(( ($(date +%s%N) - start) / 1000000 )) ms" >&2
}

verb=${1:-}
dir=${2:-}
[ -n "$verb" ] && [ -n "$dir" ] || {
  echo "usage: $0 configure-linked|launch|leader|settle|kill|restart|hold-back|pause|resume|port|stop DIR [N]" >&2
  exit 64
}
member() {
  case "${1:-}" in
    1 | 2) echo "$1" ;;
    *) echo "postgres_replicated.sh: $verb needs a member, 1 or 2" >&2; exit 64 ;;
  esac
}
BIN=$(pg_bin)
case "$verb" in kill | restart | pause | resume | port) n=$(member "${3:-}") ;; esac

case "$verb" in
  configure-linked) configure_leader_follower "$dir" ;;
  launch)
    if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
      die "running as root needs the 'postgres' user (Debian package postgresql)"
    fi
    mkdir -p "$dir"
    launch_members() {
      init_primary
      new_root 2
      free_port >"$dir/2.port"
      make_standby 2 1
    }
    timed launch launch_members
    uri="postgres://dlock:$(cat "$dir/password")@127.0.0.1:$(port_of 1),127.0.0.1:$(port_of 2)/dlock?target_session_attrs=read-write"
    echo "$uri" >"$dir/uri"
    echo "$uri"
    ;;
  leader) current_leader ;;
  kill) timed "kill $n" kill_member "$n" ;;
  restart) timed "restart $n" restart_member "$n" ;;
  hold-back) timed hold-back hold_back ;;
  settle)
    leader=$(current_leader) || exit 1
    await_streaming "$leader" $((3 - leader))
    ;;
  pause) pause_member "$n" ;;
  resume) resume_member "$n" ;;
  port) port_of "$n" ;;
  stop)
    [ -d "$dir" ] || exit 0
    stop_all
    ;;
  *)
    echo "postgres_replicated.sh: unknown verb '$verb'" >&2
    exit 64
    ;;
esac
