#!/usr/bin/env bash
# The README's first command on a fresh Debian 12, timed: this tree (the
# files git knows, as they are now) copied into a debootstrap chroot, where
# `./scripts/demo.sh` runs as a new user would run it (as root there, so
# apt-get needs no sudo). Prints how long the command took, from nothing
# installed to the demo's verdict, and fails unless the demo showed the
# stale write rejected. docs/install.md, The first command.
#
#   scripts/demo_check.sh          needs root (chroot) and the Debian mirror
#
# DLOCK_FRESH_ROOT_CACHE: see scripts/fresh_debian.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/fresh_debian.sh
fresh_debian_start demo-check
die() {
  echo "demo_check: FAIL: $*" >&2
  exit 1
}
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot): run it through sudo"

echo "demo_check: a fresh Debian 12 (debootstrap --variant=minbase bookworm)"
fresh_debian_make "$ROOT" "$WORK/debootstrap.log" || die "debootstrap (above)"
mkdir "$ROOT/dlock"
git ls-files -z --cached --others --exclude-standard |
  tar --null -T - --ignore-failed-read -cf - | tar -xf - -C "$ROOT/dlock"

echo "demo_check: ./scripts/demo.sh in it"
start=$(date +%s%N)
chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb \
  bash -c 'cd /dlock && ./scripts/demo.sh' >"$WORK/demo.log" 2>&1 ||
  { tail -30 "$WORK/demo.log" >&2; die "./scripts/demo.sh failed"; }
seconds=$((($(date +%s%N) - start + 500000000) / 1000000000))
grep -q 'REJECTED, stale token' "$WORK/demo.log" ||
  { tail -30 "$WORK/demo.log" >&2; die "the demo did not show the stale write rejected"; }
packages=$(chroot "$ROOT" dpkg-query -W -f '${Package}\n' | wc -l)
printf 'demo_check: the first command took %d s on a fresh Debian 12 (%d packages on the system after it)\n' \
  "$seconds" "$packages"
