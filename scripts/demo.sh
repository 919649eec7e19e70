#!/usr/bin/env bash
# Installs what is needed, builds dlock, and runs `dlock demo` on the embedded
# default store (a SQLite file in your state directory): a lock holder is
# frozen past its lease, another takes the lock, the first wakes and writes,
# and the fence rejects its stale token. The README's first command.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default --target dlock_cli
echo
build/dlock demo "$@"
