# Shared by the server scripts in this directory. Each script is
#
#   scripts/servers/<store>.sh start DIR   start on free loopback ports, state in DIR;
#                                          writes DIR/uri (the dlock URI) and prints it
#   scripts/servers/<store>.sh stop DIR    stop it and remove DIR
#
# and may add verbs of its own (kill, pause, resume, restart a member).
# Servers listen on 127.0.0.1 only and never use systemd.
set -euo pipefail

# A TCP port nobody listens on now (the kernel picks it).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# wait_for_port PORT [SECONDS]: until something accepts on 127.0.0.1:PORT.
wait_for_port() {
  local port=$1 seconds=${2:-30} i
  for ((i = 0; i < seconds * 20; i++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
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
