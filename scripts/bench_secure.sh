#!/usr/bin/env bash
# Plaintext against secured (TLS and authentication): `dlock bench` on each
# server store started both ways (scripts/servers/<store>.sh start and
# start-secure), alternating plain/secure then secure/plain, two runs
# each; then a table of the uncontended cycle against its floor (Ping), for
# docs/benchmarks.md.
#
#   scripts/bench_secure.sh [DLOCK] [OUT_DIR] [STORE...]
#        default: build/dlock, /tmp/dlock-bench-secure, every store with start-secure
set -u
cd "$(dirname "$0")/.."
DLOCK=$(realpath "${1:-build/dlock}")
out=${2:-/tmp/dlock-bench-secure}
shift $(($# > 2 ? 2 : $#))
stores=("$@")
[ ${#stores[@]} -gt 0 ] || stores=(postgres redis zookeeper etcd)
mkdir -p "$out"
args=(--iterations 500 --duration 2s --leases 1000)

bench() {  # bench STORE VARIANT RUN URI
  "$DLOCK" bench --backend "$4" "${args[@]}" --json "$out/$1.$2.$3.json" >"$out/$1.$2.$3.txt" 2>&1 ||
    echo "FAILED $1 $2 run $3: $(tail -2 "$out/$1.$2.$3.txt")" >&2
}

for st in "${stores[@]}"; do
  grep -q '^ *start-secure)' "scripts/servers/$st.sh" || { echo "$st: no start-secure, skipped" >&2; continue; }
  plain=$out/srv.$st.plain secure=$out/srv.$st.secure
  bash "scripts/servers/$st.sh" start "$plain" >/dev/null &&
    bash "scripts/servers/$st.sh" start-secure "$secure" >/dev/null ||
    { echo "$st: servers did not start" >&2; continue; }
  bench "$st" plain 1 "$(cat "$plain/uri")"
  bench "$st" secure 1 "$(cat "$secure/uri")"
  bench "$st" secure 2 "$(cat "$secure/uri")"
  bench "$st" plain 2 "$(cat "$plain/uri")"
  bash "scripts/servers/$st.sh" stop "$plain" >/dev/null
  bash "scripts/servers/$st.sh" stop "$secure" >/dev/null
done

python3 - "$out" "${stores[@]}" <<'PY'
import glob, json, statistics, sys
out, stores = sys.argv[1], sys.argv[2:]
print("| store | variant | floor p50 (µs) | cycle p50 (µs) | cycle / 2 floors | runs |")
print("| --- | --- | ---: | ---: | ---: | ---: |")
for st in stores:
    for variant in ("plain", "secure"):
        runs = [json.load(open(f)) for f in sorted(glob.glob(f"{out}/{st}.{variant}.*.json"))]
        if not runs:
            continue
        floor = statistics.mean(r["floor"]["p50_us"] for r in runs)
        cycle = statistics.mean(r["cycle"]["p50_us"] for r in runs)
        ratio = statistics.mean(r["cycle"]["p50_us"] / (2 * r["floor"]["p50_us"]) for r in runs)
        print(f"| {st} | {variant} | {floor:.0f} | {cycle:.0f} | {ratio:.2f} | {len(runs)} |")
PY
