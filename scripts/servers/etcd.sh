#!/usr/bin/env bash
# Starts and stops an etcd cluster for the tests: three members by default
# (DLOCK_ETCD_MEMBERS=1 for one), from the Debian etcd-server package, on
# free loopback ports, state under DIR. See lib.sh for the start/stop verbs;
# this script adds verbs that play faults on one member:
#
#   etcd.sh kill DIR N       SIGKILL member N (1-based); its data stays
#   etcd.sh pause DIR N      SIGSTOP member N
#   etcd.sh resume DIR N     SIGCONT member N
#   etcd.sh restart DIR N    start member N again on its data and ports
#   etcd.sh restart DIR      kill the member that leads now and start it again
#                            (the store-restart fault of `dlock chaos`)
#   etcd.sh leader DIR       print the number of the member that leads now
#   etcd.sh states DIR       one line per member: its pid, process state and,
#                            if it runs, its view (raft term, leader id,
#                            revision): what a test shows when a fault did
#                            not do what it expected
#   etcd.sh endpoint DIR N   print member N's client address (127.0.0.1:PORT)
#   etcd.sh health DIR       wait until every running member answers (30 s)
#   etcd.sh port DIR N       print member N's client port
#   etcd.sh member-id DIR N  print member N's id as etcd writes it (hex)
#   etcd.sh configure-linked DIR  configure three members without starting
#                            them, each advertising a peer port other than
#                            the one it listens on: DIR/links has a line
#                            "0 N LISTEN TARGET" per member, for a fault
#                            proxy from LISTEN to member N's TARGET that any
#                            member (0) dials; etcd names the dialing member
#                            in each request's X-Server-From header
#                            (`dlock chaos`'s member faults)
#   etcd.sh launch DIR       start a configured cluster, wait until healthy,
#                            write DIR/uri and print it
#
#   etcd.sh start-secure DIR  the same cluster secured as an operator would
#                            run it: TLS on client and peer links with
#                            certificates from make_certs (lib.sh; the client
#                            certificate's CN is "dlock"), client
#                            certificates required (--client-cert-auth),
#                            authentication on with users root and dlock (role
#                            dlock: readwrite on the prefix "dlock/" only)
#                            and nobody (no role), passwords in 0600 files
#                            DIR/<user>.password, and 2 s auth tokens
#                            (--auth-token-ttl) so that token renewal is
#                            exercised. The URI names localhost (the name the
#                            server certificate holds). The other verbs work
#                            on it too.
#
# Election timing: 50 ms heartbeats and a 500 ms election timeout (etcd's
# defaults are 100 ms / 1 s), so failover tests take less time. etcd's
# minimum lease TTL is 1.5 election timeouts rounded up to whole seconds:
# 1 s here, 2 s with the defaults.
source "$(dirname "$0")/lib.sh"

usage() {
  echo "usage: etcd.sh start|start-secure|configure-linked|launch|stop|health|leader|states|restart DIR, or etcd.sh kill|pause|resume|restart|endpoint|port|member-id DIR N" >&2
  exit 64
}

verb=${1:-}
dir=${2:-}
[ -n "$verb" ] && [ -n "$dir" ] || usage
command -v etcd >/dev/null || { echo "etcd not found: apt-get install etcd-server" >&2; exit 1; }

member_dir() { echo "$dir/n$1"; }

# start_member N: runs member N in the background, detached from this shell's
# output so that CTest does not wait for it.
start_member() {
  local n=$1 m scheme=http tls=()
  m=$(member_dir "$n")
  if secure; then
    scheme=https
    tls=(--cert-file "$dir/server.pem" --key-file "$dir/server.key"
      --trusted-ca-file "$dir/ca.pem" --client-cert-auth
      --peer-cert-file "$dir/server.pem" --peer-key-file "$dir/server.key"
      --peer-trusted-ca-file "$dir/ca.pem" --peer-client-cert-auth
      --auth-token simple --auth-token-ttl 2)
  fi
  setsid etcd --name "n$n" --data-dir "$m/data" \
    --listen-client-urls "$scheme://127.0.0.1:$(cat "$m/client_port")" \
    --advertise-client-urls "$scheme://$(host):$(cat "$m/client_port")" \
    --listen-peer-urls "$scheme://127.0.0.1:$(cat "$m/peer_port")" \
    --initial-advertise-peer-urls "$scheme://$(host):$(advertised_peer_port "$n")" \
    "${tls[@]}" \
    --initial-cluster "$(cat "$dir/cluster")" \
    --initial-cluster-token "$(cat "$dir/token")" \
    --initial-cluster-state new \
    --heartbeat-interval 50 --election-timeout 500 \
    --logger zap --log-outputs "$m/log" \
    </dev/null >>"$m/log" 2>&1 &
  echo $! >"$m/pid"
}

members() { cat "$dir/members"; }

# The peer port others dial: a proxy's, on a linked cluster.
advertised_peer_port() {
  local m
  m=$(member_dir "$1")
  if [ -f "$m/peer_link_port" ]; then cat "$m/peer_link_port"; else cat "$m/peer_port"; fi
}

secure() { [ -f "$dir/secure" ]; }

# The name clients use: the secured cluster's certificate holds "localhost".
host() { if secure; then echo localhost; else echo 127.0.0.1; fi; }

# etcdctl against member N (or the endpoint list with no N), as root on the
# secured cluster.
ctl() {
  local n=$1 ep
  shift
  if [ -n "$n" ]; then ep="$(host):$(cat "$(member_dir "$n")/client_port")"; else ep=$(endpoints); fi
  if secure; then
    local user=()
    [ -f "$dir/auth" ] && user=(--user "root:$(cat "$dir/root.password")")
    ETCDCTL_API=3 etcdctl --endpoints "$ep" --cacert "$dir/ca.pem" --cert "$dir/client.pem" \
      --key "$dir/client.key" "${user[@]}" "$@"
  else
    ETCDCTL_API=3 etcdctl --endpoints "$ep" "$@"
  fi
}

endpoints() {
  local n eps=()
  for ((n = 1; n <= $(members); n++)); do eps+=("$(host):$(cat "$(member_dir "$n")/client_port")"); done
  local IFS=,
  echo "${eps[*]}"
}

# member_pid N: member N's pid, if that process is still member N's etcd:
# a pid file outlives its process, and on a busy machine the pid is soon
# another process's, which a SIGSTOP or SIGKILL must never reach.
member_pid() {
  local pid
  pid=$(cat "$(member_dir "$1")/pid" 2>/dev/null) || return 1
  [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | sed -n '1p;/^--name$/{n;p}' |
    tr '\n' ' ' | grep -qx "etcd n$1 " || return 1
  echo "$pid"
}

# signal_member SIGNAL N: fails, saying so, when member N is not running.
signal_member() {
  local pid
  pid=$(member_pid "$2") || { echo "etcd.sh: member $2 is not running" >&2; exit 1; }
  kill "-$1" "$pid"
}

running() {  # running N: member N's process exists and is not stopped
  local pid state
  pid=$(member_pid "$1") || return 1
  state=$(ps -o stat= -p "$pid" 2>/dev/null) || return 1
  [[ $state != T* && $state != Z* ]]
}

# gone PID: waits until PID has exited. A zombie counts as gone: whoever
# reaps orphans here may take its time.
gone() {
  local state
  [ -n "${1:-}" ] || return 0
  while state=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $state != Z* ]]; do sleep 0.02; done
}

wait_healthy() {
  local n i ok
  for ((i = 0; i < 300; i++)); do
    ok=1
    for ((n = 1; n <= $(members); n++)); do
      running "$n" || continue
      ctl "$n" --command-timeout 1s endpoint health >/dev/null 2>&1 || { ok=0; break; }
    done
    [ "$ok" = 1 ] && return 0
    sleep 0.1
  done
  echo "etcd cluster in $dir did not become healthy within 30s; logs in $dir/n*/log" >&2
  return 1
}

need_member() {
  [[ ${1:-} =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le "$(members)" ] || usage
}

# new_password USER: a random password in DIR/USER.password (mode 0600).
new_password() {
  (umask 077; head -c 18 /dev/urandom | base64 | tr '+/' '-_' >"$dir/$1.password")
}

# Users, a role limited to the prefix dlock/, and authentication on.
secure_users() {
  local u
  for u in root dlock nobody; do
    new_password "$u"
    ctl "" user add "$u:$(cat "$dir/$u.password")" >/dev/null
  done
  ctl "" role add dlock >/dev/null
  ctl "" role grant-permission dlock --prefix=true readwrite dlock/ >/dev/null
  ctl "" user grant-role root root >/dev/null
  ctl "" user grant-role dlock dlock >/dev/null
  ctl "" auth enable >/dev/null
  touch "$dir/auth"
}

# configure_cluster [secure|linked]: ports, names and the cluster list.
configure_cluster() {
  count=${DLOCK_ETCD_MEMBERS:-3}
  rm -rf "$dir"
  mkdir -p "$dir"
  if [ "${1:-}" = secure ]; then
    make_certs "$dir" dlock
    touch "$dir/secure"
  fi
  echo "$count" >"$dir/members"
  echo "dlock-test-$$-$RANDOM" >"$dir/token"
  : >"$dir/links"
  cluster=()
  for ((n = 1; n <= count; n++)); do
    m=$(member_dir "$n")
    mkdir -p "$m/data"
    chmod 700 "$m/data"
    free_port >"$m/client_port"
    free_port >"$m/peer_port"
    if [ "${1:-}" = linked ]; then
      free_port >"$m/peer_link_port"
      echo "0 $n $(cat "$m/peer_link_port") $(cat "$m/peer_port")" >>"$dir/links"
    fi
    if secure; then scheme=https; else scheme=http; fi
    cluster+=("n$n=$scheme://$(host):$(advertised_peer_port "$n")")
  done
  (IFS=,; echo "${cluster[*]}") >"$dir/cluster"
}

# start_cluster [secure]: the start and start-secure verbs. A port that
# free_port found free can be taken before etcd binds it (by any program's
# outgoing connection, on a busy machine); the member then exits and the
# launch fails. The cluster is then set up again on new ports, 3 times at
# most. The launch runs as a process of its own, where a failing step ends
# it (set -e does not act inside a function whose status is tested).
start_cluster() {
  local attempt
  for attempt in 1 2 3; do
    configure_cluster "${1:-}"
    "$0" launch "$dir" && return 0
    kill_members
    echo "etcd.sh: the cluster in $dir did not start (attempt $attempt of 3)" >&2
  done
  return 1
}

# member_up N: until member N accepts on its client port, and is still
# running then (another program may have the port). Fails, with the end of
# its log, if the member exits first or 30 s go by.
member_up() {
  local m
  m=$(member_dir "$1")
  wait_for_port "$(cat "$m/client_port")" 30 "$(cat "$m/pid")" && member_pid "$1" >/dev/null &&
    return 0
  echo "etcd.sh: member $1 is not serving; its log ends:" >&2
  tail -3 "$m/log" >&2
  return 1
}

# kill_members: SIGKILL every member still running; returns once all are
# gone. SIGKILL: the data is thrown away, and a gracefully stopping member
# first tries (for seconds) to hand its leadership over.
kill_members() {
  local n pid pids=()
  [ -f "$dir/members" ] || return 0
  for ((n = 1; n <= $(members); n++)); do
    pid=$(member_pid "$n") || continue
    kill -KILL "$pid" 2>/dev/null || true
    pids+=("$pid")
  done
  for pid in "${pids[@]}"; do gone "$pid"; done
}

launch_cluster() {
  for ((n = 1; n <= $(members); n++)); do start_member "$n"; done
  for ((n = 1; n <= $(members); n++)); do member_up "$n"; done
  wait_healthy
  if secure; then
    secure_users
    echo "etcds://dlock@$(endpoints)/dlock?cacert=$dir/ca.pem&cert=$dir/client.pem&key=$dir/client.key&password_file=$dir/dlock.password" >"$dir/uri"
  else
    echo "etcd://$(endpoints)" >"$dir/uri"
  fi
  cat "$dir/uri"
}

case "$verb" in
  start) start_cluster ;;
  configure-linked) configure_cluster linked ;;
  launch) launch_cluster ;;
  port) need_member "${3:-}"; cat "$(member_dir "$3")/client_port" ;;
  member-id)
    need_member "${3:-}"
    out=$(ctl "" member list -w json)
    "$PYTHON3" -c 'import json,sys
for m in json.loads(sys.argv[1])["members"]:
    if m.get("name") == sys.argv[2]: print(format(m["ID"], "x"))' "$out" "n$3"
    ;;
  start-secure) start_cluster secure ;;
  stop)
    [ -f "$dir/members" ] || exit 0
    kill_members
    rm -rf "$dir"
    ;;
  kill)
    need_member "${3:-}"
    pid=$(member_pid "$3") || exit 0  # not running: nothing to kill
    kill -KILL "$pid" 2>/dev/null || true
    gone "$pid"
    ;;
  pause) need_member "${3:-}"; signal_member STOP "$3" ;;
  resume) need_member "${3:-}"; signal_member CONT "$3" ;;
  restart)
    if [ -z "${3:-}" ]; then
      n=$("$0" leader "$dir")
      "$0" kill "$dir" "$n"
      "$0" restart "$dir" "$n"
      exec "$0" health "$dir"
    fi
    need_member "${3:-}"
    if pid=$(member_pid "$3") && state=$(ps -o stat= -p "$pid" 2>/dev/null) && [[ $state != Z* ]]; then
      echo "member $3 is still running (or paused): kill it first" >&2
      exit 1
    fi
    start_member "$3"
    member_up "$3"
    ;;
  endpoint) need_member "${3:-}"; echo "$(host):$(cat "$(member_dir "$3")/client_port")" ;;
  health) wait_healthy ;;
  leader)
    # Ask each running member whom it follows; print the member that says
    # it is the leader itself.
    for ((i = 0; i < 100; i++)); do
      for ((n = 1; n <= $(members); n++)); do
        running "$n" || continue
        out=$(ctl "$n" --command-timeout 1s endpoint status -w json 2>/dev/null) || continue
        if "$PYTHON3" -c 'import json,sys; s=json.loads(sys.argv[1])[0]["Status"]; sys.exit(0 if s["header"]["member_id"]==s["leader"] else 1)' "$out"; then
          echo "$n"
          exit 0
        fi
      done
      sleep 0.1
    done
    echo "no member of $dir leads" >&2
    exit 1
    ;;
  states)
    for ((n = 1; n <= $(members); n++)); do
      pid=$(member_pid "$n") || { echo "n$n: not running"; continue; }
      line="n$n: pid $pid state $(ps -o stat= -p "$pid" 2>/dev/null | tr -d ' ')"
      if running "$n"; then
        line+=" $(ctl "$n" --command-timeout 1s endpoint status -w json 2>/dev/null |
          "$PYTHON3" -c 'import json,sys; s=json.load(sys.stdin)[0]["Status"]; print("id %x leader %x term %s revision %s" % (s["header"]["member_id"], s["leader"], s["raftTerm"], s["header"]["revision"]))' 2>/dev/null ||
          echo "(no status)")"
      fi
      echo "$line"
    done
    ;;
  *) usage ;;
esac
