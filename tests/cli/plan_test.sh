#!/usr/bin/env bash
# `dlock plan`: the source text's worked answers through the command line
# (--json checked field by field), the sentences, and every bad input.
source "$(dirname "$0")/lib.sh"

# check_json 'python expression over j' -- plan arguments...
check_json() {
  local expr=$1
  shift 2
  if ! "$DLOCK" plan "$@" --json >"$WORK/plan.json" 2>"$WORK/stderr"; then
    fail "'plan $*' failed: $(cat "$WORK/stderr")"
    return
  fi
  if "$PYTHON3" - "$WORK/plan.json" "$expr" <<'PY'
import json, math, sys
j = json.load(open(sys.argv[1]))
ok = eval(sys.argv[2], {"j": j, "near": lambda a, b, tol: abs(a - b) <= tol, "math": math})
if not ok:
    print(json.dumps(j, indent=1), file=sys.stderr)
sys.exit(0 if ok else 1)
PY
  then
    echo "ok: $expr: plan $*"
  else
    fail "'plan $*': not $expr"
  fi
}

# Worked answer 1, with the default round trip (1 ms, so 2 ms of Acquire +
# Release): the hot key still lands in the text's 42-44%.
w1=(--rate 1M/day --peak 3 --hold 40ms --hot-share 0.3)
check_json 'near(j["avg_rate_per_s"], 12, 0.5) and near(j["peak_rate_per_s"], 35, 1)' -- "${w1[@]}"
check_json 'j["hold_ceiling_ops_per_s"] == 25 and near(j["ceiling_ops_per_s"], 23.8, 0.05)' -- "${w1[@]}"
check_json '10 <= j["hot_key_rate_per_s"] <= 11 and 0.42 <= j["utilisation"] <= 0.44' -- "${w1[@]}"
check_json 'j["verdict"] == "holds_now_fails_before_doubling" and j["growth_headroom_factor"] < 2' -- "${w1[@]}"
check_json 'j["queue_model"] == "M/M/1" and j["queue_wait_p99_s"] > 5 * j["queue_wait_mean_s"]' -- "${w1[@]}"
check_json '"shrink_critical_section" in j["remedies"] and "split_key" in j["remedies"]' -- "${w1[@]}"
check_json 'j["rtt_source"] == "default" and j["coordination_overhead_s"] == 0.002' -- "${w1[@]}"
check_json 'j["mechanism"] is None and j["idempotent"] is None' -- "${w1[@]}"
# ...and exactly as the text prices it, the critical section alone.
check_json 'j["ceiling_ops_per_s"] == 25 and 0.415 <= j["utilisation"] <= 0.44' -- "${w1[@]}" --rtt 0ms

# Worked answer 2: 3/s on one key, 200 ms hold, the lease raised to 5 minutes.
w2=(--rate 3/s --hold 200ms --lease 5m --rtt 0ms)
check_json 'j["ceiling_ops_per_s"] == 5 and near(j["utilisation"], 0.6, 1e-9)' -- "${w2[@]}"
check_json 'near(j["concurrency"], 0.6, 1e-9) and near(j["slack_ops_per_s"], 2, 1e-9)' -- "${w2[@]}"
check_json 'near(j["crash_backlog_ops"], 900, 1e-6) and near(j["crash_drain_s"], 450, 1e-6)' -- "${w2[@]}"
check_json 'near(j["crash_degraded_s"], 750, 1e-6) and j["comparison_lease_s"] == 30' -- "${w2[@]}"
check_json 'near(j["comparison_crash_degraded_s"], 75, 1e-6) and near(j["crash_cost_ratio"], 10, 1e-9)' -- "${w2[@]}"
check_json '"fence_and_tune_lease" in j["remedies"]' -- "${w2[@]}"
check_json 'j["comparison_lease_s"] == 3' -- --rate 3/s --hold 200ms --lease 30s

# Worked answer 3: the mechanism follows idempotency.
check_json 'j["mechanism"] == "database_row" and "database" in j["mechanism_text"]' -- \
  --rate 1/day --hold 10m --idempotent yes
check_json 'j["mechanism"] == "fencing_token_or_deduplication_key"' -- \
  --rate 1/day --hold 10m --idempotent no

# Saturated: a verdict with nulls where a figure would be infinite, never an
# inf or nan (python's json would accept Infinity/NaN, so check the text too).
check_json 'j["saturated"] and j["verdict"] == "saturated" and j["crash_drain_s"] is None' -- \
  --rate 30/s --hold 40ms
check_json 'j["queue_wait_mean_s"] is None and j["queue_wait_p99_s"] is None' -- --rate 25 --hold 40ms --rtt 0ms
grep -qiE ':\s*-?(inf|nan)' "$WORK/plan.json" && fail "inf or nan in: $(cat "$WORK/plan.json")"

# The rtt from a bench result file.
echo '{"floor_rtt_us": 250, "other": 1}' >"$WORK/bench.json"
check_json 'j["rtt_s"] == 0.00025 and j["rtt_source"].startswith("--from-bench")' -- \
  --rate 3/s --hold 10ms --from-bench "$WORK/bench.json"

# The sentences, for worked answer 1.
out=$("$DLOCK" plan "${w1[@]}")
for want in "1M/day is 11.6/s on average and 34.7/s at the 3× peak" \
  "1 ÷ 40ms = 25 operations per second" "30% of the peak is 10.4/s" \
  "43.8% utilisation" "Little's law: 10.4/s × 42ms = 0.44" "Queueing (M/M/1" \
  "Crash at a 30s lease" "At a 3s lease instead (a tenth of this one" \
  "Verdict: holds now, fails before traffic doubles." "shrink the critical section" \
  "split the key"; do
  grep -qF -- "$want" <<<"$out" && echo "ok: says '$want'" || fail "output lacks '$want': $out"
done
out=$("$DLOCK" plan "${w2[@]}" --idempotent no)
for want in "Crash at a 5m lease" "3/s × 300s = 900 operations queue" "in 450s" \
  "750s of degraded service" "75s degraded" "costs 10× the degraded time" \
  "fencing token" "deduplication key"; do
  grep -qF -- "$want" <<<"$out" && echo "ok: says '$want'" || fail "output lacks '$want': $out"
done

# Bad input: one line, exit 64.
expect_exit 64 "invalid rate '-5/s' (negative)" -- "$DLOCK" plan --rate=-5/s --hold 40ms
expect_exit 64 "invalid rate '0/s' (zero)" -- "$DLOCK" plan --rate 0/s --hold 40ms
expect_exit 64 "invalid rate '0' (zero)" -- "$DLOCK" plan --rate 0 --hold 40ms
expect_exit 64 "unknown unit 'fortnight'" -- "$DLOCK" plan --rate 5/fortnight --hold 40ms
expect_exit 64 "unknown multiplier 'x'" -- "$DLOCK" plan --rate 5x/s --hold 40ms
expect_exit 64 "hot share 1.5 is outside (0, 1]" -- "$DLOCK" plan --rate 5 --hold 40ms --hot-share 1.5
expect_exit 64 "hot share 0 is outside (0, 1]" -- "$DLOCK" plan --rate 5 --hold 40ms --hot-share 0
expect_exit 64 "hot share -0.2 is outside (0, 1]" -- "$DLOCK" plan --rate 5 --hold 40ms --hot-share=-0.2
expect_exit 64 "--hold: invalid duration '40' (no unit)" -- "$DLOCK" plan --rate 5 --hold 40
expect_exit 64 "--hold: invalid duration '40x' (unknown unit 'x')" -- "$DLOCK" plan --rate 5 --hold 40x
expect_exit 64 "hold must be positive" -- "$DLOCK" plan --rate 5 --hold 0ms
expect_exit 64 "--lease: invalid duration" -- "$DLOCK" plan --rate 5 --hold 40ms --lease 5y
expect_exit 64 "--rtt: invalid duration '-1ms' (negative)" -- "$DLOCK" plan --rate 5 --hold 40ms --rtt=-1ms
expect_exit 64 "peak factor 0.5 is below 1" -- "$DLOCK" plan --rate 5 --hold 40ms --peak 0.5
expect_exit 64 "--rate is required" -- "$DLOCK" plan --hold 40ms
expect_exit 64 "--hold is required" -- "$DLOCK" plan --rate 5
expect_exit 64 "--idempotent" -- "$DLOCK" plan --rate 5 --hold 40ms --idempotent maybe
expect_exit 64 "--from-bench: cannot read" -- "$DLOCK" plan --rate 5 --hold 40ms --from-bench "$WORK/none.json"
echo '{"p50_us": 3}' >"$WORK/nofloor.json"
expect_exit 64 "no positive number field floor_rtt_us" -- \
  "$DLOCK" plan --rate 5 --hold 40ms --from-bench "$WORK/nofloor.json"
echo 'not json' >"$WORK/garbage.json"
expect_exit 64 "is not a JSON object" -- "$DLOCK" plan --rate 5 --hold 40ms --from-bench "$WORK/garbage.json"
expect_exit 64 "excludes" -- "$DLOCK" plan --rate 5 --hold 40ms --rtt 1ms --from-bench "$WORK/bench.json"
finish
