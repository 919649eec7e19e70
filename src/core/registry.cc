#include "core/registry.h"

// The `dlock` command compiles this file once more with DLOCK_CLI_LITE: the
// stores whose client libraries are heavy to load (gRPC for etcd, libpq and
// its Kerberos/LDAP/TLS stack for PostgreSQL: ~13 ms of start-up on every
// run, most of `dlock exec`'s cost on the default store) are then served by
// `dlock-full`, which `dlock` execs for those URIs (src/cli/main.cc).
#ifdef DLOCK_CLI_LITE
#undef DLOCK_HAVE_POSTGRES
#undef DLOCK_HAVE_ETCD
#endif

#include "backends/sqlite/sqlite_backend.h"
#include "core/credentials.h"
#include "core/uri.h"
#ifdef DLOCK_HAVE_POSTGRES
#include "backends/postgres/postgres_backend.h"
#endif
#ifdef DLOCK_HAVE_REDIS
#include "backends/redis/redis_backend.h"
#endif
#ifdef DLOCK_HAVE_ZOOKEEPER
#include "backends/zookeeper/zookeeper_backend.h"
#endif
#ifdef DLOCK_HAVE_ETCD
#include "backends/etcd/etcd_backend.h"
#endif

namespace dlock::internal {
namespace {

using Factory = Result<std::unique_ptr<Backend>> (*)(const Uri&, const BackendParams&);

Result<std::unique_ptr<Backend>> OpenSqlite(const Uri& uri, const BackendParams& params) {
  auto options = sqlite::OptionsFromUri(uri);
  if (!options.ok()) return options.status();
  options->create_directory = params.is_default;
  return sqlite::Open(*options);
}

struct Entry {
  std::string_view scheme;
  std::string_view form;  // how a URI of this scheme looks
  Factory factory;        // null: not in this build
  std::string_view why_not = "its client library was not found when dlock was built";
};

#ifdef DLOCK_CLI_LITE
// Reached only if `dlock` could not hand the command to dlock-full.
Result<std::unique_ptr<Backend>> InFullBinary(const Uri& uri, const BackendParams&) {
  return UnavailableError("the " + uri.scheme + " store is served by dlock-full, next to dlock, "
                          "which could not be run");
}
constexpr Factory kPostgres = &InFullBinary;
constexpr Factory kEtcd = &InFullBinary;
#elif defined(DLOCK_HAVE_POSTGRES)
constexpr Factory kPostgres = &postgres::Open;
#else
constexpr Factory kPostgres = nullptr;
#endif
#ifdef DLOCK_HAVE_REDIS
constexpr Factory kRedis = &redis::Open;
constexpr Factory kRedisSentinel = &redis::OpenSentinel;
constexpr Factory kRedlock = &redis::OpenRedlock;
#else
constexpr Factory kRedis = nullptr;
constexpr Factory kRedisSentinel = nullptr;
constexpr Factory kRedlock = nullptr;
#endif
#ifdef DLOCK_CLI_LITE
#elif defined(DLOCK_HAVE_ETCD)
constexpr Factory kEtcd = &etcd::Open;
#else
constexpr Factory kEtcd = nullptr;
#endif

#ifdef DLOCK_HAVE_ZOOKEEPER
constexpr Factory kZooKeeper = &zookeeper::Open;
#else
constexpr Factory kZooKeeper = nullptr;
#endif

// Every scheme dlock knows, built or not, so that a user of a build without
// one gets "not in this build" rather than "unknown".
constexpr Entry kEntries[] = {
    {"sqlite", "sqlite:///path/locks.db", &OpenSqlite},
    {"postgres", "postgres://user@host:5432/db", kPostgres},
    {"postgresql", "postgresql://user@host:5432/db", kPostgres},
    {"redis", "redis://host:6379/0", kRedis},
    {"redis+sentinel", "redis+sentinel://h1:26379,h2:26379/master", kRedisSentinel},
    {"rediss", "rediss://host:6380/0", nullptr,
     "TLS is not supported: Debian 12's hiredis 0.14 has no TLS; use redis:// through a TLS "
     "tunnel"},
    {"redlock", "redlock://h1:6379,h2:6379,h3:6379", kRedlock},
    {"zk", "zk://h1:2181,h2:2181/chroot", kZooKeeper},
    {"etcd", "etcd://h1:2379,h2:2379[/prefix]", kEtcd},
};

}  // namespace

bool ServedByFullBinary(std::string_view scheme) {
#ifdef DLOCK_CLI_LITE
  return scheme == "postgres" || scheme == "postgresql" || scheme == "etcd";
#else
  (void)scheme;
  return false;
#endif
}

std::string SupportedSchemes() {
  std::string s;
  for (const Entry& e : kEntries) {
    if (!e.factory) continue;
    if (!s.empty()) s += ", ";
    s += e.form;
  }
  return s;
}

Result<std::unique_ptr<Backend>> OpenBackend(std::string_view text,
                                             const BackendParams& params) {
  auto uri = ParseUri(text);
  if (!uri.ok()) {
    return InvalidArgumentError(uri.status().message() + "; supported: " + SupportedSchemes());
  }
  DLOCK_RETURN_IF_ERROR(ResolveCredentials(*uri));
  for (const Entry& e : kEntries) {
    if (e.scheme != uri->scheme) continue;
    if (!e.factory) {
      return InvalidArgumentError("the " + std::string(e.scheme) +
                                  " store is not in this build (" + std::string(e.why_not) +
                                  "); supported: " + SupportedSchemes());
    }
    return e.factory(*uri, params);
  }
  return InvalidArgumentError("unknown store '" + uri->scheme + "' in " + uri->Redacted() +
                              "; supported: " + SupportedSchemes());
}

}  // namespace dlock::internal
