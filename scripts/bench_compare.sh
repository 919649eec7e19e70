#!/usr/bin/env bash
# Before/after: `dlock bench` of two builds of dlock against the same
# server, alternating, three runs each, for every store; then a table of
# the ratios (scripts/bench_compare_table.py OUT_DIR).
#
#   scripts/bench_compare.sh OLD/build/dlock NEW/build/dlock [OUT_DIR]
set -u
OLD=${1:?usage: bench_compare.sh OLD_DLOCK NEW_DLOCK [OUT_DIR]}
NEW=${2:?usage: bench_compare.sh OLD_DLOCK NEW_DLOCK [OUT_DIR]}
S=$(cd "$(dirname "$0")" && pwd)/servers
out=${3:-/tmp/dlock-bench-compare}; mkdir -p "$out"
args=(--iterations 500 --duration 2s --leases 2000)
run_store() {  # run_store NAME URI
  for i in 1 2 3; do
    for which in old new; do
      bin=$OLD; [ $which = new ] && bin=$NEW
      "$bin" bench --backend "$2" "${args[@]}" --json "$out/$1.$which.$i.json" >"$out/$1.$which.$i.txt" 2>&1 ||
        echo "FAILED $1 $which $i: $(tail -2 "$out/$1.$which.$i.txt")"
    done
  done
}
d=$(mktemp -d); run_store sqlite "sqlite://$d/locks.db"
for st in postgres redis zookeeper etcd; do
  dir=$(mktemp -d -u "$out/srv.$st.XXXX")
  bash "$S/$st.sh" start "$dir" >/dev/null || { echo "cannot start $st"; continue; }
  run_store "$st" "$(cat "$dir/uri")"
  bash "$S/$st.sh" stop "$dir" >/dev/null
done
echo all done
