#!/usr/bin/env bash
# A private MariaDB server for tests and benchmarks (Debian's mariadb-server
# package; scripts/install-deps.sh installs it). Loopback only, no systemd.
#
#   mariadb.sh start DIR     a fresh server on a free 127.0.0.1 port, with a
#                            database and a user `dlock` (password auth) and
#                            DIR/uri: mysql://dlock:PASSWORD@127.0.0.1:PORT/dlock
#   mariadb.sh stop DIR      stop it and remove DIR and its data
#   mariadb.sh restart DIR   clean restart (shutdown, start) on the same port
#   mariadb.sh crash DIR     SIGKILL (crash recovery on start), then start
#   mariadb.sh down DIR      stop the server, keep its data (`up` starts it again)
#   mariadb.sh up DIR
#   mariadb.sh pause DIR     SIGSTOP the server (it takes connections and never
#   mariadb.sh resume DIR    answers), SIGCONT it
#   mariadb.sh sql DIR ARGS...  the mariadb client as the server's root, over
#                            its Unix socket
#   mariadb.sh start-secure DIR  as `start`, secured as operators do: TLS only
#                            (require_secure_transport), and each user needs
#                            its password AND a client certificate whose
#                            subject names it (REQUIRE SUBJECT ... ISSUER),
#                            certificates from lib.sh's make_certs in DIR.
#                            Users: dlock (everything on database dlock),
#                            dlock_app (rows and procedures only: SELECT,
#                            INSERT, UPDATE, DELETE, EXECUTE) and dlock_none
#                            (no grants). Passwords in DIR/<user>.password
#                            (0600); DIR/uri (dlock), DIR/app_uri and
#                            DIR/none_uri name them, no password inside:
#                            mysql://dlock@localhost:PORT/dlock?cacert=...
#
# The server's files live in a fresh directory under /tmp (its path in
# DIR/root), owned by the user that runs the server: as root that is the
# `mysql` user the Debian package creates (mariadbd switches to it itself);
# otherwise the caller. Its root account logs in only over the Unix socket
# there (unix_socket authentication); TCP logins need a password.
# Durability settings are MariaDB's defaults (innodb_flush_log_at_trx_commit
# = 1). A first start makes a template data directory (mariadb-install-db,
# a few seconds); later starts copy it.
source "$(dirname "$0")/lib.sh"

usage() {
  echo "usage: mariadb.sh start|start-secure|stop|restart|crash|down|up|pause|resume|sql DIR [ARGS...]" >&2
  exit 64
}

[ $# -ge 2 ] || usage
verb=$1
dir=$2
shift 2

owner() { if [ "$(id -u)" -eq 0 ]; then echo mysql; else id -un; fi; }

# The server's settings, in ROOT/my.cnf.
write_config() {
  local root=$1 port=$2
  cat >"$root/my.cnf" <<EOF
[mariadbd]
user=$(owner)
datadir=$root/data
port=$port
bind-address=127.0.0.1
socket=$root/s.sock
pid-file=$root/pid
log-error=$root/error.log
skip-name-resolve
skip-log-bin
performance_schema=OFF
innodb_buffer_pool_size=64M
innodb_log_file_size=16M
max_connections=400
EOF
}

# A data directory as mariadb-install-db makes it, made once per server
# version and user, then copied.
template() {
  local version tpl tmp
  version=$(mariadbd --version 2>/dev/null | md5sum | cut -c1-12)
  tpl=${TMPDIR:-/tmp}/dlock-mariadb-template-$version-$(id -u)
  if [ ! -f "$tpl/.ready" ]; then
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-mariadb-tpl.XXXXXX")
    write_config "$tmp" 0
    [ "$(id -u)" -eq 0 ] && chown mysql: "$tmp"
    mariadb-install-db --defaults-file="$tmp/my.cnf" --auth-root-authentication-method=socket \
      --auth-root-socket-user="$(id -un)" --skip-test-db >"$tmp/install.log" 2>&1 ||
      { cat "$tmp/install.log" >&2; rm -rf "$tmp"; return 1; }
    touch "$tmp/data/.ready"
    # Another start may have made one meanwhile: either will do.
    mv -T "$tmp/data" "$tpl" 2>/dev/null || true
    rm -rf "$tmp"
  fi
  echo "$tpl"
}

# alive PID: the process runs (a zombie, dead but not yet reaped, does not).
alive() {
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $state != Z* ]]
}

# server_start: starts the server unless it runs already (`up` after `up`).
server_start() {
  local root port pid
  root=$(cat "$dir/root")
  port=$(cat "$dir/port")
  if [ -f "$root/pid" ] && alive "$(cat "$root/pid")"; then return 0; fi
  rm -f "$root/pid"
  setsid mariadbd --defaults-file="$root/my.cnf" </dev/null >/dev/null 2>&1 &
  pid=$!
  wait_for_port "$port" 60 "$pid" || { cat "$root/error.log" >&2; return 1; }
  for ((i = 0; i < 100; i++)); do [ -S "$root/s.sock" ] && break; sleep 0.05; done
}

# server_stop SIGNAL: TERM is a clean shutdown, KILL a crash.
server_stop() {
  local root pid i
  root=$(cat "$dir/root")
  [ -f "$root/pid" ] || return 0
  pid=$(cat "$root/pid")
  kill -CONT "$pid" 2>/dev/null || true
  kill "-$1" "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 1200; i++)); do alive "$pid" || break; sleep 0.05; done
  alive "$pid" && kill -KILL "$pid" 2>/dev/null
  rm -f "$root/pid"
}

as_root_sql() {
  mariadb --no-defaults -S "$(cat "$dir/root")/s.sock" -uroot "$@"
}

new_password() { head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# secure_server: TLS only, users that need a password and a certificate.
secure_server() {
  local root port app_password none_password password
  root=$(cat "$dir/root")
  port=$(cat "$dir/port")
  make_certs "$dir" dlock
  make_client_cert "$dir" app dlock_app
  make_client_cert "$dir" none dlock_none
  install -m 0600 "$dir/server.key" "$root/server.key"
  install -m 0644 "$dir/server.pem" "$root/server.pem"
  install -m 0644 "$dir/ca.pem" "$root/ca.pem"
  [ "$(id -u)" -eq 0 ] && chown mysql: "$root/server.key" "$root/server.pem" "$root/ca.pem"
  printf '%s\n' "ssl-ca=$root/ca.pem" "ssl-cert=$root/server.pem" "ssl-key=$root/server.key" \
    "require_secure_transport=ON" "tls_version=TLSv1.2,TLSv1.3" >>"$root/my.cnf"
  password=$(sed -n 's|^mysql://dlock:\([^@]*\)@.*|\1|p' "$dir/uri")
  app_password=$(new_password)
  none_password=$(new_password)
  (umask 077; printf '%s\n' "$password" >"$dir/dlock.password")
  (umask 077; printf '%s\n' "$app_password" >"$dir/dlock_app.password")
  (umask 077; printf '%s\n' "$none_password" >"$dir/dlock_none.password")
  local issuer="ISSUER '/CN=dlock test CA'"
  as_root_sql -e "ALTER USER 'dlock'@'%' REQUIRE SUBJECT '/CN=dlock' AND $issuer;
    CREATE USER 'dlock_app'@'%' IDENTIFIED BY '$app_password' REQUIRE SUBJECT '/CN=dlock_app' AND $issuer;
    GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE ON dlock.* TO 'dlock_app'@'%';
    CREATE USER 'dlock_none'@'%' IDENTIFIED BY '$none_password' REQUIRE SUBJECT '/CN=dlock_none' AND $issuer;"
  server_stop TERM
  server_start
}

case $verb in
  start)
    mkdir -p "$dir"
    if [ -f "$dir/root" ]; then "$0" stop "$dir" || true; mkdir -p "$dir"; fi
    tpl=$(template)
    root=$(mktemp -d /tmp/dlock-mariadb.XXXXXX)
    echo "$root" >"$dir/root"
    port=$(free_port)
    echo "$port" >"$dir/port"
    write_config "$root" "$port"
    cp -a "$tpl" "$root/data"
    [ "$(id -u)" -eq 0 ] && chown -R mysql: "$root"
    chmod 700 "$root"
    server_start || exit 1
    password=$(new_password)
    # CREATE USER ... WITH GRANT OPTION: tests log in as users with fewer
    # rights than dlock's.
    as_root_sql -e "CREATE DATABASE dlock;
      CREATE USER 'dlock'@'%' IDENTIFIED BY '$password';
      GRANT ALL ON dlock.* TO 'dlock'@'%' WITH GRANT OPTION;
      GRANT CREATE USER ON *.* TO 'dlock'@'%';"
    uri="mysql://dlock:$password@127.0.0.1:$port/dlock"
    echo "$uri" >"$dir/uri"
    echo "$uri"
    ;;
  start-secure)
    "$0" start "$dir" >/dev/null
    secure_server || { cat "$(cat "$dir/root")/error.log" >&2; exit 1; }
    port=$(cat "$dir/port")
    tls="cacert=$dir/ca.pem"
    echo "mysql://dlock_app@localhost:$port/dlock?$tls&cert=$dir/app.pem&key=$dir/app.key&password_file=$dir/dlock_app.password" \
      >"$dir/app_uri"
    echo "mysql://dlock_none@localhost:$port/dlock?$tls&cert=$dir/none.pem&key=$dir/none.key&password_file=$dir/dlock_none.password" \
      >"$dir/none_uri"
    uri="mysql://dlock@localhost:$port/dlock?$tls&cert=$dir/client.pem&key=$dir/client.key&password_file=$dir/dlock.password"
    echo "$uri" >"$dir/uri"
    echo "$uri"
    ;;
  stop)
    if [ -f "$dir/root" ]; then
      root=$(cat "$dir/root")
      server_stop TERM || true
      case $root in /tmp/dlock-mariadb.*) rm -rf "$root" ;; esac
    fi
    rm -rf "$dir"
    ;;
  restart) server_stop TERM; server_start ;;
  crash) server_stop KILL; server_start ;;
  down) server_stop TERM ;;
  up) server_start ;;
  pause | resume)
    root=$(cat "$dir/root")
    [ -f "$root/pid" ] || { echo "mariadb.sh: the server in $dir is not running" >&2; exit 1; }
    kill "-$([ "$verb" = pause ] && echo STOP || echo CONT)" "$(cat "$root/pid")"
    ;;
  sql) as_root_sql dlock "$@" ;;
  *) usage ;;
esac
