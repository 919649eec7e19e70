#!/usr/bin/env bash
# A TLS client's hello reset by the server: a plaintext etcd does that when it
# closes before reading the whole hello, a TLS etcd when it refuses the
# client's certificate. gRPC reports both alike; dlock asks the server
# whether it speaks HTTP/2 in plaintext and names the right one, with the
# right exit code. Two small fake servers play the two.
source "$(dirname "$0")/lib.sh"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=test-ca \
  -days 1 -keyout "$WORK/ca.key" -out "$WORK/ca.pem" 2>/dev/null || fail "no test CA"

# fake PLAINTEXT: run as a job (which it replaces, so that cleanup kills
# it); serves on a free port (printed first) and resets every TLS hello; to
# an HTTP/2 preface it answers a SETTINGS frame if PLAINTEXT=1, else it
# resets that too.
fake() {
  exec "$PYTHON3" -u - "$1" <<'PY'
import socket, struct, sys, threading
plaintext = sys.argv[1] == "1"
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(16)
print(srv.getsockname()[1], flush=True)
def serve(c):
    first = c.recv(4096)
    if plaintext and first.startswith(b"PRI * HTTP/2.0"):
        c.sendall(b"\0\0\0\4\0\0\0\0\0")
        c.recv(4096)
    # Closed with unread bytes pending, or lingering 0: a reset either way.
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()
while True:
    conn, _ = srv.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
PY
}

bounded() { timeout -k 5 30 "$@"; }

# start_fake PLAINTEXT NAME: a background job (cleanup kills it); its port in $port.
start_fake() {
  fake "$1" >"$WORK/$2.port" &
  wait_for 20 test -s "$WORK/$2.port" || fail "the fake server $2 did not start"
  port=$(head -n 1 "$WORK/$2.port")
}

start_fake 1 plaintext
expect_exit 69 "serves plaintext, use etcd://" -- bounded "$DLOCK" exec k --backend \
  "etcds://127.0.0.1:$port/dlock?cacert=$WORK/ca.pem" -- true

start_fake 0 refusing
expect_exit 77 "refused this client's certificate" -- bounded "$DLOCK" exec k --backend \
  "etcds://127.0.0.1:$port/dlock?cacert=$WORK/ca.pem" -- true
finish
