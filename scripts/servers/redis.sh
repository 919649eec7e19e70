#!/usr/bin/env bash
# Starts and stops a redis server for the tests (being written).
source "$(dirname "$0")/lib.sh"
echo "scripts/servers/redis.sh: not written yet" >&2
exit 1
