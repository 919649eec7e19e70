#!/usr/bin/env bash
# Secrets and descriptors (issue 17): a store's password never reaches a
# message, a child's environment or argv, nor dlock's own argv once parsed;
# a nested dlock still gets in (through a private password file); the
# command inherits no descriptor dlock or a client library opened.
#
# Without a fixture: the default SQLite store, and a Redis server started
# here with requirepass and a password holding / ? @ # % and a space. With
# one ($DLOCK_TEST_URI_FILE, PostgreSQL or MariaDB with a password): that
# store (PostgreSQL's, which dlock hands to dlock-full, never on its argv).
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)

# The command's fds must be those dlock was given (what `ls` sees when run
# here directly: this shell's, with the one ls reads the directory with).
fds_here() { ls /proc/self/fd | sort -n | tr '\n' ' '; }
fds_of_command() { "$DLOCK" exec "$@" -- ls /proc/self/fd | sort -n | tr '\n' ' '; }

if [ -z "${DLOCK_TEST_URI_FILE:-}" ]; then
  before=$failures
  out=$(fds_of_command sqlite-fds)
  [ "$out" = "$(fds_here)" ] || fail "sqlite: the command got descriptors $out, want $(fds_here)"
  exec 9>"$WORK/passed-on"
  out=$(fds_of_command sqlite-fds)
  [ "$out" = "$(fds_here)" ] || fail "sqlite: with 9 passed on, the command got $out, want $(fds_here)"
  exec 9>&-
  [ "$failures" = "$before" ] && echo "ok: sqlite: the command gets only the descriptors dlock was given"
  password='Sec/ret?P@ss#w%rd x'
  bash "$here/../../scripts/servers/redis.sh" start-auth "$WORK/redis" "$password" >/dev/null ||
    { fail "could not start redis"; finish; }
  trap 'bash "$here/../../scripts/servers/redis.sh" stop "$WORK/redis"; cleanup' EXIT
  uri="redis://:$password@127.0.0.1:$(cat "$WORK/redis/main.port")/0"
  pieces=("Sec/ret" "P@ss" "w%rd x")
  unreachable="redis://:$password@127.0.0.1:1/0"
else
  uri=$(cat "$DLOCK_TEST_URI_FILE")
  password=$("$PYTHON3" -c 'import sys, urllib.parse as u; print(u.unquote(u.urlsplit(sys.argv[1]).password or ""))' "$uri")
  [ -n "$password" ] || { fail "the fixture's URI has no password"; finish; }
  pieces=("$password")
  unreachable="${uri%@*}@127.0.0.1:1/dlock"
fi
user=$("$PYTHON3" -c 'import sys, urllib.parse as u; print(u.unquote(u.urlsplit(sys.argv[1]).username or ""))' "$uri" 2>/dev/null)
leaks() {  # leaks FILE: does FILE hold any piece of the password?
  local p
  for p in "${pieces[@]}"; do grep -qF -- "$p" "$1" && return 0; done
  return 1
}

# What the command sees: DLOCK_BACKEND and its whole environment without
# the password, its parent's (dlock's) argv scrubbed, no store socket; and a
# nested dlock gets into the same store.
"$DLOCK" exec outer --backend "$uri" -- sh -c '
  echo "$DLOCK_BACKEND" >"$0/backend"
  tr "\0" "\n" </proc/self/environ >"$0/environ"
  tr "\0" " " </proc/$PPID/cmdline >"$0/parent-argv"
  ls /proc/self/fd | sort -n | tr "\n" " " >"$0/fds"
  dlock_file=$(echo "$DLOCK_BACKEND" | sed -n "s/.*password_file=\([^&]*\).*/\1/p")
  echo "$dlock_file" >"$0/password-file"
  [ -z "$dlock_file" ] || stat -c %a "$dlock_file" >"$0/mode"
  "$1" exec inner --no-wait -- true && echo nested-ok >"$0/nested"
  ' "$WORK" "$DLOCK" 2>"$WORK/outer.err"
rc=$?
[ "$rc" = 0 ] || fail "exec under a password exited $rc: $(cat "$WORK/outer.err")"
for f in backend environ parent-argv outer.err; do
  leaks "$WORK/$f" && fail "the password reached the command's $f: $(cat "$WORK/$f")"
done
grep -q "password_file=" "$WORK/backend" || fail "DLOCK_BACKEND names no password file: $(cat "$WORK/backend")"
[ "$(cat "$WORK/mode" 2>/dev/null)" = 600 ] || fail "the password file's mode is $(cat "$WORK/mode" 2>/dev/null), want 600"
[ -e "$(cat "$WORK/password-file")" ] && fail "the password file outlived dlock"
[ "$(cat "$WORK/nested" 2>/dev/null)" = nested-ok ] || fail "a nested dlock could not use the store"
[ "$(cat "$WORK/fds")" = "$(fds_here)" ] ||
  fail "the command got descriptors $(cat "$WORK/fds"), want $(fds_here)"
case $(cut -d' ' -f1 "$WORK/parent-argv") in
  *dlock-full) grep -q -- "--backend" "$WORK/parent-argv" &&
    fail "dlock-full got the store on its argv: $(cat "$WORK/parent-argv")" ;;
esac
echo "ok: the command sees no password and no store descriptor; a nested dlock gets in"

# Messages: a store that cannot be reached, a bad parameter, status.
"$DLOCK" status --backend "$unreachable" >"$WORK/m1" 2>&1
"$DLOCK" status --backend "$uri&bogus=1" >"$WORK/m2" 2>&1
"$DLOCK" status --json --backend "$uri" >"$WORK/m3" 2>&1
"$DLOCK" exec k --backend "$uri" --wait 99999999h -- true >"$WORK/m4" 2>&1
for m in m1 m2 m3 m4; do leaks "$WORK/$m" && fail "a message shows the password: $(cat "$WORK/$m")"; done
grep -q . "$WORK/m1" || fail "no message for an unreachable store"
echo "ok: no message shows the password"

# A wrong password: refused by the store, exit 77 on every store, and the
# wrong password is not printed either.
case "$uri" in
  redis://*) wrong="redis://:Wr0ng/pw@${uri##*@}" ;;
  *) wrong="${uri%%:*}://${user:-dlock}:Wr0ng/pw@${uri##*@}" ;;
esac
"$DLOCK" status --backend "$wrong" >"$WORK/m5" 2>&1
rc=$?
[ "$rc" = 77 ] || fail "a wrong password exited $rc, want 77: $(cat "$WORK/m5")"
grep -qF "Wr0ng" "$WORK/m5" && fail "the wrong password was printed: $(cat "$WORK/m5")"

# The same store, the password from a file or a variable instead.
printf '%s\n' "$password" >"$WORK/pw"
chmod 600 "$WORK/pw"
bare="${uri%%://*}://${uri##*@}"
case "$bare" in *\?*) sep='&' ;; *) sep='?' ;; esac
[ -n "$user" ] && bare="${bare%%://*}://$user@${bare#*://}"
expect_exit 0 "" -- "$DLOCK" exec f --backend "$bare${sep}password_file=$WORK/pw" -- true
export DLOCK_TEST_PW="$password"
expect_exit 0 "" -- "$DLOCK" exec f --backend "$bare${sep}password_env=DLOCK_TEST_PW" -- true
unset DLOCK_TEST_PW
expect_exit 64 "password_env 'DLOCK_TEST_PW' names a variable that is not set" -- \
  "$DLOCK" exec f --backend "$bare${sep}password_env=DLOCK_TEST_PW" -- true

# dlock's own argv, once parsed: `ps` shows no password.
"$DLOCK" exec argv --backend "$uri" -- sh -c 'tr "\0" " " </proc/$PPID/cmdline >"$0/own-argv"' "$WORK"
leaks "$WORK/own-argv" && fail "dlock's argv still shows the password: $(cat "$WORK/own-argv")"
echo "ok: dlock's own argv is scrubbed"

# A chaos run hands the store to its workers in the environment: while it
# runs, no worker's argv shows the password. (Only the workers' argv is
# searched: dlock's own is scrubbed just after it starts. The pieces come
# from a file, so that grep's own argv does not hold them.)
printf '%s\n' "${pieces[@]}" >"$WORK/pieces"
"$DLOCK" chaos --backend "$uri" --faults pause --duration 4s --ttl 500ms --dir "$WORK" \
  >"$WORK/chaos.out" 2>&1 &
chaos=$!
saw_worker=0
while kill -0 "$chaos" 2>/dev/null; do
  mapfile -t workers < <(grep -lsaF chaos-worker /proc/[0-9]*/cmdline)
  [ ${#workers[@]} -gt 0 ] || continue
  saw_worker=1
  if grep -sqaF -f "$WORK/pieces" "${workers[@]}"; then
    fail "a chaos worker's argv shows the password"
    break
  fi
done
wait "$chaos"
rc=$?
[ "$rc" = 0 ] || fail "the chaos run exited $rc: $(tail -3 "$WORK/chaos.out")"
[ "$saw_worker" = 1 ] || fail "no chaos worker was seen running"
leaks "$WORK/chaos.out" && fail "the chaos run printed the password"
echo "ok: chaos workers get the store without the password in argv"
finish
