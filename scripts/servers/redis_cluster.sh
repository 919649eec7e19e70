#!/usr/bin/env bash
# redis.sh's Redis Cluster (three primaries, three replicas) for
# `dlock chaos --server-script` (harness/linked_cluster.h): members 1..6 are
# c1..c6, and the leader is the primary serving the slot of the run's key
# (DIR/key). Every verb but configure-linked is redis.sh's.
set -euo pipefail
here=$(dirname "$0")
case "${1:-}" in
  configure-linked) exec bash "$here/redis.sh" configure-cluster "${2:?DIR}" ;;
  *) exec bash "$here/redis.sh" "$@" ;;
esac
