#!/usr/bin/env bash
# Installs the Debian 12 packages dlock needs. Idempotent: packages already
# present are skipped, and apt is not touched at all when nothing is
# missing.
#
#   scripts/install-deps.sh            build + test dependencies (everything)
#   scripts/install-deps.sh demo       only what `dlock demo` on the embedded
#                                      SQLite store needs to build (the
#                                      README's first command)
#
# Runs apt-get directly as root, through sudo otherwise.
set -euo pipefail

# The demo: a compiler, and the core, the SQLite store and the command.
demo_packages=(
  g++ cmake ninja-build pkg-config
  libsqlite3-dev libcli11-dev nlohmann-json3-dev
)
packages=(
  # toolchain, core, embedded SQLite default, CLI
  "${demo_packages[@]}"
  # PostgreSQL backend: client library, and the server its tests start
  libpq-dev postgresql
  # MariaDB backend: the C connector (libmariadb), and the server its tests
  # start
  libmariadb-dev mariadb-server
  # Redis backend: client library, and the server its tests start
  libhiredis-dev redis-server
  # Redis peer in the benchmark: redis-py's Lock (node redlock uses the
  # machine's own node and npm; Debian's npm conflicts with it)
  python3-redis
  # ZooKeeper backend: the multi-threaded C client, the server its tests start
  # (Java), and the peers its tests and benchmark compare with: Apache Curator
  # (compiled with javac) and kazoo (for /usr/bin/python3)
  libzookeeper-mt-dev zookeeper default-jre-headless default-jdk-headless
  libcurator-framework-java libcurator-recipes-java python3-kazoo
  # etcd backend: gRPC + protobuf (dlock compiles its own subset of etcd's
  # API), and the server and etcdctl its tests start and interoperate with
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  etcd-server etcd-client
  # TLS: OpenSSL for the Redis store's TLS transport, and the openssl tool
  # the secured test servers' certificates are made with
  libssl-dev openssl
  # tests and benchmarks (tmux: a terminal for the job-control tests;
  # clang-tidy: function size and bugprone checks, scripts/tidy.sh; ccache:
  # scripts/test.sh's builds reuse the objects of its last run)
  tmux clang-tidy ccache
  libgtest-dev libgmock-dev libbenchmark-dev util-linux procps python3
  # man pages generated from --help, and their test (man, col); the
  # install test builds the example with make and inspects libdlock.so
  help2man man-db bsdextrautils make binutils
  # Debian packages (CPack: dpkg-shlibdeps, file) and their check on a fresh
  # Debian 12 (scripts/deb_check.sh)
  dpkg-dev file lintian debootstrap
  # chaos harness: wall-clock steps for one process (libfaketime)
  faketime
  # chaos report test: render the HTML report headless
  chromium
  # metrics: `dlock serve`'s HTTP server (cpp-httplib), and Prometheus, which
  # its tests run to scrape it (promtool checks the text dlock writes)
  libcpp-httplib-dev prometheus
)

case "${1:-}" in
  "") ;;
  demo) packages=("${demo_packages[@]}") ;;
  *)
    echo "install-deps: unknown set '$1' (accepted: demo, or nothing for everything)" >&2
    exit 2
    ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  as_root=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
