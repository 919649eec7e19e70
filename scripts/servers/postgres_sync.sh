#!/usr/bin/env bash
# postgres_replicated.sh with synchronous replication (chaos takes a script path only).
DLOCK_PG_SYNC=1 exec "$(dirname "$0")/postgres_replicated.sh" "$@"
