#!/usr/bin/env bash
# etcds:// against the secured etcd fixture (scripts/servers/etcd.sh
# start-secure: TLS with client certificates, authentication, 2 s tokens):
# every way to get the certificates or the credentials wrong fails at once
# with its exit code and one line naming the cause; a lock outlives many
# tokens; `etcdctl lock` and dlock exclude each other over TLS and auth.
source "$(dirname "$0")/lib.sh"
URI=$(cat "${DLOCK_TEST_URI_FILE:?needs the etcd_secure fixture}")
D=${DLOCK_TEST_SERVER_DIR:?needs the etcd_secure fixture}
SCRIPT=${DLOCK_TEST_SERVER_SCRIPT:?needs the etcd_secure fixture}
command -v etcdctl >/dev/null || { echo "etcdctl not found: apt-get install etcd-client" >&2; exit 1; }
hosts=${URI#etcds://dlock@}
hosts=${hosts%%/*}
first=${hosts%%,*}
query="cacert=$D/ca.pem&cert=$D/client.pem&key=$D/client.key"
# etcds://USER@HOSTS/dlock?QUERY
uri() { echo "etcds://$1@$2/dlock?$3"; }
name="secure-$$-$RANDOM"

# Bounded: every failure below must come well within the connect timeout.
# -k: a process that ignores the TERM (one stuck in exit, say) is killed.
bounded() { timeout -k 5 20 "$@"; }

expect_exit 0 "" -- bounded "$DLOCK" exec "$name" --backend "$URI" -- true
expect_exit 0 "" -- bounded "$DLOCK" status --backend "$URI"

# TLS, the server's side: a CA that did not sign it; a name it is not for.
expect_exit 77 "TLS" -- bounded "$DLOCK" exec "$name" --backend \
  "$(uri dlock "$hosts" "cacert=$D/other-ca.pem&cert=$D/client.pem&key=$D/client.key&password_file=$D/dlock.password")" -- true
ip_hosts=${hosts//localhost/127.0.0.1}
expect_exit 77 "TLS" -- bounded "$DLOCK" exec "$name" --backend \
  "$(uri dlock "$ip_hosts" "$query&password_file=$D/dlock.password")" -- true
# TLS, the client's side: expired, from another CA, none at all.
for pair in expired-client other-client; do
  expect_exit 77 "TLS" -- bounded "$DLOCK" exec "$name" --backend \
    "$(uri dlock "$hosts" "cacert=$D/ca.pem&cert=$D/$pair.pem&key=$D/$pair.key&password_file=$D/dlock.password")" -- true
done
# Again and again: the process exits while gRPC still handshakes on threads
# of its own; a crash at exit (OpenSSL cleaned up under such a thread) would
# show as another exit code, or as a hang.
for ((i = 0; i < 10; i++)); do
  expect_exit 77 "TLS" -- bounded "$DLOCK" exec "$name" --backend \
    "$(uri dlock "$hosts" "cacert=$D/ca.pem&password_file=$D/dlock.password")" -- true
done

# Files: unreadable, or not PEM; TLS files on a plaintext URI.
expect_exit 64 "cacert= file '$WORK/none.pem' cannot be read" -- "$DLOCK" exec "$name" --backend \
  "$(uri dlock "$hosts" "cacert=$WORK/none.pem&cert=$D/client.pem&key=$D/client.key&password_file=$D/dlock.password")" -- true
echo "not a certificate" >"$WORK/junk.pem"
expect_exit 64 "holds no PEM block" -- "$DLOCK" exec "$name" --backend \
  "$(uri dlock "$hosts" "cacert=$WORK/junk.pem&cert=$D/client.pem&key=$D/client.key&password_file=$D/dlock.password")" -- true
expect_exit 64 "use etcds://" -- "$DLOCK" exec "$name" --backend "etcd://$hosts/dlock?cacert=$D/ca.pem" -- true

# Credentials: a wrong password; a user without the role, on every path.
expect_exit 77 "refused the user name or password" -- bounded "$DLOCK" exec "$name" --backend \
  "$(uri dlock "$hosts" "$query&password_file=$D/nobody.password")" -- true
nobody=$(uri nobody "$hosts" "$query&password_file=$D/nobody.password")
expect_exit 77 "permission denied" -- bounded "$DLOCK" exec "$name" --backend "$nobody" -- true
expect_exit 77 "permission denied" -- bounded "$DLOCK" status --backend "$nobody"
expect_exit 77 "permission denied" -- bounded "$DLOCK" once "$name-once" --backend "$nobody" -- true
# The role covers the prefix dlock/ only.
expect_exit 77 "permission denied" -- bounded "$DLOCK" exec "$name" --backend \
  "etcds://dlock@$hosts/other?$query&password_file=$D/dlock.password" -- true

# Plaintext and TLS crossed: never a fallback, never a hang.
expect_exit 69 "use etcds://" -- bounded "$DLOCK" exec "$name" --backend "etcd://$first/dlock" -- true
DLOCK_ETCD_MEMBERS=1 bash "$SCRIPT" start "$WORK/plain" >/dev/null || fail "no plaintext etcd"
plain=$(cat "$WORK/plain/uri")
plain=${plain#etcd://}
expect_exit 69 "use etcd://" -- bounded "$DLOCK" exec "$name" --backend \
  "etcds://${plain/127.0.0.1/localhost}/dlock?cacert=$D/ca.pem" -- true
bash "$SCRIPT" stop "$WORK/plain"

# A lock held for many token lifetimes (tokens die 2 s after their last use;
# with a 30 s TTL nothing uses it for 8 s) is still held at its end, and
# its release authenticates again: no warning, and the lock is free at once.
"$DLOCK" exec "$name-long" --backend "$URI" --ttl 30s -- sleep 8 2>"$WORK/long.err"
rc=$?
[ "$rc" = 0 ] || fail "a lock held past its token's life: exit $rc: $(cat "$WORK/long.err")"
[ -s "$WORK/long.err" ] && fail "a lock held past its token's life: $(cat "$WORK/long.err")"
expect_exit 0 "" -- "$DLOCK" exec "$name-long" --backend "$URI" --wait 0s -- true

# etcdctl lock over TLS and authentication: dlock holds, etcdctl waits and
# gets the lock once dlock lets go.
"$DLOCK" exec "$name-ctl" --backend "$URI" -- sh -c "echo dlock-start >>$WORK/log; sleep 3; echo dlock-end >>$WORK/log" &
dlock_pid=$!
wait_for 20 grep -qs dlock-start "$WORK/log" || fail "dlock never got the lock"
ETCDCTL_API=3 timeout 30 etcdctl --endpoints "$hosts" --cacert "$D/ca.pem" --cert "$D/client.pem" \
  --key "$D/client.key" --user "dlock:$(cat "$D/dlock.password")" \
  lock "dlock/$name-ctl" -- sh -c "echo etcdctl >>$WORK/log" >/dev/null ||
  fail "etcdctl lock failed"
wait "$dlock_pid" || fail "dlock exec exited $?"
[ "$(tr '\n' ' ' <"$WORK/log")" = "dlock-start dlock-end etcdctl " ] ||
  fail "etcdctl did not wait for dlock: $(tr '\n' ' ' <"$WORK/log")"
finish
