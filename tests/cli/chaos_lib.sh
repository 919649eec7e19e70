# Helpers for the chaos failover tests (sourced after lib.sh): reading one
# run's JSON report.

# run_dir JSON: the kept directory of the report's first run.
run_dir() {
  python3 -c 'import json,sys; print(json.loads(sys.argv[1])["run_results"][0]["dir"])' \
    "$1" 2>/dev/null
}

# killed JSON: whether the run got as far as killing a primary with
# unreplicated grants. On a loaded machine the schedule can slip until the
# run ends with the replica held back and no kill: nothing was staged, and
# the run shows nothing about a failover.
killed() {
  local dir
  dir=$(run_dir "$1") || return 1
  grep -q '"member-kill-unreplicated"' "$dir/history.jsonl" 2>/dev/null
}

# summary JSON: the run in a few lines (a failure's message, kept short).
summary() {
  python3 - "$1" <<'PY' 2>/dev/null || echo "$1"
import json, sys
r = json.loads(sys.argv[1])
print(r["backend"], "faults:", r["faults_by_kind"])
for c in r["run_results"][0]["checks"]:
    if c["verdict"] != "pass":
        print(f'  {c["id"]} {c["verdict"]}: {c["detail"]}', "; ".join(c["violations"][:2]))
PY
}

# run_until_killed RUN ARGS...: calls `RUN ARGS... SEED` with seeds 5, 6, 7
# until a run kills the primary; sets $out and $rc from the last run. 1 if
# none did.
run_until_killed() {
  local seed
  for seed in 5 6 7; do
    out=$("$@" "$seed")
    rc=$?
    killed "$out" && return 0
    echo "seed $seed: the primary was never killed (the schedule slipped); again" >&2
  done
  return 1
}
