#!/usr/bin/env bash
# The Debian packages, end to end (docs/install.md, Debian packages):
#  1. CPack makes dlock, dlock-full, libdlock<SOVERSION> and libdlock-dev
#     from a build;
#  2. lintian reports no error on them;
#  3. on a fresh Debian 12 (debootstrap, minimal variant, in a chroot),
#     `apt-get install ./*.deb` pulls in what they depend on and nothing of
#     this machine; the example (examples/) builds against the installed
#     files with find_package and with pkg-config, and runs; `dlock demo`
#     runs, and dlock hands a postgres:// store to dlock-full;
#  4. `apt-get purge` leaves none of the packages' files behind.
# Run by scripts/test.sh after the plain build's tests; needs root (chroot)
# and the Debian mirror. About 3 minutes, most of it apt.
#
#   scripts/deb_check.sh [build dir]        default: build
#
# DLOCK_FRESH_ROOT_CACHE: see scripts/fresh_debian.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
BUILD=$(cd "${1:-build}" && pwd)
source scripts/fresh_debian.sh
fresh_debian_start deb-check
step() { echo "deb_check: $*"; }
die() {
  echo "deb_check: FAIL: $*" >&2
  exit 1
}
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot): run it through sudo"

step "packages from $BUILD"
cpack --config "$BUILD/CPackConfig.cmake" -B "$WORK/packages" >"$WORK/cpack.log" 2>&1 ||
  die "cpack: $(tail -5 "$WORK/cpack.log")"
debs=("$WORK"/packages/*.deb)
[ ${#debs[@]} = 4 ] || die "expected 4 packages, cpack made: ${debs[*]##*/}"
for deb in "${debs[@]}"; do step "  ${deb##*/}: $(du -h "$deb" | cut -f1)"; done

step "lintian"
# Exit 1: it found errors (listed below); more: it could not check.
status=0
lintian --tag-display-limit 0 "${debs[@]}" >"$WORK/lintian.log" 2>&1 || status=$?
[ "$status" -le 1 ] || die "lintian did not run (exit $status): $(tail -3 "$WORK/lintian.log")"
if grep -q '^E: ' "$WORK/lintian.log"; then
  grep '^E: ' "$WORK/lintian.log" >&2
  die "lintian reports errors"
fi
step "  no errors; $(grep -c '^W: ' "$WORK/lintian.log" || true) warnings"

step "a fresh Debian 12 (debootstrap --variant=minbase bookworm)"
fresh_debian_make "$ROOT" "$WORK/debootstrap.log" || die "debootstrap (above)"
mkdir -p "$ROOT/check"
cp "${debs[@]}" "$ROOT/check/"
cp -r "$SRC/examples" "$ROOT/check/examples"

step "install the packages, build and run the example in it"
cp "$SRC/scripts/deb_check_inside.sh" "$ROOT/check/inside.sh"
chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  bash /check/inside.sh || die "inside the fresh system (above)"
step "all ok"
