#!/usr/bin/env bash
# The part of scripts/deb_check.sh that runs inside the fresh Debian 12
# chroot, with the packages and examples/ in /check.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8
step() { echo "deb_check:   $*"; }
# Whether the loader's cache has libdlock (read whole: grep -q would cut
# ldconfig's pipe short under pipefail).
in_loader_cache() { ldconfig -p | grep -c 'libdlock\.so\.' >/dev/null; }
die() {
  echo "deb_check: FAIL: $*" >&2
  exit 1
}
apt_quietly() {  # apt_quietly <what> <apt-get arguments...>
  local what=$1
  shift
  apt-get -y -qq -o Dpkg::Use-Pty=0 "$@" >/check/apt.log 2>&1 ||
    { tail -20 /check/apt.log >&2; die "$what"; }
}

apt_quietly "apt-get update" update
packages=$(cd /check && for deb in *.deb; do dpkg-deb -f "$deb" Package; done | tr '\n' ' ')
apt_quietly "apt-get install ./*.deb" install --no-install-recommends /check/*.deb
step "installed: $(dpkg-query -W -f '${Package} ${Version}\n' $packages | paste -sd, - | sed 's/,/, /g')"
# What the packages put on the system (not the directories they share).
for package in $packages; do dpkg -L "$package"; done |
  while read -r path; do [ -d "$path" ] && [ ! -L "$path" ] || echo "$path"; done >/check/files
step "$(wc -l </check/files) files"

version=$(dlock --version | sed -n 's/^dlock //p')
[ -n "$version" ] || die "dlock --version: $(dlock --version 2>&1)"
in_loader_cache || die "libdlock.so is not in the loader's cache"
dlock demo >/check/demo.log 2>&1 || { cat /check/demo.log >&2; die "dlock demo"; }
grep -q 'REJECTED, stale token' /check/demo.log || die "dlock demo: no stale write rejected"
step "dlock $version: the demo's stale write was rejected"
# dlock-full, from its own package, takes a store dlock does not serve: a
# PostgreSQL server that is not there is its answer, not a missing program.
status=0
dlock status --backend postgres://nobody@127.0.0.1:1/none >/check/full.log 2>&1 || status=$?
[ "$status" = 69 ] && grep -q 'Connection refused' /check/full.log ||
  die "dlock did not hand postgres:// to dlock-full (exit $status): $(cat /check/full.log)"
step "dlock handed postgres:// to dlock-full"

# The example, as a user on this system builds it: the tools first.
apt_quietly "apt-get install g++ cmake make pkg-config" install --no-install-recommends \
  g++ cmake make pkg-config
check_run() {  # check_run <how it was built> <binary>
  "$2" >/check/run.log 2>&1 || { cat /check/run.log >&2; die "$1: the example failed"; }
  grep -qx "dlock $version" /check/run.log && grep -qx 'fenced write: admitted' /check/run.log &&
    grep -qE '^late write with token [0-9]+: StaleToken$' /check/run.log ||
    die "$1: unexpected output: $(cat /check/run.log)"
  ldd "$2" | grep -cE 'libdlock\.so\.[0-9.]+ => /(usr/)?lib/' >/dev/null || die "$1: not linked to the installed libdlock.so"
  step "example built with $1: $(tr '\n' ';' </check/run.log)"
}
cmake -S /check/examples -B /check/cmake-build >/check/build.log 2>&1 &&
  cmake --build /check/cmake-build >>/check/build.log 2>&1 ||
  { tail -20 /check/build.log >&2; die "the example with find_package did not build"; }
check_run find_package /check/cmake-build/fenced_write
cp -r /check/examples /check/make-build
make -C /check/make-build >/check/build.log 2>&1 ||
  { tail -20 /check/build.log >&2; die "the example with pkg-config did not build"; }
check_run pkg-config /check/make-build/fenced_write

apt_quietly "apt-get purge" purge --autoremove $packages
left=$(while read -r path; do [ ! -e "$path" ] && [ ! -L "$path" ] || echo "$path"; done </check/files)
[ -z "$left" ] || die "left behind after purge: $(echo "$left" | head -5 | tr '\n' ' ')"
[ -z "$(dpkg-query -W -f '${Package}\n' $packages 2>/dev/null)" ] || die "packages still known to dpkg"
! in_loader_cache || die "libdlock.so is still in the loader's cache"
step "purged: none of the $(wc -l </check/files) files left, libdlock out of the loader's cache"
