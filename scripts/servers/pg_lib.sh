# What postgres.sh and postgres_replicated.sh share: finding Debian's
# PostgreSQL server binaries, and running them as the clusters' owner.
# Sourced, after lib.sh.

# pg_bin: the newest server binaries under /usr/lib/postgresql, or $PG_BIN.
pg_bin() {
  if [ -n "${PG_BIN:-}" ]; then echo "$PG_BIN"; return; fi
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$d" ] || [ ! -x "$d/initdb" ]; then
    echo "$(basename "$0"): PostgreSQL server binaries not found under /usr/lib/postgresql;" \
         "install them with scripts/install-deps.sh (Debian package postgresql)" >&2
    return 1
  fi
  echo "$d"
}

# as_owner CMD...: runs CMD as the clusters' owner (the `postgres` user the
# Debian package creates when run as root: initdb refuses root).
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}
