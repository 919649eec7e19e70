#!/usr/bin/env bash
# dlock exec on ZooKeeper, end to end, against the ensemble fixture:
#  - interoperability with Apache Curator (bench/peers/CuratorLock.java, Debian's
#    libcurator-recipes-java): Curator's InterProcessMutex holds a path while
#    `dlock exec` waits on the same path, and the other way round; the two
#    critical sections never overlap;
#  - a holder SIGSTOPped past its session timeout: its node goes with the
#    session, the next holder's token is larger, and the resumed process learns
#    it lost the lease (exit 79, child terminated).
source "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
URI=$(cat "${DLOCK_TEST_URI_FILE:?run through ctest: needs the zookeeper fixture}")
export DLOCK_BACKEND=$URI

CP=$(bash "$SRC/bench/peers/curator-classpath.sh")
mkdir -p "$WORK/classes"
javac -d "$WORK/classes" -cp "$CP" "$SRC/bench/peers/CuratorLock.java" ||
  { fail "javac could not build the Curator peer (apt-get install default-jdk-headless libcurator-recipes-java)"; finish; }
curator() { java -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$WORK/classes:$CP" CuratorLock "$@"; }

# wait_for_line FILE LINE: until FILE has LINE (20 s).
wait_for_line() {
  local i
  for ((i = 0; i < 400; i++)); do grep -qx "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  return 1
}

check_order() {  # check_order LOG first second
  local want got
  want=$(printf 'start %s\nend %s\nstart %s\nend %s' "$2" "$2" "$3" "$3")
  got=$(cat "$1")
  [ "$got" = "$want" ] || fail "critical sections overlapped or ran out of order: $(echo "$got" | tr '\n' '|')"
}

# 1. Curator holds, dlock waits.
LOG="$WORK/log1"
: >"$LOG"
curator hold "$URI" /interop/curator-first 1500 "$LOG" >"$WORK/curator1.out" 2>&1 &
cpid=$!
wait_for_line "$WORK/curator1.out" acquired || fail "Curator did not acquire: $(cat "$WORK/curator1.out")"
"$DLOCK" exec interop/curator-first --ttl 5s --wait 30s -- \
  sh -c 'echo "start dlock" >>"$1"; echo "end dlock" >>"$1"' sh "$LOG" ||
  fail "dlock exec behind Curator exited $?"
wait "$cpid" || fail "Curator exited $?"
check_order "$LOG" curator dlock
echo "ok: dlock exec waited for Curator's InterProcessMutex"

# 2. dlock holds, Curator waits.
LOG="$WORK/log2"
: >"$LOG"
"$DLOCK" exec interop/dlock-first --ttl 5s -- \
  sh -c 'echo "start dlock" >>"$1"; sleep 1.5; echo "end dlock" >>"$1"' sh "$LOG" &
dpid=$!
wait_for_line "$LOG" "start dlock" || fail "dlock exec did not start"
curator hold "$URI" /interop/dlock-first 10 "$LOG" >"$WORK/curator2.out" 2>&1 ||
  fail "Curator behind dlock exited $?: $(cat "$WORK/curator2.out")"
wait "$dpid" || fail "dlock exec exited $?"
check_order "$LOG" dlock curator
echo "ok: Curator's InterProcessMutex waited for dlock exec"

# 3. A holder paused past its session timeout (1 s).
"$DLOCK" exec paused-holder --ttl 1s -- sh -c 'echo "$DLOCK_TOKEN" >"$1"; exec sleep 30' sh "$WORK/tok1" &
hpid=$!
for ((i = 0; i < 200; i++)); do [ -s "$WORK/tok1" ] && break; sleep 0.05; done
[ -s "$WORK/tok1" ] || fail "the first holder never ran"
kill -STOP "$hpid"
sleep 3
"$DLOCK" exec paused-holder --ttl 1s --wait 10s -- sh -c 'echo "$DLOCK_TOKEN" >"$1"' sh "$WORK/tok2" ||
  fail "the next holder could not acquire while the first was paused"
t1=$(cat "$WORK/tok1") t2=$(cat "$WORK/tok2" 2>/dev/null || echo 0)
[ "$t2" -gt "$t1" ] || fail "next holder's token $t2 is not above the paused holder's $t1"
kill -CONT "$hpid"
wait "$hpid"
rc=$?
[ "$rc" = 79 ] || fail "the resumed holder exited $rc, want 79 (lease lost)"
echo "ok: paused holder lost its lease (tokens $t1 -> $t2, exit $rc)"

# 4. Bad input through the command line: a chroot that breaks the path rules.
expect_exit 64 "path rules" -- "$DLOCK" exec k --backend "zk://127.0.0.1:2181/a//b" -- true
finish
