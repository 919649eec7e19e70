#!/usr/bin/env bash
# Installs what is needed, builds, and runs the whole test suite: plainly and
# under AddressSanitizer + UndefinedBehaviorSanitizer (every test, servers
# included), then the threaded core under ThreadSanitizer. This is the
# README's second command and what CI runs.
#
#   scripts/test.sh                 all three builds
#   scripts/test.sh default         one of: default asan tsan
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(default asan tsan)

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

# Under TSan: the code with threads of its own that every build has — the
# core's renewal loop and waits, the SQLite backend, the fences, the
# harness's proxy — through their unit tests and the SQLite conformance run.
# (The server backends' authors ran theirs under TSan too; they are left out
# here to keep the suite's time in bounds: scripts/test.sh tsan-all runs them.)
tsan_tests='^(core|fence|harness|plan)\.|Test\.|conformance_sqlite'
if [ "${1:-}" = tsan-all ]; then
  presets=(tsan)
  tsan_tests='.'
fi

for preset in "${presets[@]}"; do
  echo "=== build and test: $preset"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset"
  if [ "$preset" = tsan ]; then
    ctest --preset "$preset" -j2 -R "$tsan_tests"
  else
    ctest --preset "$preset" -j2
  fi
done
