#!/usr/bin/env bash
# Installs what is needed, builds dlock, and runs `dlock demo` on the embedded
# default store (a SQLite file in your state directory): a lock holder is
# frozen past its lease, another takes the lock, the first wakes and writes,
# and the fence rejects its stale token. The README's first command.
#
# Light on purpose: it installs and builds only what the demo needs (the
# command on the SQLite store, in build-demo/, no tests); the other stores
# and the tests come with scripts/test.sh. docs/install.md, The first
# command.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh demo
cmake --preset demo >/dev/null
cmake --build --preset demo --target dlock_cli
echo
build-demo/dlock demo "$@"
