#!/usr/bin/env bash
# Starts and stops a postgres server for the tests (being written).
source "$(dirname "$0")/lib.sh"
echo "scripts/servers/postgres.sh: not written yet" >&2
exit 1
