# Sourced by tests/cli/lib.sh and scripts/servers/lib.sh: PYTHON3 is
# Debian's python3, for which install-deps.sh installs the modules used,
# rather than the first on PATH: a version manager's shim there (pyenv's)
# cost 0.6 s of CPU and up to 2 s per start on a busy machine, and the
# tests start Python hundreds of times. DLOCK_PYTHON picks another.
PYTHON3=${DLOCK_PYTHON:-/usr/bin/python3}
[ -x "$PYTHON3" ] || PYTHON3=python3
