#!/usr/bin/env bash
# dlock fence write: a write under `dlock exec` lands; a later write with an
# older token exits 65 with one line and leaves the file byte for byte; equal
# tokens are admitted; $DLOCK_TOKEN/$DLOCK_KEY are the defaults; every bad
# input gets its exit code and one clear line.
source "$(dirname "$0")/lib.sh"

# `sh -c` under dlock exec finds dlock on PATH, as a user's script would.
PATH="$(cd "$(dirname "$DLOCK")" && pwd):$PATH"
export PATH
# Nothing here reads a terminal: every write gets its input explicitly.
exec </dev/null

D="$WORK/reports"
mkdir "$D"
out="$D/out.csv"

# The files in D other than the .dlock-fence records: the content, no temp files.
check_clean() {
  local extra
  extra=$(cd "$D" && ls -A | grep -vxF -e out.csv -e .dlock-fence)
  [ -z "$extra" ] || fail "stray files in DIR: $extra"
  extra=$(cd "$D/.dlock-fence" && ls -A | grep -vE '\.(lock|token)$')
  [ -z "$extra" ] || fail "stray files in DIR/.dlock-fence: $extra"
}

# 1. Under dlock exec: the token and key come from the environment.
"$DLOCK" exec job -- sh -c 'printf report-1 | dlock fence write --dir "$1" out.csv; echo "$DLOCK_TOKEN" >"$2"' \
  sh "$D" "$WORK/t1" || fail "first fenced write under dlock exec failed"
[ "$(cat "$out" 2>/dev/null)" = report-1 ] || fail "out.csv after first write: '$(cat "$out" 2>/dev/null)'"
t1=$(cat "$WORK/t1")
"$DLOCK" exec job -- sh -c 'printf report-2 | dlock fence write --dir "$1" out.csv; echo "$DLOCK_TOKEN" >"$2"' \
  sh "$D" "$WORK/t2" || fail "second fenced write under dlock exec failed"
t2=$(cat "$WORK/t2")
[ "$t2" -gt "$t1" ] || fail "second exec's token $t2 is not above the first's $t1"
[ "$(cat "$out")" = report-2 ] || fail "out.csv after second write: '$(cat "$out")'"
echo "ok: tokens $t1 then $t2 written under dlock exec"

# 2. A late writer with the older token: 65, one line, file byte-identical.
cp "$out" "$WORK/before"
ino_before=$(stat -c %i "$out")
printf 'LATE WRITE' >"$WORK/late"
expect_exit 65 "stale token $t1 < $t2 for key job" -- \
  "$DLOCK" fence write --dir "$D" --token "$t1" --key job out.csv <"$WORK/late"
cmp -s "$out" "$WORK/before" || fail "stale write changed out.csv: '$(cat "$out")'"
[ "$(stat -c %i "$out")" = "$ino_before" ] || fail "stale write replaced out.csv"
# The whole stderr is exactly that line.
[ "$(cat "$WORK/stderr")" = "dlock: stale token $t1 < $t2 for key job" ] ||
  fail "stale stderr: '$(cat "$WORK/stderr")'"
check_clean

# 3. The same token again is the same holder writing twice: admitted.
printf report-2b | "$DLOCK" fence write --dir "$D" --token "$t2" --key job out.csv ||
  fail "equal token $t2 rejected"
[ "$(cat "$out")" = report-2b ] || fail "equal-token write did not land: '$(cat "$out")'"

# 4. $DLOCK_TOKEN / $DLOCK_KEY when the flags are absent; flags win over them.
printf report-3 | DLOCK_TOKEN=$t2 DLOCK_KEY=job "$DLOCK" fence write --dir "$D" out.csv ||
  fail "write with DLOCK_TOKEN/DLOCK_KEY failed"
[ "$(cat "$out")" = report-3 ] || fail "env write did not land: '$(cat "$out")'"
DLOCK_TOKEN=$t1 DLOCK_KEY=job expect_exit 65 "stale token $t1 < $t2 for key job" -- \
  "$DLOCK" fence write --dir "$D" out.csv
[ "$(cat "$out")" = report-3 ] || fail "stale env write changed out.csv"
printf report-4 | DLOCK_TOKEN=$t1 DLOCK_KEY=other "$DLOCK" fence write --dir "$D" --token "$t2" --key job out.csv ||
  fail "--token/--key did not override the environment"
[ "$(cat "$out")" = report-4 ] || fail "flag write did not land: '$(cat "$out")'"
# Another key has its own highest token.
printf other | "$DLOCK" fence write --dir "$D" --token 1 --key other-job other.csv ||
  fail "a fresh key with token 1 was rejected"

# 5. Bad input.
cp "$out" "$WORK/before"
expect_exit 64 "no fencing token" -- "$DLOCK" fence write --dir "$D" --key job out.csv
DLOCK_KEY=job expect_exit 64 "no fencing token" -- "$DLOCK" fence write --dir "$D" out.csv
expect_exit 64 "'12x' is not a fencing token" -- "$DLOCK" fence write --dir "$D" --token 12x --key job out.csv
expect_exit 64 "'-3' is not a fencing token" -- "$DLOCK" fence write --dir "$D" --token=-3 --key job out.csv
DLOCK_TOKEN=abc DLOCK_KEY=job expect_exit 64 "DLOCK_TOKEN 'abc' is not a fencing token" -- \
  "$DLOCK" fence write --dir "$D" out.csv
expect_exit 64 "'99999999999999999999999' is not a fencing token" -- \
  "$DLOCK" fence write --dir "$D" --token 99999999999999999999999 --key job out.csv
expect_exit 64 "'18446744073709551616' is not a fencing token" -- \
  "$DLOCK" fence write --dir "$D" --token 18446744073709551616 --key job out.csv
# 2^64-1 can never be exceeded: a fence that took it would refuse every
# later holder. One below it is a token (regression: the overflow check once
# rejected everything from 18446744073709551610 up).
mkdir "$WORK/max"
expect_exit 64 "fencing token 18446744073709551615 is never granted" -- \
  "$DLOCK" fence write --dir "$WORK/max" --token 18446744073709551615 --key max f
printf max | "$DLOCK" fence write --dir "$WORK/max" --token 18446744073709551614 --key max f ||
  fail "--token 18446744073709551614 (2^64-2) rejected"
expect_exit 64 "--token: fencing token 0 is never granted" -- "$DLOCK" fence write --dir "$D" --token 0 --key job out.csv
DLOCK_TOKEN=0 DLOCK_KEY=job expect_exit 64 "DLOCK_TOKEN: fencing token 0 is never granted" -- "$DLOCK" fence write --dir "$D" out.csv
expect_exit 64 "no lock key" -- "$DLOCK" fence write --dir "$D" --token 5 out.csv
DLOCK_TOKEN=5 expect_exit 64 "no lock key" -- "$DLOCK" fence write --dir "$D" out.csv
long_key=$(head -c 1025 /dev/zero | tr '\0' k)
expect_exit 64 "1025 bytes" -- "$DLOCK" fence write --dir "$D" --token 5 --key "$long_key" out.csv
expect_exit 73 "does not exist" -- "$DLOCK" fence write --dir "$WORK/missing" --token 5 --key job out.csv
grep -qF "$WORK/missing" "$WORK/stderr" || fail "missing-dir message lacks the path: $(cat "$WORK/stderr")"
[ -e "$WORK/missing" ] && fail "a missing --dir was created"
touch "$WORK/plain"
expect_exit 73 "$WORK/plain is not a directory" -- "$DLOCK" fence write --dir "$WORK/plain" --token 5 --key job out.csv
if [ "$(id -u)" != 0 ]; then
  mkdir "$WORK/ro" && chmod 0500 "$WORK/ro"
  expect_exit 73 "not writable" -- "$DLOCK" fence write --dir "$WORK/ro" --token 5 --key job out.csv
fi
expect_exit 64 "'a/b' is not a plain name" -- "$DLOCK" fence write --dir "$D" --token "$t2" --key job a/b
expect_exit 64 "is not a plain name" -- "$DLOCK" fence write --dir "$D" --token "$t2" --key job ..
expect_exit 64 "is not a plain name" -- "$DLOCK" fence write --dir "$D" --token "$t2" --key job .dlock-fence
expect_exit 64 "--dir" -- "$DLOCK" fence write --token "$t2" --key job out.csv
expect_exit 64 "name" -- "$DLOCK" fence write --dir "$D" --token "$t2" --key job
cmp -s "$out" "$WORK/before" || fail "a rejected write changed out.csv: '$(cat "$out")'"
[ -e "$D/a" ] && fail "NAME a/b created a directory"
rm -f "$D/other.csv"
check_clean

# 6. File modes: a replaced file keeps its mode (and owner, as root); a new
# one gets 0644 less the umask, or --mode.
M="$WORK/modes"
mkdir "$M"
printf a >"$M/kept" && chmod 0600 "$M/kept"
printf b | "$DLOCK" fence write --dir "$M" --token 1 --key m kept || fail "mode: write failed"
[ "$(stat -c %a "$M/kept")" = 600 ] || fail "a replaced 0600 file became $(stat -c %a "$M/kept")"
(umask 027; printf c | "$DLOCK" fence write --dir "$M" --token 1 --key m new-umask) || fail "umask write failed"
[ "$(stat -c %a "$M/new-umask")" = 640 ] || fail "a new file under umask 027 is $(stat -c %a "$M/new-umask"), want 640"
printf d | "$DLOCK" fence write --dir "$M" --token 1 --key m --mode 0600 new-mode || fail "--mode write failed"
[ "$(stat -c %a "$M/new-mode")" = 600 ] || fail "--mode 0600 gave $(stat -c %a "$M/new-mode")"
expect_exit 64 "--mode '0999' is not a file mode" -- \
  "$DLOCK" fence write --dir "$M" --token 1 --key m --mode 0999 x </dev/null
if [ "$(id -u)" = 0 ]; then
  printf e >"$M/owned" && chown 65534:65534 "$M/owned"
  printf f | "$DLOCK" fence write --dir "$M" --token 1 --key m owned || fail "owned write failed"
  [ "$(stat -c %u:%g "$M/owned")" = 65534:65534 ] || fail "a replaced file's owner became $(stat -c %u:%g "$M/owned")"
fi

# 7. The fence's own files are never followed through a symbolic link, and
# a damaged record is its own error (74), not a bug.
L="$WORK/links"
mkdir -p "$L/.dlock-fence"
printf precious >"$WORK/precious"
ln -s "$WORK/precious" "$L/.dlock-fence/linked.token"
expect_exit 73 "is a symbolic link" -- "$DLOCK" fence write --dir "$L" --token 9 --key linked out </dev/null
ln -s "$WORK/precious" "$L/.dlock-fence/linked2.lock"
expect_exit 73 "is a symbolic link" -- "$DLOCK" fence write --dir "$L" --token 9 --key linked2 out </dev/null
[ "$(cat "$WORK/precious")" = precious ] || fail "a write followed a link: $(cat "$WORK/precious")"
printf 'garbage\n' >"$L/.dlock-fence/broken.token"
expect_exit 74 "is damaged or belongs to another key" -- \
  "$DLOCK" fence write --dir "$L" --token 9 --key broken out </dev/null
[ -e "$L/out" ] && fail "a write went through a damaged record"

# Nothing was left held.
held=$("$DLOCK" status --json)
[ "$held" = "[]" ] || fail "a lock was left held: $held"
finish
