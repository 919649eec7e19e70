// fence::RedisConnection: the Redis fence on a connection opened from a
// store URI, so that it can go over TLS (dlock/fence_redis.h).
#include <chrono>
#include <memory>
#include <string>

#include "backends/redis/redis_conn.h"
#include "backends/redis/redis_fence_conn.h"
#include "backends/redis/redis_uri.h"
#include "core/credentials.h"
#include "core/uri.h"
#include "dlock/fence_redis.h"

namespace dlock::fence {

struct RedisConnection::Impl {
  redis::Endpoint endpoint;
  redis::ConnectOptions options;
  std::chrono::milliseconds timeout{5000};
  std::unique_ptr<redis::Connection> conn;
  std::unique_ptr<redis::ClusterRouter> cluster;  // redis+cluster://

  // The connection, opened again if it broke.
  Result<redis::Connection*> Live() {
    if (conn == nullptr || conn->broken()) {
      DLOCK_ASSIGN_OR_RETURN(conn, redis::Connection::Open(endpoint, options, false, true, "fence"));
    }
    return conn.get();
  }
};

namespace {

constexpr const char* kForm =
    "redis[s]://[user[:password]@]host:6379[/db][?cacert=&cert=&key=] or "
    "redis[s]+cluster://host:6379,host:6379,...";

Result<std::unique_ptr<RedisConnection::Impl>> ImplFromUri(std::string_view text) {
  DLOCK_ASSIGN_OR_RETURN(internal::Uri uri, internal::ParseUri(text));
  DLOCK_RETURN_IF_ERROR(internal::ResolveCredentials(uri));
  const bool cluster = uri.scheme == "redis+cluster" || uri.scheme == "rediss+cluster";
  if (uri.scheme != "redis" && uri.scheme != "rediss" && !cluster) {
    return redis::BadUri(uri, "the Redis fence needs one server or a cluster", kForm);
  }
  DLOCK_RETURN_IF_ERROR(uri.CheckParams({"timeout", "cacert", "cert", "key"}));
  auto impl = std::make_unique<RedisConnection::Impl>();
  impl->options = redis::BaseConnectOptions(uri, {});
  DLOCK_RETURN_IF_ERROR(redis::TlsFromUri(uri, &impl->options));
  DLOCK_ASSIGN_OR_RETURN(auto endpoints, redis::ParseEndpoints(uri.hosts, 6379, "fence URI " + uri.Redacted()));
  DLOCK_ASSIGN_OR_RETURN(impl->timeout,
                         redis::DurationParam(uri, "timeout", std::chrono::milliseconds(5000),
                                              std::chrono::milliseconds(1), std::chrono::hours(1)));
  if (cluster) {
    if (uri.path.size() > 1 && uri.path != "/0") {
      return redis::BadUri(uri, "a Redis Cluster has only database 0", kForm);
    }
    impl->cluster = std::make_unique<redis::ClusterRouter>(std::move(endpoints), impl->options);
    return impl;
  }
  if (endpoints.size() != 1) return redis::BadUri(uri, "the Redis fence needs one server", kForm);
  impl->endpoint = endpoints[0];
  const std::string db = uri.path.size() > 1 ? uri.path.substr(1) : "";
  if (!db.empty()) {
    DLOCK_ASSIGN_OR_RETURN(impl->options.db, redis::ParseDb(db, uri));
  }
  return impl;
}

}  // namespace

RedisConnection::RedisConnection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RedisConnection::~RedisConnection() = default;

Result<std::unique_ptr<RedisConnection>> RedisConnection::Open(std::string_view uri) {
  DLOCK_ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl, ImplFromUri(uri));
  if (impl->cluster) {
    DLOCK_RETURN_IF_ERROR(impl->cluster->Refresh("fence"));
  } else {
    DLOCK_RETURN_IF_ERROR(impl->Live().status());
  }
  return std::unique_ptr<RedisConnection>(new RedisConnection(std::move(impl)));
}

Status RedisConnection::Set(std::string_view lock_key, FencingToken token, std::string_view key,
                            std::string_view value) {
  if (impl_->cluster) {
    return redis::FenceSet(*impl_->cluster, lock_key, token, key, value, impl_->timeout);
  }
  DLOCK_ASSIGN_OR_RETURN(redis::Connection* c, impl_->Live());
  return redis::FenceSet(*c, lock_key, token, key, value, impl_->timeout);
}

Result<FencingToken> RedisConnection::Highest(std::string_view lock_key) {
  if (impl_->cluster) return redis::FenceHighest(*impl_->cluster, lock_key, impl_->timeout);
  DLOCK_ASSIGN_OR_RETURN(redis::Connection* c, impl_->Live());
  return redis::FenceHighest(*c, lock_key, impl_->timeout);
}

}  // namespace dlock::fence
