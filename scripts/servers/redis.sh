#!/usr/bin/env bash
# Redis servers for the tests, on free loopback ports, persistence off.
#
#   redis.sh start DIR                one server; DIR/uri = redis://127.0.0.1:P/0
#   redis.sh stop DIR                 stop everything started under DIR, remove DIR
#   redis.sh start-auth DIR PASSWORD  one server with requirepass;
#                                     DIR/uri = redis://:PASSWORD@127.0.0.1:P/0
#   redis.sh start-nodes DIR N        N independent servers n1..nN;
#                                     DIR/uri = redlock://127.0.0.1:P1,...
#   redis.sh start-sentinel DIR       a primary (p), a replica (r) and three
#                                     sentinels (s1..s3) monitoring it as
#                                     "dlock-primary", ready to fail over;
#                                     DIR/uri = redis+sentinel://.../dlock-primary
#   redis.sh start-secure DIR         one server on TLS only (client certificates
#                                     required) with ACL users: default off,
#                                     "dlock" with the minimal ACL
#                                     (docs/backend-redis.md), "admin", "nokeys"
#                                     (dlock's commands, no keys); passwords in
#                                     0600 files DIR/<user>.password;
#                                     DIR/uri = rediss://dlock@localhost:P/0?...
#   redis.sh start-secure-sentinel DIR  start-sentinel's topology on TLS (replication
#                                     too) with those users, and sentinels with
#                                     their own password (DIR/sentinel.password);
#                                     DIR/uri = rediss+sentinel://...
#   redis.sh start-cluster DIR [3|1]  a Redis Cluster of six nodes c1..c6: three
#                                     primaries and a replica of each, node
#                                     timeout 1 s, any replica may be promoted;
#                                     DIR/uri = redis+cluster://127.0.0.1:P1,...
#                                     (1: one primary serving every slot, c1,
#                                     without a replica: a benchmark baseline)
#   redis.sh start-secure-cluster DIR  start-cluster's six nodes on TLS only
#                                     (cluster bus and replication too) with
#                                     start-secure's certificates and users,
#                                     "dlock" with the cluster's minimal ACL;
#                                     each node announces "localhost" (the
#                                     name its certificate carries);
#                                     DIR/uri = rediss+cluster://dlock@...
#   DLOCK_REDIS_NODE_CPU=F redis.sh start|start-cluster ...   each server
#                                     capped at F of a core (root, cgroup v1):
#                                     benchmarks where the servers' CPU is the
#                                     limit, as on machines of their own
#   redis.sh kill|pause|resume DIR NAME   SIGKILL / SIGSTOP / SIGCONT one member
#   redis.sh port DIR NAME            print a member's port
#
# On a cluster (start-cluster, start-secure-cluster), also:
#   redis.sh primary-of DIR KEY       the member serving dlock key KEY's slot
#   redis.sh replica-of DIR NAME      a member replicating primary NAME
#   redis.sh failover DIR NAME        the replica of primary NAME takes over
#                                     (CLUSTER FAILOVER: no write is lost);
#                                     waits until every node agrees
#   redis.sh move-slot DIR KEY NAME   moves KEY's slot (and its keys) to
#                                     primary NAME, as redis-cli reshards
#   redis.sh settle DIR               until every slot is served and every
#                                     primary has a replica in sync
#
# For `dlock chaos --server-script` (harness/linked_cluster.h), the sentinel
# topology with members numbered 1 = p and 2 = r (NAME may be the number),
# or, through redis_cluster.sh, the cluster with members 1..6 = c1..c6 and
# "the leader" the primary of the slot of the run's key (DIR/key):
#   redis.sh configure-linked DIR     no links (replication is not proxied);
#                                     DIR/members = 2
#   redis.sh launch DIR               start-sentinel; prints the URI
#   redis.sh leader DIR               the member the sentinels name primary
#   redis.sh restart DIR N            start a killed member again, empty, on
#                                     its port (the sentinels make it a replica)
#   redis.sh settle DIR               until the replica follows the primary the
#                                     sentinels name, in sync (a resumed old
#                                     primary is made to follow at once)
#   redis.sh hold-back DIR            stop the replica and fill the primary's
#                                     replication buffer, so that what the
#                                     primary writes next is not replicated
#                                     before it could die; prints the replica
#
# Each member NAME keeps DIR/NAME.port, DIR/NAME.pid and DIR/NAME.log.
source "$(dirname "$0")/lib.sh"

# start_member DIR NAME [redis-server args...]: starts it, waits for its port.
start_member() {
  local dir=$1 name=$2 port
  shift 2
  port=$(free_port)
  launch_member "$dir" "$name" "$port" --port "$port" "$@"
}

# launch_member DIR NAME PORT [redis-server args...]: runs member NAME (its
# DIR/NAME.conf first, when there is one: redis-server's rule), waits for
# PORT and its pid file, writes DIR/NAME.port.
launch_member() {
  local dir=$1 name=$2 port=$3 conf=() i
  shift 3
  mkdir -p "$dir/$name.data"
  [ -f "$dir/$name.conf" ] && conf=("$dir/$name.conf")
  redis-server "${conf[@]}" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$dir/$name.data" --daemonize yes --pidfile "$dir/$name.pid" \
    --logfile "$dir/$name.log" --protected-mode no "$@" >/dev/null
  wait_for_port "$port" 20
  # The pid file is written just after the port opens.
  for ((i = 0; i < 100; i++)); do [ -s "$dir/$name.pid" ] && break; sleep 0.02; done
  echo "$port" >"$dir/$name.port"
  [ -z "${DLOCK_REDIS_NODE_CPU:-}" ] || cap_cpu "$dir" "$name"
}

# cap_cpu DIR NAME: with DLOCK_REDIS_NODE_CPU=F (a fraction of one core,
# 0.1-1), the member runs in a cgroup of its own capped at F of a core
# and weighted above everything else, so that it gets F even on a busy
# machine: a server on a machine of its own, as in production, where the
# server's CPU is what a cluster of more primaries adds (docs/benchmarks-
# redis.md). Needs root and the cgroup v1 cpu controller.
cap_cpu() {
  local dir=$1 name=$2 group quota
  quota=$(awk -v f="$DLOCK_REDIS_NODE_CPU" 'BEGIN { if (f + 0 >= 0.1 && f + 0 <= 1) printf "%d", f * 10000 }')
  [ -n "$quota" ] || { echo "redis.sh: DLOCK_REDIS_NODE_CPU must be a fraction of a core, 0.1-1; got '$DLOCK_REDIS_NODE_CPU'" >&2; exit 64; }
  group=/sys/fs/cgroup/cpu/dlock-redis-$(basename "$dir")-$name
  mkdir -p "$group" 2>/dev/null && echo 10000 >"$group/cpu.cfs_period_us" 2>/dev/null ||
    { echo "redis.sh: DLOCK_REDIS_NODE_CPU needs root and the cgroup v1 cpu controller (/sys/fs/cgroup/cpu)" >&2; exit 69; }
  echo "$quota" >"$group/cpu.cfs_quota_us"
  echo 10240 >"$group/cpu.shares"
  echo "$(member_pid "$dir" "$name")" >"$group/cgroup.procs"
  echo "$group" >>"$dir/cgroups"
}

member_pid() {
  local file="$1/$2.pid"
  [ -s "$file" ] || { echo "redis.sh: no member '$2' under $1" >&2; exit 64; }
  cat "$file"
}

# cli PORT args...: redis-cli to the member on PORT; on a secured cluster
# (start-secure-cluster) over TLS as its admin user.
cli() {
  if [ -f "${dir:-}/secure-cluster" ]; then
    tls_cli "$dir" "$1" admin "${@:2}"
  else
    redis-cli -h 127.0.0.1 -p "$1" "${@:2}"
  fi
}

# A redis process (not a zombie, not a recycled pid). Shell builtins only:
# the cluster's waits ask this of every member 20 times a second.
is_redis() {
  local cmdline="" stat=""
  [ -r "/proc/$1/cmdline" ] || return 1
  # A rewritten process title has no NUL: read then ends at EOF, non-zero.
  IFS= read -r -d '' cmdline 2>/dev/null <"/proc/$1/cmdline" || true
  IFS= read -r stat 2>/dev/null <"/proc/$1/stat" || true
  [[ $cmdline == *redis* && $stat != *") Z "* ]]
}

# Persistence is off, so there is nothing to save: SIGKILL every member at
# once (SIGTERM costs a server-cron tick, ~100 ms, per member) and wait
# until each is gone.
stop_all() {
  local dir=$1 f pid pids=() i
  for f in "$dir"/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    if [ -n "$pid" ] && is_redis "$pid"; then
      kill -KILL "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  for pid in "${pids[@]}"; do
    for ((i = 0; i < 250; i++)); do is_redis "$pid" || break; sleep 0.02; done
  done
}

# A sentinel rewrites and fsyncs its config file at each change of state,
# on its main thread; an fsync behind a busy disk's writeback can take
# seconds, and a sentinel whose timer slips 2 s enters TILT mode and makes
# no failover for 30 s. So their config files live in memory (/dev/shm)
# where there is one; DIR/sentinel-home says where, for stop.
sentinel_home() {
  local dir=$1 home
  if [ ! -f "$dir/sentinel-home" ]; then
    home=$(mktemp -d /dev/shm/dlock-sentinels.XXXXXX 2>/dev/null) || home=$dir
    echo "$home" >"$dir/sentinel-home"
  fi
  cat "$dir/sentinel-home"
}

# A sentinel enters TILT mode (no failover) when its wall clock steps back,
# or forward by over 2 s (a stalled process, a paused VM), and stays 30 s.
# After that, the replica's link has been down longer than 10 x
# down-after-milliseconds (5 s here), and Sentinel never promotes such a
# replica: with the primary killed during a 2.5 s stall of the sentinels, the
# failover took 67 s. Test topologies enter TILT only on a step back or one
# of 30 s, and leave it after 1 s (docs/decisions.md).
# calm_tilt CLI...: the sentinel that CLI reaches does so.
calm_tilt() {
  [ "$("$@" sentinel debug tilt-period 1000 tilt-trigger 30000 | tr -d '\r')" = OK ] && return 0
  echo "redis.sh: a sentinel refused SENTINEL DEBUG tilt-period/tilt-trigger" >&2
  return 1
}

start_sentinel_topology() {
  local dir=$1 p r s port hosts="" ok i home
  start_member "$dir" p --repl-diskless-sync yes --repl-diskless-sync-delay 0
  p=$(cat "$dir/p.port")
  start_member "$dir" r --replicaof 127.0.0.1 "$p" --repl-diskless-load swapdb \
    --repl-diskless-sync yes --repl-diskless-sync-delay 0 \
    --replica-priority 100
  r=$(cat "$dir/r.port")
  home=$(sentinel_home "$dir")
  for s in s1 s2 s3; do
    port=$(free_port)
    cat >"$home/$s.conf" <<EOF
port $port
bind 127.0.0.1
protected-mode no
daemonize yes
pidfile $dir/$s.pid
logfile $dir/$s.log
dir $dir
sentinel monitor dlock-primary 127.0.0.1 $p 2
sentinel down-after-milliseconds dlock-primary 500
sentinel failover-timeout dlock-primary 3000
sentinel parallel-syncs dlock-primary 1
EOF
    redis-server "$home/$s.conf" --sentinel >/dev/null
    wait_for_port "$port" 20
    calm_tilt cli "$port" || exit 1
    echo "$port" >"$dir/$s.port"
    hosts+="${hosts:+,}127.0.0.1:$port"
  done
  # Ready when the replica is in sync and every sentinel knows the replica
  # and both other sentinels (they find each other through hello messages
  # every 2 s); before that a failover could not be agreed.
  for ((i = 0; i < 300; i++)); do
    ok=1
    cli "$r" info replication | grep -q 'master_link_status:up' || ok=0
    for s in s1 s2 s3; do
      local info
      info=$(cli "$(cat "$dir/$s.port")" sentinel master dlock-primary 2>/dev/null | tr -d '\r')
      echo "$info" | grep -A1 -x 'num-slaves' | tail -1 | grep -qx 1 || ok=0
      echo "$info" | grep -A1 -x 'num-other-sentinels' | tail -1 | grep -qx 2 || ok=0
    done
    [ "$ok" = 1 ] && break
    sleep 0.1
  done
  [ "$ok" = 1 ] || { echo "redis.sh: sentinel topology in $dir did not become ready" >&2; exit 1; }
  echo "redis+sentinel://$hosts/dlock-primary" >"$dir/uri"
}

# member_name N: the member numbered N (1 = p, 2 = r; on a cluster N = cN),
# or N itself.
member_name() {
  if [ -f "$dir/topology" ] && [[ $1 =~ ^[1-6]$ ]]; then
    echo "c$1"
    return 0
  fi
  case "$1" in
    1) echo p ;;
    2) echo r ;;
    *) echo "$1" ;;
  esac
}

# The member the sentinels name primary (the first that answers).
current_leader() {
  local dir=$1 s addr port
  for s in s1 s2 s3; do
    addr=$(cli "$(cat "$dir/$s.port")" sentinel get-master-addr-by-name dlock-primary 2>/dev/null) ||
      continue
    port=$(echo "$addr" | sed -n 2p | tr -d '\r')
    [ "$port" = "$(cat "$dir/p.port")" ] && { echo 1; return 0; }
    [ "$port" = "$(cat "$dir/r.port")" ] && { echo 2; return 0; }
  done
  echo "redis.sh: no sentinel under $dir names a primary" >&2
  return 1
}

# Stops the replica, then writes 48 MB through the primary: the replica's
# socket buffers fill, and what the primary writes next stays in its own
# memory, lost if it dies (tests/backends/redis, WithoutWait...).
hold_back() {
  local dir=$1 leader other
  leader=$(current_leader "$dir") || return 1
  other=$((3 - leader))
  stop_then_fill "$dir" "$(member_name "$other")" "$(member_name "$leader")" dlock-chaos-filler ||
    return 1
  echo "$other"
}

# stop_then_fill DIR REPLICA PRIMARY KEY: stops REPLICA and writes 48 MB to
# KEY through the member PRIMARY. A primary that is not running (killed or
# paused, and the sentinels not yet past it: the next fault came before
# the failover ended) is refused first; a write that fails lets the replica
# go again. Either way nothing is left stopped: a replica stopped for good
# is one no failover can promote, and the rest of the run would serve no
# grant.
stop_then_fill() {
  local dir=$1 replica=$2 primary=$3 key=$4 pid port
  pid=$(member_pid "$dir" "$primary")
  is_redis "$pid" && ! grep -q '^[0-9]* ([^)]*) T' "/proc/$pid/stat" 2>/dev/null ||
    { echo "redis.sh: the primary $primary is not running: nothing to hold back" >&2; return 1; }
  port=$(cat "$dir/$primary.port")
  pid=$(member_pid "$dir" "$replica")
  kill -STOP "$pid"
  head -c $((48 << 20)) /dev/zero | tr '\0' x | cli "$port" -x set "$key" >/dev/null && return 0
  kill -CONT "$pid"
  echo "redis.sh: writing through the primary $primary failed: the replica runs on" >&2
  return 1
}

# await_failover_from DIR N: until the sentinels name another primary than
# member N (killed): started before that, N would come back an empty
# primary that clients could still be sent to.
await_failover_from() {
  local dir=$1 member=$2 i
  for ((i = 0; i < 300; i++)); do
    [ "$(current_leader "$dir" 2>/dev/null)" = "$member" ] || return 0
    sleep 0.1
  done
  echo "redis.sh: the sentinels still name member $member primary after 30 s" >&2
  return 1
}

# A restarted member follows the primary at once, as an operator would make
# it (the sentinels would too, but only at their next 10 s look), and is
# ready when it is in sync: the next failover has a replica to promote.
restart_as_replica() {
  local dir=$1 name=$2 leader primary i
  leader=$(current_leader "$dir") || return 1
  primary=$(cat "$dir/$(member_name "$leader").port")
  [ "$primary" = "$(cat "$dir/$name.port")" ] && return 0
  cli "$(cat "$dir/$name.port")" replicaof 127.0.0.1 "$primary" >/dev/null
  for ((i = 0; i < 400; i++)); do
    cli "$(cat "$dir/$name.port")" info replication | grep -q 'master_link_status:up' && return 0
    sleep 0.05
  done
  echo "redis.sh: $name did not catch up with the primary on $primary within 20 s" >&2
  return 1
}

# The commands dlock runs, directly and inside its Lua scripts (Redis
# checks both against the user's ACL): docs/backend-redis.md, "Secured".
DLOCK_COMMANDS="+ping +select +role +wait +scan +exists +get +evalsha +eval \
+subscribe +unsubscribe +publish +time +set +del +incr +pexpire +pexpireat +pttl \
+hset +hget +hmget +hdel +hexists +lindex +lpop +lrange +lrem +rpush \
+zadd +zrange +zrangebyscore +zrem +zremrangebyscore +zscore"

# On a Redis Cluster (docs/backend-redis.md, "ACL on a cluster"): the slot
# map, ASK redirections and sharded pub/sub; its connections are never
# asked ROLE or SELECT.
DLOCK_CLUSTER_COMMANDS="+ping +wait +scan +exists +get +evalsha +eval \
+cluster|slots +asking +ssubscribe +sunsubscribe +spublish +time +set +del +incr \
+pexpire +pexpireat +pttl +hset +hget +hmget +hdel +hexists +lindex +lpop +lrange \
+lrem +rpush +zadd +zrange +zrangebyscore +zrem +zremrangebyscore +zscore"

sha256() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }

# secure_files DIR [COMMANDS]: certificates, passwords (0600 files) and the
# ACL file, which holds password hashes only; "dlock" and "nokeys" may run
# COMMANDS (default: DLOCK_COMMANDS).
secure_files() {
  local dir=$1 commands=${2:-$DLOCK_COMMANDS} u
  make_certs "$dir"
  (
    umask 077
    for u in dlock admin nokeys sentinel; do
      openssl rand -hex 16 >"$dir/$u.password"
    done
    {
      echo "user default off"
      echo "user admin on #$(sha256 "$(cat "$dir/admin.password")") ~* &* +@all"
      # The minimal ACL, plus app:* for the keys the tests' fenced writes touch.
      echo "user dlock on #$(sha256 "$(cat "$dir/dlock.password")") resetkeys ~dlock:* ~app:*" \
        "resetchannels &dlock:* -@all" $commands
      echo "user nokeys on #$(sha256 "$(cat "$dir/nokeys.password")") resetkeys" \
        "resetchannels &dlock:* -@all" $commands
    } >"$dir/users.acl"
  )
}

# tls_conf DIR PORT: the TLS settings of every member, server or sentinel.
tls_conf() {
  cat <<EOF
port 0
tls-port $2
tls-cert-file $1/server.pem
tls-key-file $1/server.key
tls-ca-cert-file $1/ca.pem
tls-auth-clients yes
tls-replication yes
EOF
}

# tls_member_conf DIR NAME PORT [LINE...]: DIR/NAME.conf (0600), which holds
# what must not show in ps: TLS only, on PORT, dlock's users, the admin's
# password for replication; then each LINE.
tls_member_conf() {
  local dir=$1 name=$2 port=$3
  shift 3
  (
    umask 077
    {
      tls_conf "$dir" "$port"
      echo "aclfile $dir/users.acl"
      echo "masteruser admin"
      echo "masterauth $(cat "$dir/admin.password")"
      printf '%s\n' "$@"
    } >"$dir/$name.conf"
  )
}

# start_tls_member DIR NAME [redis-server args...]: a server on TLS only with
# dlock's users.
start_tls_member() {
  local dir=$1 name=$2 port
  shift 2
  port=$(free_port)
  tls_member_conf "$dir" "$name" "$port"
  launch_member "$dir" "$name" "$port" "$@"
}

# tls_cli DIR PORT USER args...: redis-cli over TLS as USER ("" for the
# default user, with DIR/sentinel.password).
tls_cli() {
  local dir=$1 port=$2 user=$3
  shift 3
  REDISCLI_AUTH=$(cat "$dir/${user:-sentinel}.password") redis-cli --tls \
    --cacert "$dir/ca.pem" --cert "$dir/client.pem" --key "$dir/client.key" \
    -h localhost -p "$port" ${user:+--user "$user"} --no-auth-warning "$@"
}

tls_params() {
  echo "cacert=$1/ca.pem&cert=$1/client.pem&key=$1/client.key&password_file=$1/dlock.password"
}

# sentinel_conf DIR NAME PORT PRIMARY_PORT
sentinel_conf() {
  local dir=$1 s=$2
  tls_conf "$dir" "$3"
  cat <<EOF
bind 127.0.0.1
protected-mode no
daemonize yes
pidfile $dir/$s.pid
logfile $dir/$s.log
dir $dir
requirepass $(cat "$dir/sentinel.password")
sentinel sentinel-pass $(cat "$dir/sentinel.password")
sentinel resolve-hostnames yes
sentinel announce-hostnames yes
sentinel announce-ip localhost
sentinel monitor dlock-primary localhost $4 2
sentinel auth-user dlock-primary admin
sentinel auth-pass dlock-primary $(cat "$dir/admin.password")
sentinel down-after-milliseconds dlock-primary 500
sentinel failover-timeout dlock-primary 3000
sentinel parallel-syncs dlock-primary 1
EOF
}

start_secure_sentinel_topology() {
  local dir=$1 p r s port hosts="" ok i info home
  secure_files "$dir"
  start_tls_member "$dir" p --replica-announce-ip localhost \
    --repl-diskless-sync yes --repl-diskless-sync-delay 0
  p=$(cat "$dir/p.port")
  start_tls_member "$dir" r --replicaof localhost "$p" --replica-announce-ip localhost \
    --repl-diskless-load swapdb --replica-priority 100
  r=$(cat "$dir/r.port")
  home=$(sentinel_home "$dir")
  for s in s1 s2 s3; do
    port=$(free_port)
    (umask 077; sentinel_conf "$dir" "$s" "$port" "$p" >"$home/$s.conf")
    redis-server "$home/$s.conf" --sentinel >/dev/null
    wait_for_port "$port" 20
    calm_tilt tls_cli "$dir" "$port" "" || exit 1
    echo "$port" >"$dir/$s.port"
    hosts+="${hosts:+,}localhost:$port"
  done
  for ((i = 0; i < 300; i++)); do
    ok=1
    tls_cli "$dir" "$r" admin info replication | grep -q 'master_link_status:up' || ok=0
    for s in s1 s2 s3; do
      info=$(tls_cli "$dir" "$(cat "$dir/$s.port")" "" sentinel master dlock-primary 2>/dev/null | tr -d '\r')
      echo "$info" | grep -A1 -x 'num-slaves' | tail -1 | grep -qx 1 || ok=0
      echo "$info" | grep -A1 -x 'num-other-sentinels' | tail -1 | grep -qx 2 || ok=0
    done
    [ "$ok" = 1 ] && break
    sleep 0.1
  done
  [ "$ok" = 1 ] || { echo "redis.sh: secured sentinel topology in $dir did not become ready" >&2; exit 1; }
  echo "rediss+sentinel://dlock@$hosts/dlock-primary?$(tls_params "$dir")&sentinel_password_file=$dir/sentinel.password" >"$dir/uri"
}

# ------------------------------------------------------------ Redis Cluster

# A node's cluster bus listens on its port + 10000, so both must be free and
# the port at most 55535 (the kernel's free ports run higher).
free_cluster_port() {
  local port picked=$1/ports-picked
  while :; do
    port=$("$PYTHON3" -c '
import random, socket
while True:
    p = random.randint(20000, 55535)
    try:
        for q in (p, p + 10000):
            s = socket.socket(); s.bind(("127.0.0.1", q)); s.close()
        print(p); break
    except OSError:
        pass')
    grep -qx "$port" "$picked" 2>/dev/null && continue
    echo "$port" >>"$picked"
    break
  done
  echo "$port"
}

# The members of the cluster under DIR (start-cluster wrote them).
members_of() { cat "$1/cluster-members" 2>/dev/null || echo "c1 c2 c3 c4 c5 c6"; }

# cluster_node_args DIR NAME PORT: a node's flags (on a secured cluster,
# PORT is its TLS port and it has no other). A 1 s node timeout makes
# a failover take ~2-3 s; validity factor 0 lets any replica be promoted,
# however long it was cut off (hold-back stops it); a slot range whose
# primary is down leaves the others served.
cluster_node_args() {
  if [ -f "$1/secure-cluster" ]; then echo --port 0 --tls-port "$3"; else echo --port "$3"; fi
  echo --cluster-enabled yes --cluster-config-file "$1/$2.data/nodes.conf" \
    --cluster-node-timeout 1000 --cluster-replica-validity-factor 0 \
    --cluster-require-full-coverage no --cluster-allow-replica-migration no \
    --repl-diskless-sync yes --repl-diskless-sync-delay 0 --repl-diskless-load swapdb
}

# cluster_ready DIR: every live node sees every slot served, every live
# replica's link is up, and every primary with slots has a live replica
# (after a failover, once the old primary is back and following). One
# redis-cli per node and one awk: `await` asks this 20 times a second, and
# a process per question made each wait cost a core (tests' Settle).
cluster_ready() {
  local dir=$1 n pid port out nodes=""
  for n in $(members_of "$dir"); do
    pid=0
    read -r pid 2>/dev/null <"$dir/$n.pid" || true
    is_redis "$pid" || continue
    read -r port <"$dir/$n.port" || return 1
    out=$(printf 'CLUSTER INFO\nCLUSTER SLOTS\nINFO replication\n' | cli "$port" 2>/dev/null) ||
      return 1
    out=$'\n'${out//$'\r'/}$'\n'
    [[ $out == *$'\ncluster_state:ok\n'* && $out == *$'\ncluster_slots_ok:16384\n'* ]] ||
      return 1
    # On a secured cluster, until every node has heard the others' hostnames
    # (cluster bus gossip), CLUSTER SLOTS names some "?".
    [[ $out == *$'\n?\n'* ]] && return 1
    [[ $out == *$'\nrole:slave\n'* && $out != *$'\nmaster_link_status:up\n'* ]] && return 1
    [ -n "$nodes" ] || nodes=$(cli "$port" cluster nodes 2>/dev/null) || return 1
  done
  # Primaries with slots (a 9th field), none failing, as many as started;
  # with three, each followed by a replica that is not failing.
  awk -v want="$(<"$dir/primaries")" '
    $3 ~ /master/ && $3 !~ /fail/ && NF > 8 { masters[$1] = 1; m++ }
    $3 ~ /slave/ && $3 !~ /fail/ { followed[$4] = 1 }
    END {
      if (m != want) exit 1
      if (want == 3) for (id in masters) if (!(id in followed)) exit 1
    }' <<<"${nodes//$'\r'/}"
}

# Whether no live node still names member NAME (killed) primary of slots.
failed_over_from() {
  local port
  port=$(cat "$1/$2.port")
  cli "$(any_live_port "$1")" cluster nodes 2>/dev/null | tr -d '\r' | awk -v port="$port" '
    { split($2, addr, "@") }
    addr[1] ~ (":" port "$") && $3 ~ /master/ && NF > 8 { held = 1 }
    END { exit held }'
}

any_live_port() {
  local n
  for n in $(members_of "$1"); do
    is_redis "$(cat "$1/$n.pid" 2>/dev/null || echo 0)" && { cat "$1/$n.port"; return 0; }
  done
  return 1
}

# await DIR WHAT SECONDS COMMAND...: until COMMAND succeeds.
await() {
  local dir=$1 what=$2 seconds=$3 i
  shift 3
  for ((i = 0; i < seconds * 20; i++)); do
    "$@" && return 0
    sleep 0.05
  done
  echo "redis.sh: $what in $dir not reached within ${seconds}s" >&2
  return 1
}

# start_cluster_topology DIR [PRIMARIES]: three primaries with a replica
# each (c1..c6), or one primary serving every slot, alone (c1: the
# benchmark's baseline). On a secured cluster (DIR/secure-cluster), the
# nodes' config files are written first.
start_cluster_topology() {
  local dir=$1 primaries=${2:-3} n port hosts="" members
  echo cluster >"$dir/topology"
  echo "$primaries" >"$dir/primaries"
  if [ "$primaries" = 1 ]; then members="c1"; else members="c1 c2 c3 c4 c5 c6"; fi
  echo "$members" >"$dir/cluster-members"
  for n in $members; do
    port=$(free_cluster_port "$dir")
    [ -f "$dir/secure-cluster" ] && secure_cluster_conf "$dir" "$n" "$port"
    # shellcheck disable=SC2046
    launch_member "$dir" "$n" "$port" $(cluster_node_args "$dir" "$n" "$port")
    hosts+="${hosts:+ }127.0.0.1:$port"
  done
  if [ "$primaries" = 1 ]; then
    cli "$port" cluster addslotsrange 0 16383 >/dev/null
  else
    # The first three become primaries, the others their replicas (CLUSTER
    # MEET wants IP addresses).
    # shellcheck disable=SC2086
    cli "$port" --cluster create $hosts --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 ||
      { echo "redis.sh: redis-cli --cluster create failed:" >&2; tail -5 "$dir/create.log" >&2; exit 1; }
  fi
  await "$dir" "a cluster with every slot served and replicas in sync" 60 cluster_ready "$dir" ||
    exit 1
  if [ -f "$dir/secure-cluster" ]; then
    hosts=${hosts//127.0.0.1:/localhost:}
    echo "rediss+cluster://dlock@${hosts// /,}/?$(tls_params "$dir")" >"$dir/uri"
  else
    echo "redis+cluster://${hosts// /,}" >"$dir/uri"
  fi
}

# secure_cluster_conf DIR NAME PORT: a secured cluster node's config file:
# start-secure's TLS and users, the cluster bus on TLS too, and the node
# announced to clients (CLUSTER SLOTS, MOVED, ASK) by the hostname its
# certificate names, not by its IP address.
secure_cluster_conf() {
  tls_member_conf "$1" "$2" "$3" "tls-cluster yes" "cluster-announce-hostname localhost" \
    "cluster-preferred-endpoint-type hostname"
}

# The member listening on PORT.
member_at_port() {
  local n
  for n in $(members_of "$1"); do
    [ "$(cat "$1/$n.port")" = "$2" ] && { echo "$n"; return 0; }
  done
  echo "redis.sh: no member of $1 on port $2" >&2
  return 1
}

# The slot of dlock key KEY: that of its lock, dlock:{E}:lock (E: KEY with
# %, { and } escaped, docs/backend-redis.md).
dlock_slot() {
  local e=${2//%/%25}
  e=${e//\{/%7B}
  e=${e//\}/%7D}
  cli "$(any_live_port "$1")" cluster keyslot "dlock:{$e}:lock" | tr -d '\r'
}

# slot_owners SLOT: for each CLUSTER SLOTS reply on stdin (redis-cli -2
# --json, one a line; "null" for a node that did not answer), a line with
# the port of the primary it names for SLOT (empty for none).
slot_owners() {
  "$PYTHON3" -c '
import json, sys
slot = int(sys.argv[1])
for line in sys.stdin:
    if line.strip():
        ranges = json.loads(line) or []
        print(next((r[2][1] for r in ranges if r[0] <= slot <= r[1]), ""))
' "$1"
}

# The port of the primary that the node on PORT says serves SLOT.
slot_owner_port() {
  { cli "$1" -2 --json cluster slots 2>/dev/null || echo null; } | slot_owners "$2"
}

# The member the live nodes say serves SLOT.
primary_of_slot() {
  local dir=$1 slot=$2 port
  port=$(slot_owner_port "$(any_live_port "$dir")" "$slot")
  [ -n "$port" ] || { echo "redis.sh: no node of $dir serves slot $slot" >&2; return 1; }
  member_at_port "$dir" "$port"
}

# A member that replicates primary NAME (as the primary itself reports).
replica_of() {
  local dir=$1 name=$2 port
  port=$(cli "$(cat "$dir/$name.port")" role | tr -d '\r' | sed -n 4p)
  [ -n "$port" ] || { echo "redis.sh: primary $name of $dir has no replica" >&2; return 1; }
  member_at_port "$dir" "$port"
}

# Whether every live node names member NAME primary of SLOT: one redis-cli
# per node and one python3 for them all (`await` asks 20 times a second).
all_agree_on() {
  local dir=$1 slot=$2 want n pid owners
  want=$(cat "$dir/$3.port")
  owners=$(for n in $(members_of "$dir"); do
    pid=0
    read -r pid 2>/dev/null <"$dir/$n.pid" || true
    is_redis "$pid" || continue
    cli "$(cat "$dir/$n.port")" -2 --json cluster slots 2>/dev/null || echo null
  done | slot_owners "$slot")
  [ -n "$owners" ] && [ "$(sort -u <<<"$owners")" = "$want" ]
}

# The slot a primary serves first, to check agreement on after a change.
first_slot_of() {
  cli "$(cat "$1/$2.port")" -2 --json cluster slots | "$PYTHON3" -c '
import json, sys
port = int(sys.argv[1])
for r in json.load(sys.stdin):
    if r[2][1] == port:
        print(r[0]); break
' "$(cat "$1/$2.port")"
}

# failover DIR NAME: NAME's replica takes over its slots by CLUSTER
# FAILOVER (coordinated: the replica has every write first).
cluster_failover() {
  local dir=$1 name=$2 replica slot
  replica=$(replica_of "$dir" "$name") || return 1
  slot=$(first_slot_of "$dir" "$name")
  [ "$(cli "$(cat "$dir/$replica.port")" cluster failover | tr -d '\r')" = OK ] ||
    { echo "redis.sh: $replica refused CLUSTER FAILOVER" >&2; return 1; }
  await "$dir" "every node naming $replica primary" 30 all_agree_on "$dir" "$slot" "$replica" ||
    return 1
  echo "$replica"
}

# migrate_keys FROM_PORT TO_PORT KEY...: MIGRATE from one node to another;
# on a secured cluster as the admin user, whose password goes to redis-cli
# on stdin rather than in its argv, which ps shows.
migrate_keys() {
  local from=$1 to=$2
  shift 2
  if [ -f "$dir/secure-cluster" ]; then
    {
      printf 'MIGRATE 127.0.0.1 %s "" 0 5000 AUTH2 admin %s KEYS' "$to" "$(cat "$dir/admin.password")"
      printf ' "%s"' "$@"
      echo
    } | cli "$from" >/dev/null
  else
    cli "$from" migrate 127.0.0.1 "$to" "" 0 5000 keys "$@" >/dev/null
  fi
}

# move_slot DIR KEY NAME: KEY's slot, keys and all, to primary NAME, the
# way redis-cli --cluster reshard does it (SETSLOT IMPORTING/MIGRATING,
# MIGRATE, SETSLOT NODE on both and then the others).
move_slot() {
  local dir=$1 slot from to from_id to_id keys n -
  set -f  # the keys are passed unquoted, one word each: no globbing

  slot=$(dlock_slot "$dir" "$2")
  from=$(primary_of_slot "$dir" "$slot") || return 1
  to=$3
  [ "$from" = "$to" ] && return 0
  from_id=$(cli "$(cat "$dir/$from.port")" cluster myid | tr -d '\r')
  to_id=$(cli "$(cat "$dir/$to.port")" cluster myid | tr -d '\r')
  cli "$(cat "$dir/$to.port")" cluster setslot "$slot" importing "$from_id" >/dev/null
  cli "$(cat "$dir/$from.port")" cluster setslot "$slot" migrating "$to_id" >/dev/null
  while :; do
    keys=$(cli "$(cat "$dir/$from.port")" cluster getkeysinslot "$slot" 100 | tr -d '\r')
    [ -n "$keys" ] || break
    # shellcheck disable=SC2086
    migrate_keys "$(cat "$dir/$from.port")" "$(cat "$dir/$to.port")" $keys
  done
  for n in "$to" "$from"; do
    cli "$(cat "$dir/$n.port")" cluster setslot "$slot" node "$to_id" >/dev/null
  done
  await "$dir" "every node naming $to primary of slot $slot" 30 all_agree_on "$dir" "$slot" "$to"
}

# The key a chaos run locks (harness/linked_cluster.h writes DIR/key).
chaos_key() {
  [ -s "$1/key" ] || { echo "redis.sh: no $1/key: which key does the run lock?" >&2; return 1; }
  cat "$1/key"
}

# For chaos: the primary of the slot of the run's key, as a member number.
chaos_leader() {
  local name key
  key=$(chaos_key "$1") || return 1
  name=$(primary_of_slot "$1" "$(dlock_slot "$1" "$key")") || return 1
  echo "${name#c}"
}

# hold_back on a cluster: the chaos key's primary's replica is stopped and
# 48 MB written to the primary (in the key's slot), so that what it writes
# next is not replicated; prints the replica's number.
cluster_hold_back() {
  local dir=$1 leader replica e
  leader=c$(chaos_leader "$dir") || return 1
  replica=$(replica_of "$dir" "$leader") || return 1
  e=$(chaos_key "$dir")
  e=${e//%/%25}
  e=${e//\{/%7B}
  e=${e//\}/%7D}
  stop_then_fill "$dir" "$replica" "$leader" "dlock-chaos-filler{$e}" ||
    return 1
  echo "${replica#c}"
}

# A killed node started again on its port with its cluster config: it
# rejoins as a replica of whoever took over its slots, and is ready once in
# sync.
cluster_restart() {
  local dir=$1 name=$2 port
  port=$(cat "$dir/$name.port")
  # Back before its replica took over, it would serve its slots again, empty.
  await "$dir" "a failover away from $name" 30 failed_over_from "$dir" "$name" || return 1
  # shellcheck disable=SC2046
  launch_member "$dir" "$name" "$port" $(cluster_node_args "$dir" "$name" "$port")
  await "$dir" "a cluster with every slot served and replicas in sync" 60 cluster_ready "$dir"
}

verb=${1:-}
dir=${2:-}
[ -n "$verb" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|start-auth|start-secure|start-secure-sentinel|start-secure-cluster|start-nodes|start-sentinel|start-cluster|primary-of|replica-of|failover|move-slot|configure-linked|launch|leader|settle|hold-back|restart|kill|pause|resume|port DIR [...]" >&2; exit 64; }

case "$verb" in
  start)
    mkdir -p "$dir"
    start_member "$dir" main
    echo "redis://127.0.0.1:$(cat "$dir/main.port")/0" >"$dir/uri"
    cat "$dir/uri"
    ;;
  start-auth)
    password=${3:?usage: $0 start-auth DIR PASSWORD}
    mkdir -p "$dir"
    # In a 0600 config file, as operators keep it: not on redis-server's
    # command line, which every local user can read.
    (umask 077; printf 'requirepass "%s"\n' "$(printf '%s' "$password" | sed 's/[\\"]/\\&/g')" >"$dir/main.conf")
    start_member "$dir" main
    echo "redis://:$password@127.0.0.1:$(cat "$dir/main.port")/0" >"$dir/uri"
    cat "$dir/uri"
    ;;
  start-nodes)
    n=${3:?usage: $0 start-nodes DIR N}
    mkdir -p "$dir"
    hosts=""
    for ((k = 1; k <= n; k++)); do
      start_member "$dir" "n$k"
      hosts+="${hosts:+,}127.0.0.1:$(cat "$dir/n$k.port")"
    done
    echo "redlock://$hosts" >"$dir/uri"
    cat "$dir/uri"
    ;;
  start-secure)
    mkdir -p "$dir"
    secure_files "$dir"
    start_tls_member "$dir" main
    echo "rediss://dlock@localhost:$(cat "$dir/main.port")/0?$(tls_params "$dir")" >"$dir/uri"
    cat "$dir/uri"
    ;;
  start-secure-sentinel)
    mkdir -p "$dir"
    start_secure_sentinel_topology "$dir"
    cat "$dir/uri"
    ;;
  start-sentinel)
    mkdir -p "$dir"
    start_sentinel_topology "$dir"
    cat "$dir/uri"
    ;;
  start-cluster)
    case "${3:-3}" in 1 | 3) ;; *) echo "usage: $0 start-cluster DIR [1|3]" >&2; exit 64 ;; esac
    mkdir -p "$dir"
    start_cluster_topology "$dir" "${3:-3}"
    cat "$dir/uri"
    ;;
  start-secure-cluster)
    mkdir -p "$dir"
    secure_files "$dir" "$DLOCK_CLUSTER_COMMANDS"
    : >"$dir/secure-cluster"
    start_cluster_topology "$dir"
    cat "$dir/uri"
    ;;
  primary-of) primary_of_slot "$dir" "$(dlock_slot "$dir" "${3?usage: $0 primary-of DIR KEY}")" ;;
  replica-of) replica_of "$dir" "$(member_name "${3:?usage: $0 replica-of DIR NAME}")" ;;
  failover) cluster_failover "$dir" "$(member_name "${3:?usage: $0 failover DIR NAME}")" ;;
  move-slot) move_slot "$dir" "${3?key}" "$(member_name "${4:?usage: $0 move-slot DIR KEY NAME}")" ;;
  stop)
    [ -d "$dir" ] || exit 0
    stop_all "$dir"
    [ -f "$dir/sentinel-home" ] && rm -rf "$(cat "$dir/sentinel-home")"
    if [ -f "$dir/cgroups" ]; then
      while read -r group; do rmdir "$group" 2>/dev/null || true; done <"$dir/cgroups"
    fi
    rm -rf "$dir"
    ;;
  configure-linked) configure_leader_follower "$dir" ;;
  launch)
    if [ -f "$dir/topology" ]; then
      start_cluster_topology "$dir"
    else
      start_sentinel_topology "$dir"
    fi
    cat "$dir/uri"
    ;;
  leader)
    if [ -f "$dir/topology" ]; then chaos_leader "$dir"; else current_leader "$dir"; fi
    ;;
  hold-back)
    if [ -f "$dir/topology" ]; then cluster_hold_back "$dir"; else hold_back "$dir"; fi
    ;;
  settle)
    if [ -f "$dir/topology" ]; then
      await "$dir" "a cluster with every slot served and replicas in sync" 60 cluster_ready "$dir"
      exit
    fi
    leader=$(current_leader "$dir")
    restart_as_replica "$dir" "$(member_name $((3 - leader)))"
    ;;
  restart)
    name=$(member_name "${3:?member}")
    if [ -f "$dir/topology" ]; then
      cluster_restart "$dir" "$name"
      exit
    fi
    port=$(cat "$dir/$name.port")
    await_failover_from "$dir" "$3"
    launch_member "$dir" "$name" "$port" --port "$port" --repl-diskless-sync yes \
      --repl-diskless-sync-delay 0 --repl-diskless-load swapdb
    restart_as_replica "$dir" "$name"
    ;;
  configure-cluster)
    # redis_cluster.sh's configure-linked: a fresh DIR for six members.
    configure_leader_follower "$dir"
    echo 6 >"$dir/members"
    echo cluster >"$dir/topology"
    ;;
  kill) kill -KILL "$(member_pid "$dir" "$(member_name "${3:?member name}")")" ;;
  pause) kill -STOP "$(member_pid "$dir" "$(member_name "${3:?member name}")")" ;;
  resume) kill -CONT "$(member_pid "$dir" "$(member_name "${3:?member name}")")" ;;
  port) cat "$dir/$(member_name "${3:?member name}").port" ;;
  *)
    echo "redis.sh: unknown verb '$verb'" >&2
    exit 64
    ;;
esac
