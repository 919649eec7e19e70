#!/usr/bin/env bash
# Installs what is needed, builds, and runs the whole test suite: once
# plainly, once under AddressSanitizer + UndefinedBehaviorSanitizer, once
# under ThreadSanitizer. This is the README's second command and what CI runs.
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

for preset in "${presets[@]}"; do
  echo "=== build and test: $preset"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset"
  ctest --preset "$preset" -j2
done
