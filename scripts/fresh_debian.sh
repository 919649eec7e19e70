# Sourced by scripts/deb_check.sh and scripts/demo_check.sh: a fresh Debian
# 12 in a chroot, for checks that must not see what this machine has
# installed.
#
#   fresh_debian_start <name>        sets WORK, a temporary directory
#       removed at exit (with the system's /proc unmounted first), and ROOT,
#       where the system goes
#   fresh_debian_make <root> <log>   debootstrap (minimal variant) into
#       <root>, with this machine's package sources (bookworm, its updates
#       and security: the versions dlock was built against), its resolver,
#       and /proc mounted
#   fresh_debian_release <root>      unmounts /proc (call before rm -rf)
#
# DLOCK_FRESH_ROOT_CACHE=DIR keeps the freshly bootstrapped system there and
# starts each later run from a copy of it (saves ~40 s a run; scripts/test.sh
# sets it). A copy older than a week is bootstrapped anew, so the packages
# it starts from stay those a new install gets.

fresh_debian_start() {
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlock-$1.XXXXXX")
  ROOT=$WORK/root
  trap 'fresh_debian_release "$ROOT"; rm -rf "$WORK"' EXIT
}

fresh_debian_make() {
  local root=$1 log=$2 cache=${DLOCK_FRESH_ROOT_CACHE:-}
  if [ -n "$cache" ] && [ -n "$(find "$cache/.bootstrapped" -mtime -7 2>/dev/null)" ]; then
    cp -a "$cache" "$root"
    rm "$root/.bootstrapped"
  else
    debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$log" 2>&1 ||
      { tail -5 "$log" >&2; return 1; }
    if [ -n "$cache" ]; then
      # Whole or not at all: the stamp is written last, and the copy moved
      # into place in one step.
      mkdir -p "$(dirname "$cache")" && rm -rf "$cache.new" && cp -a "$root" "$cache.new" &&
        touch "$cache.new/.bootstrapped" && rm -rf "$cache" && mv "$cache.new" "$cache"
    fi
  fi
  rm -f "$root"/etc/apt/sources.list
  cp -a /etc/apt/sources.list.d/. "$root/etc/apt/sources.list.d/"
  [ ! -f /etc/apt/sources.list ] || cp /etc/apt/sources.list "$root/etc/apt/"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  mount -t proc proc "$root/proc"
}

fresh_debian_release() {
  umount "$1/proc" 2>/dev/null || true
}
