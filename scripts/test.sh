#!/usr/bin/env bash
# Installs what is needed, builds, checks the code with clang-tidy
# (scripts/tidy.sh), and runs the whole test suite: plainly (then, on a
# fresh Debian 12, the Debian packages and the README's first command:
# scripts/deb_check.sh, scripts/demo_check.sh) and
# under AddressSanitizer + UndefinedBehaviorSanitizer (every test, servers
# included), then the threaded code under ThreadSanitizer. This is the
# README's second command and what CI runs.
#
#   scripts/test.sh                 all three builds
#   scripts/test.sh default         one of: default asan tsan
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(default asan tsan)

# Three trees are built on every run, most of whose objects the last run
# already compiled: builds go through ccache (keyed on the preprocessed
# source and the flags, paths taken relative to this checkout, so a fresh
# clone elsewhere finds the objects too). docs/decisions.md, "What CI runs".
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=true
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

# Under TSan: every piece with threads of its own — the core's renewal loop
# and waits, the SQLite backend, the fences, the harness's proxy (their unit
# tests), and each server backend's listener, subscriber or session threads
# (its backend suite, its tests against the secured servers, a Redis
# Cluster and a secured one (redis_secure_cluster), and its
# conformance runs against real servers: ~1 min more on 2 vCPUs). The CLI scripts and fault harness runs are left to the
# plain and ASan builds: scripts/test.sh tsan-all runs them under TSan too.
tsan_tests='^(core|fence|harness|plan)\.|Test\.|conformance_|_backend$|^(redis|postgres|mariadb|zookeeper)_(secure|acl)|^redis_cluster$'
if [ "${1:-}" = tsan-all ]; then
  presets=(tsan)
  tsan_tests='.'
fi

for preset in "${presets[@]}"; do
  echo "=== build and test: $preset"
  cmake --preset "$preset" "${launcher[@]}" >/dev/null
  if [ "$preset" = tsan ] && [ "$tsan_tests" != . ]; then
    # Its tests are test programs only (tests/CMakeLists.txt): the command
    # is not built a third time.
    cmake --build --preset "$preset" --target test_programs
  else
    cmake --build --preset "$preset"
  fi
  # Once, on the plain build: functions of at most 80 lines and the bugprone
  # checks of .clang-tidy.
  if [ "$preset" = default ]; then scripts/tidy.sh build; fi
  if [ "$preset" = tsan ]; then
    # One test lives on a 200 ms ZooKeeper session (the ensemble's minimum)
    # and must heartbeat within it; under TSan's slowdown, with a second test
    # in parallel, it missed once in a handful of runs. It runs in the other
    # two builds.
    GTEST_FILTER=${GTEST_FILTER:--ZooKeeperBackendTest.OneSessionPerClientWithTheNegotiatedTimeout} \
      ctest --preset "$preset" -j2 -R "$tsan_tests"
  elif [ "$preset" = default ]; then
    # Three at a time on two cores: most of a plain test's time is spent
    # waiting on a server's timers (a failover, a sweep, a lease running
    # out), so a third test overlaps those waits: 580 s against 724 s at
    # -j2 (docs/decisions.md, "What CI runs"). The sanitized builds, which
    # spend theirs on CPU, stay at two.
    ctest --preset "$preset" -j3
  else
    ctest --preset "$preset" -j2
  fi
  # Once, after the plain build's tests, each on a fresh Debian 12 (a
  # debootstrap chroot): the build's Debian packages installed and used, and
  # the README's first command (about 4 minutes together).
  if [ "$preset" = default ]; then
    # Each starts from a debootstrap kept for a week (scripts/fresh_debian.sh).
    cache=${DLOCK_FRESH_ROOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dlock/fresh-bookworm}
    as_root=(env "DLOCK_FRESH_ROOT_CACHE=$cache")
    [ "$(id -u)" = 0 ] || as_root=(sudo "${as_root[@]}")
    "${as_root[@]}" scripts/deb_check.sh build
    "${as_root[@]}" scripts/demo_check.sh
  fi
done
