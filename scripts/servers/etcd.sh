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
#   etcd.sh endpoint DIR N   print member N's client address (127.0.0.1:PORT)
#   etcd.sh health DIR       wait until every running member answers (30 s)
#
# Election timing: 50 ms heartbeats and a 500 ms election timeout (etcd's
# defaults are 100 ms / 1 s), so failover tests take less time. etcd's
# minimum lease TTL is 1.5 election timeouts rounded up to whole seconds:
# 1 s here, 2 s with the defaults.
source "$(dirname "$0")/lib.sh"

usage() {
  echo "usage: etcd.sh start|stop|health|leader|restart DIR, or etcd.sh kill|pause|resume|restart|endpoint DIR N" >&2
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
  local n=$1 m
  m=$(member_dir "$n")
  setsid etcd --name "n$n" --data-dir "$m/data" \
    --listen-client-urls "http://127.0.0.1:$(cat "$m/client_port")" \
    --advertise-client-urls "http://127.0.0.1:$(cat "$m/client_port")" \
    --listen-peer-urls "http://127.0.0.1:$(cat "$m/peer_port")" \
    --initial-advertise-peer-urls "http://127.0.0.1:$(cat "$m/peer_port")" \
    --initial-cluster "$(cat "$dir/cluster")" \
    --initial-cluster-token "$(cat "$dir/token")" \
    --initial-cluster-state new \
    --heartbeat-interval 50 --election-timeout 500 \
    --logger zap --log-outputs "$m/log" \
    </dev/null >>"$m/log" 2>&1 &
  echo $! >"$m/pid"
}

members() { cat "$dir/members"; }

endpoints() {
  local n eps=()
  for ((n = 1; n <= $(members); n++)); do eps+=("127.0.0.1:$(cat "$(member_dir "$n")/client_port")"); done
  local IFS=,
  echo "${eps[*]}"
}

running() {  # running N: member N's process exists and is not stopped
  local pid state
  pid=$(cat "$(member_dir "$1")/pid" 2>/dev/null) || return 1
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
      ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$(cat "$(member_dir "$n")/client_port")" \
        --command-timeout 1s endpoint health >/dev/null 2>&1 || { ok=0; break; }
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

case "$verb" in
  start)
    count=${DLOCK_ETCD_MEMBERS:-3}
    rm -rf "$dir"
    mkdir -p "$dir"
    echo "$count" >"$dir/members"
    echo "dlock-test-$$-$RANDOM" >"$dir/token"
    cluster=()
    for ((n = 1; n <= count; n++)); do
      m=$(member_dir "$n")
      mkdir -p "$m/data"
      chmod 700 "$m/data"
      free_port >"$m/client_port"
      free_port >"$m/peer_port"
      cluster+=("n$n=http://127.0.0.1:$(cat "$m/peer_port")")
    done
    (IFS=,; echo "${cluster[*]}") >"$dir/cluster"
    for ((n = 1; n <= count; n++)); do start_member "$n"; done
    for ((n = 1; n <= count; n++)); do wait_for_port "$(cat "$(member_dir "$n")/client_port")"; done
    wait_healthy
    echo "etcd://$(endpoints)" >"$dir/uri"
    cat "$dir/uri"
    ;;
  stop)
    [ -f "$dir/members" ] || exit 0
    # SIGKILL: the data is thrown away, and a gracefully stopping member
    # first tries (for seconds) to hand its leadership over.
    for ((n = 1; n <= $(members); n++)); do
      pid=$(cat "$(member_dir "$n")/pid" 2>/dev/null) || continue
      kill -KILL "$pid" 2>/dev/null || true
    done
    for ((n = 1; n <= $(members); n++)); do gone "$(cat "$(member_dir "$n")/pid" 2>/dev/null)"; done
    rm -rf "$dir"
    ;;
  kill)
    need_member "${3:-}"
    pid=$(cat "$(member_dir "$3")/pid")
    kill -KILL "$pid" 2>/dev/null || true
    gone "$pid"
    ;;
  pause) need_member "${3:-}"; kill -STOP "$(cat "$(member_dir "$3")/pid")" ;;
  resume) need_member "${3:-}"; kill -CONT "$(cat "$(member_dir "$3")/pid")" ;;
  restart)
    if [ -z "${3:-}" ]; then
      n=$("$0" leader "$dir")
      "$0" kill "$dir" "$n"
      "$0" restart "$dir" "$n"
      exec "$0" health "$dir"
    fi
    need_member "${3:-}"
    pid=$(cat "$(member_dir "$3")/pid" 2>/dev/null || true)
    if [ -n "$pid" ] && state=$(ps -o stat= -p "$pid" 2>/dev/null) && [[ $state != Z* ]]; then
      echo "member $3 is still running (or paused): kill it first" >&2
      exit 1
    fi
    start_member "$3"
    wait_for_port "$(cat "$(member_dir "$3")/client_port")"
    ;;
  endpoint) need_member "${3:-}"; echo "127.0.0.1:$(cat "$(member_dir "$3")/client_port")" ;;
  health) wait_healthy ;;
  leader)
    # Ask each running member whom it follows; print the member that says
    # it is the leader itself.
    for ((i = 0; i < 100; i++)); do
      for ((n = 1; n <= $(members); n++)); do
        running "$n" || continue
        out=$(ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$(cat "$(member_dir "$n")/client_port")" \
          --command-timeout 1s endpoint status -w json 2>/dev/null) || continue
        if python3 -c 'import json,sys; s=json.loads(sys.argv[1])[0]["Status"]; sys.exit(0 if s["header"]["member_id"]==s["leader"] else 1)' "$out"; then
          echo "$n"
          exit 0
        fi
      done
      sleep 0.1
    done
    echo "no member of $dir leads" >&2
    exit 1
    ;;
  *) usage ;;
esac
