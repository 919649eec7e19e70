#!/usr/bin/env bash
# A private PostgreSQL cluster for tests and benchmarks (Debian's postgresql
# package; scripts/install-deps.sh installs it). Loopback only, no systemd.
#
#   postgres.sh start DIR     initdb a fresh cluster on a free 127.0.0.1 port, start
#                             it, create role and database `dlock` (password auth)
#                             and write DIR/uri: postgres://dlock:PASSWORD@127.0.0.1:PORT/dlock
#   postgres.sh stop DIR      stop it (fast shutdown) and remove DIR and the cluster
#   postgres.sh restart DIR   clean restart (fast shutdown, start) on the same port
#   postgres.sh crash DIR     immediate shutdown (no checkpoint: crash recovery on
#                             start), then start again on the same port
#   postgres.sh down DIR      stop the server, keep the cluster (`up` starts it again)
#   postgres.sh up DIR
#   postgres.sh psql DIR ARGS...  psql as the superuser over the Unix socket
#   postgres.sh start-secure DIR  as `start`, secured as operators do: TLS only
#                             (ssl=on; plaintext TCP refused by pg_hba.conf),
#                             scram-sha-256 passwords AND a client certificate
#                             whose CN is the role (clientcert=verify-full),
#                             certificates from lib.sh's make_certs in DIR.
#                             Roles: dlock (owns the database and, once dlock
#                             has run as it, dlock's tables) and dlock_app (no
#                             rights of its own; default privileges give it
#                             SELECT/INSERT/UPDATE/DELETE on what dlock
#                             creates). Passwords in DIR/<role>.password (0600);
#                             DIR/uri (role dlock), DIR/app_uri (dlock_app) and
#                             DIR/none_uri (dlock_none: a role with no grants)
#                             name them, no password inside:
#                             postgres://dlock@localhost:PORT/dlock?cacert=...
#
# The cluster lives in a fresh directory under /tmp (its path is in DIR/root),
# owned by the user that runs the server: as root that is the `postgres` user
# the Debian package creates (initdb refuses to run as root); otherwise the
# caller. The superuser connects only over the Unix socket in that directory;
# TCP connections need the password (scram-sha-256), so a wrong password is
# refused. Durability settings are PostgreSQL's defaults (fsync and
# synchronous_commit on).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/pg_lib.sh"

usage() {
  echo "usage: postgres.sh start|start-secure|stop|restart|crash|down|up|psql DIR [ARGS...]" >&2
  exit 64
}

[ $# -ge 2 ] || usage
verb=$1
dir=$2
shift 2
BIN=$(pg_bin)

server_start() {
  local root port
  root=$(cat "$dir/root")
  port=$(cat "$dir/port")
  as_owner "$BIN/pg_ctl" -D "$root/data" -w -t 60 -l "$root/log" \
    -o "-p $port -k $root -c listen_addresses=127.0.0.1 -c max_connections=200" \
    start >/dev/null
  wait_for_port "$port" 30
}

server_stop() {  # server_stop MODE
  local root
  root=$(cat "$dir/root")
  if as_owner "$BIN/pg_ctl" -D "$root/data" status >/dev/null 2>&1; then
    as_owner "$BIN/pg_ctl" -D "$root/data" -w -t 60 -m "$1" stop >/dev/null
  fi
}

# secure_cluster: turns the cluster `start` made into a TLS-only one with
# client certificates, and adds role dlock_app.
secure_cluster() {
  local root port data app_password i
  root=$(cat "$dir/root")
  port=$(cat "$dir/port")
  data=$root/data
  make_certs "$dir" dlock
  make_client_cert "$dir" app dlock_app
  make_client_cert "$dir" none dlock_none
  # The server's key must belong to the server's user, mode 0600.
  install -m 0600 "$dir/server.key" "$data/server.key"
  install -m 0644 "$dir/server.pem" "$data/server.crt"
  install -m 0644 "$dir/ca.pem" "$data/root.crt"
  if [ "$(id -u)" -eq 0 ]; then chown postgres: "$data/server.key" "$data/server.crt" "$data/root.crt"; fi
  printf '%s\n' "ssl = on" "ssl_cert_file = 'server.crt'" "ssl_key_file = 'server.key'" \
    "ssl_ca_file = 'root.crt'" "ssl_min_protocol_version = 'TLSv1.2'" \
    "password_encryption = 'scram-sha-256'" | as_owner tee -a "$data/postgresql.conf" >/dev/null
  # Over TCP: TLS, a password and a certificate naming the role, or nothing.
  printf '%s\n' "local     all  all                 trust" \
    "hostssl   all  all  127.0.0.1/32   scram-sha-256  clientcert=verify-full" \
    "hostnossl all  all  0.0.0.0/0      reject" | as_owner tee "$data/pg_hba.conf" >/dev/null
  app_password=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
  (umask 077; printf '%s\n' "$app_password" >"$dir/dlock_app.password")
  (umask 077; printf '%s\n' "$app_password-none" >"$dir/dlock_none.password")
  "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$root" -p "$port" -U postgres -d dlock \
    -c "CREATE ROLE dlock_app LOGIN PASSWORD '$app_password'" \
    -c "CREATE ROLE dlock_none LOGIN PASSWORD '$app_password-none'" \
    -c "ALTER DEFAULT PRIVILEGES FOR ROLE dlock IN SCHEMA public
          GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO dlock_app" \
    -c "ALTER DEFAULT PRIVILEGES FOR ROLE dlock IN SCHEMA public
          GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO dlock_app" >/dev/null
  as_owner "$BIN/pg_ctl" -D "$data" -w reload >/dev/null
  # A reload turns TLS on at once; wait until the server asks for a certificate.
  local out
  for ((i = 0; i < 100; i++)); do
    out=$(PGSSLMODE=require PGCONNECT_TIMEOUT=2 "$BIN/psql" -X -q -h 127.0.0.1 -p "$port" \
      -U nobody -d dlock -c '' 2>&1 || true)
    [[ $out == *certificate* ]] && return 0
    sleep 0.1
  done
  echo "postgres.sh: TLS did not come up on port $port" >&2
  return 1
}

case $verb in
  start-secure)
    "$0" start "$dir" >/dev/null
    password=$(sed -n 's|^postgres://dlock:\([^@]*\)@.*|\1|p' "$dir/uri")
    (umask 077; printf '%s\n' "$password" >"$dir/dlock.password")
    secure_cluster || { cat "$(cat "$dir/root")/log" >&2; exit 1; }
    port=$(cat "$dir/port")
    tls="sslmode=verify-full&cacert=$dir/ca.pem"
    echo "postgres://dlock_app@localhost:$port/dlock?$tls&cert=$dir/app.pem&key=$dir/app.key&password_file=$dir/dlock_app.password" \
      >"$dir/app_uri"
    echo "postgres://dlock_none@localhost:$port/dlock?$tls&cert=$dir/none.pem&key=$dir/none.key&password_file=$dir/dlock_none.password" \
      >"$dir/none_uri"
    uri="postgres://dlock@localhost:$port/dlock?$tls&cert=$dir/client.pem&key=$dir/client.key&password_file=$dir/dlock.password"
    echo "$uri" >"$dir/uri"
    echo "$uri"
    ;;
  start)
    if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
      echo "postgres.sh: running as root needs the 'postgres' user (Debian package postgresql)" >&2
      exit 1
    fi
    mkdir -p "$dir"
    if [ -f "$dir/root" ]; then "$0" stop "$dir" || true; mkdir -p "$dir"; fi
    root=$(mktemp -d /tmp/dlock-pg.XXXXXX)
    echo "$root" >"$dir/root"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$root"
    chmod 700 "$root"
    port=$(free_port)
    echo "$port" >"$dir/port"
    password=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
    as_owner "$BIN/initdb" -D "$root/data" -U postgres -E UTF8 --locale=C --no-sync \
      --auth-local=trust --auth-host=scram-sha-256 --no-instructions >"$dir/initdb.log" 2>&1 ||
      { cat "$dir/initdb.log" >&2; exit 1; }
    server_start || { cat "$root/log" >&2; exit 1; }
    # CREATEROLE: tests log in as roles with fewer rights than dlock's.
    "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$root" -p "$port" -U postgres -d postgres \
      -c "CREATE ROLE dlock LOGIN CREATEROLE PASSWORD '$password'" \
      -c "CREATE DATABASE dlock OWNER dlock" >/dev/null
    uri="postgres://dlock:$password@127.0.0.1:$port/dlock"
    echo "$uri" >"$dir/uri"
    echo "$uri"
    ;;
  stop)
    if [ -f "$dir/root" ]; then
      root=$(cat "$dir/root")
      server_stop fast || server_stop immediate || true
      case $root in /tmp/dlock-pg.*) rm -rf "$root" ;; esac
    fi
    rm -rf "$dir"
    ;;
  restart)
    server_stop fast
    server_start
    ;;
  crash)
    server_stop immediate
    server_start
    ;;
  down)
    server_stop fast
    ;;
  up)
    server_start
    ;;
  psql)
    "$BIN/psql" -X -v ON_ERROR_STOP=1 -h "$(cat "$dir/root")" -p "$(cat "$dir/port")" \
      -U postgres -d dlock "$@"
    ;;
  *)
    usage
    ;;
esac
