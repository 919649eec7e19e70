# Helpers for the chaos failover tests (sourced after lib.sh): reading one
# run's JSON report.

# run_dir JSON: the kept directory of the report's first run.
run_dir() {
  "$PYTHON3" -c 'import json,sys; print(json.loads(sys.argv[1])["run_results"][0]["dir"])' \
    "$1" 2>/dev/null
}

# killed JSON: whether the run staged a failover: it killed a primary with
# unreplicated grants, and a worker was granted after that (the promoted
# member served). On a loaded machine the schedule can slip until the run
# ends with the replica held back and no kill, or Sentinel can take longer
# to elect than the run has left: either way the run shows nothing about a
# failover.
killed() {
  local dir
  dir=$(run_dir "$1") || return 1
  "$PYTHON3" - "$dir/history.jsonl" <<'PY' 2>/dev/null
import json, sys
killed_at = None
granted_after = False
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("op") == "member-kill-unreplicated" and killed_at is None:
        killed_at = e["t_ns"]
    elif (killed_at is not None and e.get("op") == "acquire" and e.get("type") == "ok"
          and e["t_ns"] > killed_at):
        granted_after = True
sys.exit(0 if granted_after else 1)
PY
}

# member_pids: the Redis members (and sentinels) a chaos run started under
# $WORK that still run, found by the pid files their script wrote: a
# sentinel rewrites its process title, which then names no directory, so
# `pkill -f DIR` misses it. A pid counts only while it is a redis process
# (the files outlive a member that was stopped, and pids are reused).
member_pids() {
  local f pid
  for f in "$WORK"/dlock-chaos-cluster-*/*.pid; do
    [ -s "$f" ] || continue
    pid=$(cat "$f")
    case $(cat "/proc/$pid/comm" 2>/dev/null) in redis*) echo "$pid" ;; esac
  done
  pgrep -f "$WORK/dlock-chaos-cluster"
  return 0
}

# stop_members: SIGKILL what member_pids finds (a test's EXIT trap).
stop_members() {
  local pid
  for pid in $(member_pids); do kill -KILL "$pid" 2>/dev/null; done
  return 0
}

# summary JSON: the run in a few lines (a failure's message, kept short).
summary() {
  "$PYTHON3" - "$1" <<'PY' 2>/dev/null || echo "$1"
import json, sys
r = json.loads(sys.argv[1])
print(r["backend"], "faults:", r["faults_by_kind"])
for c in r["run_results"][0]["checks"]:
    if c["verdict"] != "pass":
        print(f'  {c["id"]} {c["verdict"]}: {c["detail"]}', "; ".join(c["violations"][:2]))
PY
}

# run_until_killed RUN ARGS...: calls `RUN ARGS... SEED` with seeds 5, 6, 7
# until a run stages a failover (killed); sets $out and $rc from the last
# run. 1 if none did. A schedule slips when a loaded machine makes the
# failover slow, so each try is given more time: RUN takes its duration
# from `stretched`.
attempt=1
run_until_killed() {
  local seed
  attempt=1
  for seed in 5 6 7; do
    out=$("$@" "$seed")
    rc=$?
    killed "$out" && return 0
    echo "seed $seed: no failover served a grant (the schedule slipped); again, longer" >&2
    attempt=$((attempt + 1))
  done
  return 1
}

# stretched SECONDS: the run's duration for this try of run_until_killed:
# SECONDS, then 1.5 and 2 times it.
stretched() {
  echo "$(($1 * (attempt + 1) / 2))s"
}
