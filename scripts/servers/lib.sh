# Shared by the server scripts in this directory. Each script is
#
#   scripts/servers/<store>.sh start DIR   start on free loopback ports, state in DIR;
#                                          writes DIR/uri (the dlock URI) and prints it
#   scripts/servers/<store>.sh stop DIR    stop it and remove DIR
#
# and may add verbs of its own (kill, pause, resume, restart a member).
# Servers listen on 127.0.0.1 only and never use systemd.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../python3.sh"  # PYTHON3

# A TCP port nobody listens on now (the kernel picks it), and none picked
# before for the same server directory ($dir, when it exists): the kernel
# may hand a closed port out again, and two members of one cluster must
# never be given the same one.
free_port() {
  local port picked=${dir:+$dir/ports-picked}
  while :; do
    port=$("$PYTHON3" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
    [ -n "$picked" ] && [ -d "$dir" ] || break
    grep -qx "$port" "$picked" 2>/dev/null && continue
    echo "$port" >>"$picked"
    break
  done
  echo "$port"
}

# wait_for_port PORT [SECONDS] [PID]: until something accepts on
# 127.0.0.1:PORT. With PID, the server's process: fails at once if it exits
# (or is a zombie) first, instead of waiting out SECONDS.
wait_for_port() {
  local port=$1 seconds=${2:-30} pid=${3:-} state i
  for ((i = 0; i < seconds * 20; i++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    if [ -n "$pid" ] && ! { state=$(ps -o stat= -p "$pid" 2>/dev/null) && [[ $state != Z* ]]; }; then
      echo "server on port $port exited before it served" >&2
      return 1
    fi
    sleep 0.05
  done
  echo "server on port $port did not come up within ${seconds}s" >&2
  return 1
}

# kill_pidfile FILE: SIGTERM the pid in FILE, SIGKILL after 10 s.
kill_pidfile() {
  local file=$1 pid i
  [ -f "$file" ] || return 0
  pid=$(cat "$file")
  kill -CONT "$pid" 2>/dev/null || true
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 200; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.05; done
  kill -KILL "$pid" 2>/dev/null || true
}

# make_certs DIR [CLIENT_CN]: test certificates under DIR (keys mode 0600),
# as an operator's private CA would issue them (EC P-256, openssl):
#
#   ca.pem                 the CA every server and client trusts
#   server.pem/.key        the server's certificate, for the name "localhost"
#                          only (so a URI naming 127.0.0.1 fails the name check)
#   client.pem/.key        a client certificate, CN=CLIENT_CN (default dlock)
#   expired-client.pem/.key  the same CN, signed by the CA, expired in 2020
#   other-ca.pem           an unrelated CA (a wrong cacert= for clients)
#   other-client.pem/.key  a client certificate signed by other-ca
#
# make_client_cert DIR NAME CN: one more client certificate, NAME.pem/.key,
# CN=CN, from the CA make_certs made in DIR.
make_client_cert() {
  DLOCK_CERT_ONLY="$2:$3" make_certs "$1"
}

make_certs() {
  local dir=$1 cn=${2:-dlock}
  mkdir -p "$dir"
  (
    cd "$dir"
    umask 077
    new_key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; }
    new_ca() {
      new_key "$1.key"
      openssl req -x509 -new -key "$1.key" -sha256 -days 3650 -subj "/CN=$2" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
        -out "$1.pem" 2>/dev/null
    }
    # sign NAME CA CN EXTENSIONS [faketime args...]
    sign() {
      local name=$1 ca=$2 subject=$3 ext=$4
      shift 4
      new_key "$name.key"
      openssl req -new -key "$name.key" -subj "/CN=$subject" -out "$name.csr" 2>/dev/null
      printf '%s\n' "$ext" >"$name.ext"
      "$@" openssl x509 -req -in "$name.csr" -CA "$ca.pem" -CAkey "$ca.key" -CAcreateserial \
        -sha256 -days "${DAYS:-3650}" -extfile "$name.ext" -out "$name.pem" 2>/dev/null
      rm -f "$name.csr" "$name.ext"
    }
    local client_ext='basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth'
    if [ -n "${DLOCK_CERT_ONLY:-}" ]; then
      sign "${DLOCK_CERT_ONLY%%:*}" ca "${DLOCK_CERT_ONLY#*:}" "$client_ext"
      rm -f ./*.srl
      chmod 0644 ./*.pem
      exit 0
    fi
    new_ca ca "dlock test CA"
    new_ca other-ca "unrelated test CA"
    # serverAuth and clientAuth: etcd also presents it on its peer links.
    sign server ca localhost 'basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=DNS:localhost'
    sign client ca "$cn" "$client_ext"
    DAYS=1 sign expired-client ca "$cn" "$client_ext" faketime '2020-01-01 00:00:00'
    sign other-client other-ca "$cn" "$client_ext"
    rm -f ./*.srl
    chmod 0644 ./*.pem
  )
}

# configure_leader_follower DIR: what `configure-linked` writes for a store
# whose members are a leader and one follower with no links to proxy
# (harness/linked_cluster.h): a fresh DIR, no links, 2 members.
configure_leader_follower() {
  rm -rf "$1"
  mkdir -p "$1"
  : >"$1/links"
  echo 2 >"$1/members"
}
