#!/usr/bin/env bash
# clang-tidy with the repository's .clang-tidy over every source file of
# src/ and harness/ that the build compiles: functions of at most 80 lines,
# and a few bugprone checks. Needs a configured build directory (for its
# compile_commands.json).
#
#   scripts/tidy.sh [BUILD_DIR]        default: build
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ -f "$build/compile_commands.json" ] ||
  { echo "tidy: no $build/compile_commands.json: configure first (cmake --preset default)" >&2; exit 2; }
# Generated sources (protobuf) are not ours to shape.
mapfile -t files < <(python3 - "$build/compile_commands.json" <<'PY'
import json, os, sys
seen = set()
for entry in json.load(open(sys.argv[1])):
    f = os.path.relpath(os.path.join(entry["directory"], entry["file"]))
    if (f.startswith("src/") or f.startswith("harness/")) and f not in seen:
        seen.add(f)
        print(f)
PY
)
echo "tidy: ${#files[@]} files"
run-clang-tidy -quiet -p "$build" -j "$(nproc)" "${files[@]}" >"$build/tidy.log" 2>&1 || {
  grep -E "(warning|error):" "$build/tidy.log" | sort -u >&2
  echo "tidy: failed; the whole output is in $build/tidy.log" >&2
  exit 1
}
echo "tidy: clean"
