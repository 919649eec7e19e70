#!/usr/bin/env bash
# Writes the man pages of the dlock command, from its own --help (one source
# for both) with help2man: dlock.1, and dlock-<subcommand>.1 for each
# subcommand `dlock --help` lists. The installed copies go to a second
# directory, compressed as Debian's policy asks (gzip -9n), with dlock-full,
# the same program, pointing to dlock's page.
#
#   dlock_man.sh <dlock binary> <output directory> <installed directory>
set -euo pipefail
dlock=${1:?usage: dlock_man.sh <dlock binary> <output directory>}
out=${2:?}
installed=${3:?}
version=$("$dlock" --version | sed -n 's/^dlock //p')
subcommands=$("$dlock" --help | awk '/^Subcommands:/ { on = 1; next }
                                    on && /^  [a-z]/ { print $1 }
                                    on && /^$/ { exit }')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
rm -f "$out"/dlock*.1

# Every page points to the others.
{
  echo "[SEE ALSO]"
  pages=".BR dlock (1)"
  for sub in $subcommands; do pages="$pages,
.BR dlock-$sub (1)"; done
  echo "$pages"
  echo
  echo "The documentation in the source tree: docs/cli.md for the command,"
  echo "docs/install.md for the library."
} >"$work/see-also.h2m"

page() {  # page <executable> <page name> <one-line description>
  help2man --no-info --section=1 --manual="dlock manual" --source="dlock $version" \
    --version-string="$version" --name="$3" --include="$work/see-also.h2m" \
    --output="$out/$2.1" "$1"
  # help2man names a page after its executable (wrappers included); keep the
  # date out, so that a page changes only when the command does.
  sed -i -E 's/^\.TH ([^ ]+) "1" "[^"]*"/.TH \1 "1" ""/' "$out/$2.1"
}

page "$dlock" dlock "distributed locks with fencing tokens"
for sub in $subcommands; do
  # help2man runs one program: `dlock <sub>` through a wrapper of that name,
  # which also names the command in full on the usage line.
  printf '#!/bin/sh\n"%s" %s "$@" | sed "s/^Usage: %s /Usage: dlock %s /"\n' \
    "$dlock" "$sub" "$sub" "$sub" >"$work/dlock-$sub"
  chmod +x "$work/dlock-$sub"
  description=$("$dlock" "$sub" --help | head -n 1)
  page "$work/dlock-$sub" "dlock-$sub" "$description"
done

mkdir -p "$installed"
rm -f "$installed"/dlock*.1.gz
for file in "$out"/*.1; do
  gzip -9nc "$file" >"$installed/$(basename "$file").gz"
done
ln -s dlock.1.gz "$installed/dlock-full.1.gz"
