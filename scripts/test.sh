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

# Under TSan: the code with threads of its own (the core's renewal loop, the
# backends' waiters and sessions, the fences, the harness's proxy), through
# their unit and conformance tests. The end-to-end CLI scripts exercise the
# same code in single-threaded processes and run in the other two builds.
tsan_tests='^(core|fence|harness|plan)\.|Test\.|conformance_|^server_|_backend$'

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
