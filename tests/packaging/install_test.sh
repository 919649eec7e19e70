#!/usr/bin/env bash
# dlock as an installed library: `cmake --install` of this build into a
# temporary prefix, then the example (examples/) built against that prefix
# with find_package (libdlock.so, and libdlock.a with DLOCK_USE_STATIC) and
# with pkg-config, and run; libdlock.so's SONAME and exported symbols; and
# find_package refusing a version or a store it cannot give. docs/install.md.
#
#   install_test.sh <build dir> <source dir> <C++ compiler>
set -u
BUILD=${1:?usage: install_test.sh <build dir> <source dir> <C++ compiler>}
SRC=${2:?}
CXX=${3:?}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlock-install-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PREFIX=$WORK/prefix
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
ok() { echo "ok: $*"; }

if ! cmake --install "$BUILD" --prefix "$PREFIX" >"$WORK/install.log" 2>&1; then
  cat "$WORK/install.log"
  echo "FAIL: cmake --install" >&2
  exit 1
fi
ok "cmake --install into $PREFIX"

version=$("$BUILD/dlock" --version | sed -n 's/^dlock //p')
major=${version%%.*}
minor=${version#*.}
minor=${minor%%.*}
# docs/install.md, ABI: the SONAME carries major.minor before 1.0, the major after.
if [ "$major" = 0 ]; then soname=libdlock.so.0.$minor; else soname=libdlock.so.$major; fi
shared=$(find "$PREFIX" -name libdlock.so -print -quit)
libdir=$(dirname "$shared")
[ -n "$shared" ] && [ -f "$libdir/libdlock.a" ] && [ -f "$libdir/$soname" ] &&
  [ -f "$libdir/cmake/dlock/dlockConfig.cmake" ] && [ -f "$libdir/pkgconfig/dlock.pc" ] &&
  [ -f "$PREFIX/include/dlock/version.h" ] && [ -f "$PREFIX/include/dlock/export.h" ] &&
  [ -f "$PREFIX/include/dlock/testing/in_memory_backend.h" ] ||
  fail "installed files missing: $(cd "$PREFIX" && find . -name 'libdlock*' -o -name 'dlock*' | sort | tr '\n' ' ')"

# The SONAME, and the exports: only dlock's public API (namespace dlock and
# dlock::fence), nothing internal, nothing of the libraries linked in.
readelf -d "$shared" | grep -q "SONAME.*\[$soname\]" && ok "SONAME $soname" ||
  fail "SONAME is not $soname: $(readelf -d "$shared" | grep SONAME)"
nm -D --defined-only -C "$shared" | cut -d' ' -f3- >"$WORK/exports"
grep -vE '^((vtable|typeinfo|typeinfo name|VTT) for )?dlock::(fence::)?[A-Z]' "$WORK/exports" >"$WORK/foreign"
grep -E 'internal' "$WORK/exports" >>"$WORK/foreign"
if [ -s "$WORK/foreign" ]; then
  fail "libdlock.so exports more than the public API: $(head -5 "$WORK/foreign")"
else
  ok "libdlock.so exports $(wc -l <"$WORK/exports") symbols, all public API"
fi

# check_run NAME BINARY: the example's output, and the binary on libdlock.so
# (or not, for the static build).
check_run() {
  local name=$1 bin=$2 out="$WORK/$1.out"
  if ! "$bin" >"$out" 2>&1; then
    fail "$name: the example failed: $(cat "$out")"
    return
  fi
  grep -qx "dlock $version" "$out" && grep -qx 'fenced write: admitted' "$out" &&
    grep -qE '^late write with token [0-9]+: StaleToken$' "$out" ||
    { fail "$name: unexpected output: $(cat "$out")"; return; }
  ok "$name: $(tr '\n' ';' <"$out")"
}
# The asynchronous example: both waiters granted after the holder, in turn.
check_async() {
  local name="$1 async" out="$WORK/$1-async.out"
  if ! timeout 60 "$2" >"$out" 2>&1; then
    fail "$name: the example failed: $(cat "$out")"
    return
  fi
  grep -qE '^callback: granted token [0-9]+$' "$out" && grep -qE '^coroutine: granted token [0-9]+$' "$out" ||
    { fail "$name: unexpected output: $(cat "$out")"; return; }
  ok "$name: $(tr '\n' ';' <"$out")"
}
needs_shared() {
  readelf -d "$2" | grep -q "NEEDED.*\[$soname\]" || fail "$1 does not load $soname"
}

# find_package, shared and static.
for kind in shared static; do
  use_static=OFF
  [ $kind = static ] && use_static=ON
  if cmake -S "$SRC/examples" -B "$WORK/cmake-$kind" -G Ninja -DCMAKE_CXX_COMPILER="$CXX" \
       -DCMAKE_PREFIX_PATH="$PREFIX" -DDLOCK_USE_STATIC=$use_static >"$WORK/cmake-$kind.log" 2>&1 &&
     cmake --build "$WORK/cmake-$kind" >>"$WORK/cmake-$kind.log" 2>&1; then
    check_run "find_package ($kind)" "$WORK/cmake-$kind/fenced_write"
    check_async "find_package ($kind)" "$WORK/cmake-$kind/async_acquire"
    if [ $kind = shared ]; then
      needs_shared "find_package (shared)" "$WORK/cmake-$kind/fenced_write"
    elif readelf -d "$WORK/cmake-$kind/fenced_write" | grep -q 'NEEDED.*libdlock'; then
      fail "find_package (static) loads libdlock.so"
    fi
  else
    fail "find_package ($kind): build failed: $(tail -20 "$WORK/cmake-$kind.log")"
  fi
done

# pkg-config.
mkdir "$WORK/make"
cp "$SRC/examples/Makefile" "$SRC/examples/fenced_write.cc" "$WORK/make/"
export PKG_CONFIG_PATH=$libdir/pkgconfig
if make -C "$WORK/make" CXX="$CXX" >"$WORK/make.log" 2>&1; then
  check_run "pkg-config" "$WORK/make/fenced_write"
  needs_shared "pkg-config" "$WORK/make/fenced_write"
else
  fail "pkg-config: make failed: $(tail -20 "$WORK/make.log")"
fi
pkg-config --static --libs dlock >/dev/null 2>"$WORK/pc.err" && ok "pkg-config --static resolves" ||
  fail "pkg-config --static --libs dlock: $(cat "$WORK/pc.err")"

# find_package refuses what it cannot give, saying why.
probe() {
  local name=$1 args=$2 want=$3 dir="$WORK/probe-$1"
  mkdir "$dir"
  printf 'cmake_minimum_required(VERSION 3.25)\nproject(probe LANGUAGES CXX)\nfind_package(dlock %s REQUIRED)\n' \
    "$args" >"$dir/CMakeLists.txt"
  if cmake -S "$dir" -B "$dir/build" -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_PREFIX_PATH="$PREFIX" \
       >"$dir/log" 2>&1; then
    fail "find_package(dlock $args) succeeded"
  elif ! tr -s ' \n' ' ' <"$dir/log" | grep -qF "$want"; then
    fail "find_package(dlock $args) failed without saying '$want': $(cat "$dir/log")"
  else
    ok "find_package(dlock $args) refused: $want"
  fi
}
probe newer 99 "compatible with requested version \"99\""
probe older 0.1 "compatible with requested version \"0.1\""
probe store "$version COMPONENTS nosuchstore" "has no store 'nosuchstore' (it was built with: sqlite"

[ "$failures" = 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo "all ok"
