#!/usr/bin/env bash
# A 3-member ZooKeeper ensemble on loopback for the tests and benchmarks.
#
#   zookeeper.sh start DIR          start members 1..3 (state in DIR/N), wait for a
#                                   leader and two followers; write DIR/uri
#   zookeeper.sh start-secure DIR   the same with digest credentials: user dlock
#                                   (password in DIR/dlock.password, mode 0600),
#                                   user ops named as acl_admin, a superDigest
#                                   "super" for operators; DIR/uri names them
#                                   (no password in it). No TLS: Debian's C
#                                   client has none.
#   zookeeper.sh configure-linked DIR  configure the ensemble without starting it,
#                                   each member reaching each other member at a
#                                   port of its own: DIR/links has one line per
#                                   link, "FROM TO LISTEN TARGET" (member FROM
#                                   dials 127.0.0.1:LISTEN, which is to forward
#                                   to member TO's real port TARGET), for a
#                                   fault proxy on each (`dlock chaos`'s
#                                   member faults); writes DIR/uri
#   zookeeper.sh launch DIR         start a configured ensemble, wait as start does
#   zookeeper.sh stop DIR           stop every member and remove DIR
#   zookeeper.sh kill DIR N         SIGKILL member N (a crash)
#   zookeeper.sh pause DIR N        SIGSTOP member N;  resume DIR N: SIGCONT
#   zookeeper.sh restart DIR [N]    start member N again after a kill (all: every
#                                   member that is down), wait until it serves
#   zookeeper.sh leader DIR         print the number of the member that leads
#   zookeeper.sh mode DIR N         print leader|follower|down for member N
#   zookeeper.sh port DIR N         print member N's client port
#
# Debian's zookeeper package (Java, from default-jre-headless) is started by
# hand with QuorumPeerMain: no systemd, nothing listens beyond 127.0.0.1.
# tickTime is 100 ms so that elections and session expiry happen within a
# test; sessions may be negotiated from 200 ms to 60 s. DLOCK_ZK_CHROOT (default
# /dlock) is the chroot written into the URI. DLOCK_ZK_JVM_OPTS replaces the
# JVM flags (the default favours start-up time: client compiler only).
source "$(dirname "$0")/lib.sh"

# Warnings and errors (a port already taken, a peer unreachable) go to each
# member's out.log: when an ensemble fails to start, they say why.
ZK_CP=${DLOCK_ZK_CLASSPATH:-/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar}
LOG_OPTS="-Dorg.slf4j.simpleLogger.defaultLogLevel=warn -Dorg.slf4j.simpleLogger.showDateTime=true
  -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS"

JVM_OPTS=${DLOCK_ZK_JVM_OPTS:--Xms32m -Xmx160m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xss512k}
MEMBERS=(1 2 3)

need_zookeeper() {
  if [ ! -f /usr/share/java/zookeeper.jar ] || ! command -v java >/dev/null; then
    echo "zookeeper.sh: ZooKeeper or Java is missing (apt-get install zookeeper default-jre-headless;" \
      "scripts/install-deps.sh installs both)" >&2
    exit 1
  fi
}

# The helpers below use shell builtins only (no cat, tr, grep, sed or
# timeout): wait_serving asks each member ten times a second while three
# JVMs start on the same cores, and a process per question cost seconds of
# CPU per ensemble start.

# four_letter PORT WORD: a ZooKeeper four-letter command, its answer on stdout.
four_letter() {
  local port=$1 word=$2 line
  { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null || return 1
  printf '%s' "$word" >&3
  while IFS= read -r -t 2 line <&3; do printf '%s\n' "$line"; done
  exec 3<&- 3>&-
}

# member_pid DIR N: member N's pid, if that process is still member N's
# JVM: a pid file outlives its process, and on a busy machine the pid is
# soon another process's, which a SIGSTOP or SIGKILL must never reach.
member_pid() {
  local pid="" arg args=()
  read -r pid 2>/dev/null <"$1/$2/pid" || [ -n "$pid" ] || return 1
  mapfile -d '' -t args 2>/dev/null <"/proc/$pid/cmdline" || return 1
  for arg in "${args[@]}"; do
    [ "$arg" = "$1/$2/zoo.cfg" ] && { echo "$pid"; return 0; }
  done
  return 1
}

# signal_member SIGNAL DIR N: fails, saying so, when member N is not running.
signal_member() {
  local pid
  pid=$(member_pid "$2" "$3") || { echo "zookeeper.sh: member $3 is not running" >&2; exit 1; }
  kill "-$1" "$pid"
}

# stop_member DIR N: SIGTERM, SIGKILL after 10 s (a member not running: nothing).
stop_member() {
  local pid i
  pid=$(member_pid "$1" "$2") || return 0
  kill -CONT "$pid" 2>/dev/null || true
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 200; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.05; done
  kill -KILL "$pid" 2>/dev/null || true
}

# member_running DIR N: member N's process, launched by this script, has not
# exited (it may not be the JVM yet: launch's subshell execs it).
member_running() {
  local pid="" _ state=""
  read -r pid 2>/dev/null <"$1/$2/pid" || [ -n "$pid" ] || return 1
  read -r _ _ state _ 2>/dev/null <"/proc/$pid/stat" || return 1
  [ "$state" != Z ]
}

member_mode() {  # member_mode DIR N
  local port="" line
  read -r port 2>/dev/null <"$1/$2/client_port" || [ -n "$port" ] || { echo down; return; }
  if [ -f "$1/$2/pid" ] && ! member_pid "$1" "$2" >/dev/null; then echo down; return; fi
  while IFS= read -r line; do
    [[ $line == "Mode: "* ]] && { echo "${line#Mode: }"; return; }
  done < <(four_letter "$port" srvr 2>/dev/null)
  echo down
}

launch() {  # launch DIR N
  local dir=$1 n=$2 extra=""
  [ -f "$dir/jvm_extra" ] && extra=$(cat "$dir/jvm_extra")
  (
    cd "$dir/$n"
    # The JVM is this subshell's child only in name: exec keeps the pid.
    # Emptied lock paths (container nodes) are looked for every second, not
    # every minute, so that a test sees a released key leave nothing behind.
    # An election's unanswered notifications are re-sent at most a second
    # apart (ZooKeeper's default backs off to 60 s, sized for 2 s ticks, not
    # 100 ms ones): members that start seconds apart on a busy machine
    # still find each other within a test's wait.
    exec setsid java $JVM_OPTS $LOG_OPTS $extra -Dzookeeper.log.dir="$dir/$n" \
      -Dzookeeper.4lw.commands.whitelist='*' -Dznode.container.checkIntervalMs=1000 \
      -Dzookeeper.fastleader.maxNotificationInterval=1000 \
      -cp "$ZK_CP" org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/$n/zoo.cfg" \
      >"$dir/$n/out.log" 2>&1 </dev/null
  ) &
  echo $! >"$dir/$n/pid"
}

# wait_serving DIR SECONDS N...: until each member is leader or follower;
# SECONDS of wall-clock time (each question may itself take a while on a
# busy machine). Fails at once when a member's JVM has exited: a port
# taken between configure and launch, say, which no wait will cure.
wait_serving() {
  local dir=$1 seconds=$2 deadline=$((SECONDS + $2)) n ok
  shift 2
  while ((SECONDS < deadline)); do
    ok=1
    for n in "$@"; do
      case $(member_mode "$dir" "$n") in
        leader | follower) ;;
        *)
          ok=0
          member_running "$dir" "$n" || { serving_failed "$dir" "member $n exited" "$@"; return 1; }
          ;;
      esac
    done
    [ $ok = 1 ] && return 0
    sleep 0.1
  done
  serving_failed "$dir" "members $* did not start serving within ${seconds}s" "$@"
}

# serving_failed DIR WHY N...: says so, with each member's last log lines
# (a stack trace's frames left out).
serving_failed() {
  local dir=$1 n
  echo "zookeeper.sh: $2; the end of each member's log:" >&2
  shift 2
  for n in "$@"; do
    echo "--- member $n ($(member_mode "$dir" "$n"))" >&2
    grep -v $'^\t' "$dir/$n/out.log" 2>/dev/null | tail -8 >&2
  done
  return 1
}

# digest_id NAME PASSWORD: the id ZooKeeper's digest scheme gives NAME.
digest_id() {
  printf '%s:%s' "$1" "$(printf '%s:%s' "$1" "$2" | openssl dgst -binary -sha1 | base64)"
}

# new_password FILE: a random password, kept in FILE (mode 0600).
new_password() {
  (umask 077; openssl rand -hex 16 >"$1")
  cat "$1"
}

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { sed -n '2,30p' "$0" >&2; exit 64; }
# Absolute, as the members' command lines have it (start makes it so):
# member_pid matches on it, and a relative DIR made `stop` find no member,
# delete the directory and leave the JVMs running.
dir=$(realpath -m -- "$dir")
case $cmd in
  start-secure)
    mkdir -p "$dir"
    new_password "$dir/dlock.password" >/dev/null
    ops_pw=$(new_password "$dir/ops.password")
    super_pw=$(new_password "$dir/super.password")
    # The JVM's arguments are readable by every local user (ps), so only a
    # digest of the super password goes there, as ZooKeeper's docs advise.
    echo "-Dzookeeper.DigestAuthenticationProvider.superDigest=$(digest_id super "$super_pw")" \
      >"$dir/jvm_extra"
    DLOCK_ZK_CHROOT=${DLOCK_ZK_CHROOT-/dlock} bash "$0" start "$dir" >/dev/null
    uri=$(cat "$dir/uri")
    hosts=${uri#zk://}
    echo "zk://dlock@$hosts?password_file=$dir/dlock.password&acl_admin=$(digest_id ops "$ops_pw")" \
      >"$dir/uri"
    cat "$dir/uri"
    ;;
  start)
    bash "$0" configure "$dir"
    exec bash "$0" launch "$dir"
    ;;
  configure | configure-linked)
    need_zookeeper
    mkdir -p "$dir"
    : >"$dir/links"
    declare -A quorum election
    for n in "${MEMBERS[@]}"; do
      # Nothing of an earlier ensemble in this directory (a run that was
      # interrupted before its stop): its znodes carry ACLs for passwords
      # this start replaces, and a member of it still running would be left
      # behind, nobody's to stop.
      stop_member "$dir" "$n"
      rm -rf "${dir:?}/$n"
      mkdir -p "$dir/$n/data"
      echo "$n" >"$dir/$n/data/myid"
      free_port >"$dir/$n/client_port"
      quorum[$n]=$(free_port)
      election[$n]=$(free_port)
    done
    for n in "${MEMBERS[@]}"; do
      servers=""
      for m in "${MEMBERS[@]}"; do
        q=${quorum[$m]} e=${election[$m]}
        if [ "$cmd" = configure-linked ] && [ "$m" != "$n" ]; then
          # Member n reaches member m through two links of its own.
          q=$(free_port) e=$(free_port)
          echo "$n $m $q ${quorum[$m]}" >>"$dir/links"
          echo "$n $m $e ${election[$m]}" >>"$dir/links"
        fi
        servers+="server.$m=127.0.0.1:$q:$e"$'\n'
      done
      cat >"$dir/$n/zoo.cfg" <<EOF
tickTime=100
initLimit=50
syncLimit=20
minSessionTimeout=200
maxSessionTimeout=60000
dataDir=$dir/$n/data
clientPort=$(cat "$dir/$n/client_port")
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=*
maxClientCnxns=0
$servers
EOF
    done
    hosts=""
    for n in "${MEMBERS[@]}"; do hosts+="${hosts:+,}127.0.0.1:$(cat "$dir/$n/client_port")"; done
    echo "zk://$hosts${DLOCK_ZK_CHROOT-/dlock}" >"$dir/uri"
    ;;
  launch)
    need_zookeeper
    for n in "${MEMBERS[@]}"; do launch "$dir" "$n"; done
    wait_serving "$dir" 90 "${MEMBERS[@]}"
    cat "$dir/uri"
    ;;
  stop)
    for n in "${MEMBERS[@]}"; do stop_member "$dir" "$n"; done
    rm -rf "$dir"
    ;;
  kill)
    n=${3:?member}
    pid=$(member_pid "$dir" "$n") || exit 0  # not running: nothing to kill
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
    ;;
  pause) signal_member STOP "$dir" "${3:?member}" ;;
  resume) signal_member CONT "$dir" "${3:?member}" ;;
  restart)
    need_zookeeper
    targets=("${3:-}")
    if [ -z "${3:-}" ]; then
      targets=()
      for n in "${MEMBERS[@]}"; do
        [ "$(member_mode "$dir" "$n")" = down ] && targets+=("$n")
      done
      if [ ${#targets[@]} = 0 ]; then  # all up: a full restart
        for n in "${MEMBERS[@]}"; do stop_member "$dir" "$n"; done
        targets=("${MEMBERS[@]}")
      fi
    fi
    for n in "${targets[@]}"; do
      stop_member "$dir" "$n"
      launch "$dir" "$n"
    done
    wait_serving "$dir" 90 "${targets[@]}"
    ;;
  leader)
    for n in "${MEMBERS[@]}"; do
      [ "$(member_mode "$dir" "$n")" = leader ] && { echo "$n"; exit 0; }
    done
    echo "zookeeper.sh: no member leads" >&2
    exit 1
    ;;
  mode) member_mode "$dir" "${3:?member}" ;;
  port) cat "$dir/${3:?member}/client_port" ;;
  *) sed -n '2,30p' "$0" >&2; exit 64 ;;
esac
