// Redis's pipelined-write floor (async_floor.h): a one-key EVALSHA of a
// script doing one SET (with a PX, as a grant's), on distinct keys, 256 a
// pipeline on one connection. A grant or a release is one script call on
// one connection of the same server; dlock sends them 256 a pipeline too
// (CallBatcher), so no acquire + release can cost the server less than two
// of these. The calls go through dlock's own connection (Connection), so
// the client's formatting and parsing are counted as for the lock.
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "async_floor.h"
#include "backends/redis/redis_conn.h"
#include "backends/redis/redis_uri.h"
#include "core/uri.h"

namespace dlock::bench {

std::optional<WriteFloor> RedisPipelinedWriteFloor(std::string_view uri_text, int writes) {
  using std::chrono::milliseconds;
  constexpr int kDepth = 256;
  const redis::Script script("return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])");
  auto uri = internal::ParseUri(uri_text);
  // One server only: a cluster's or Sentinel's floor is a node's, measured
  // on that node's own redis:// URI.
  if (!uri.ok() || (uri->scheme != "redis" && uri->scheme != "rediss")) return std::nullopt;
  redis::ConnectOptions options = redis::BaseConnectOptions(*uri, internal::BackendParams{});
  if (!redis::TlsFromUri(*uri, &options).ok()) return std::nullopt;
  std::string_view path = uri->path;
  if (path.starts_with('/')) path.remove_prefix(1);
  if (!path.empty()) {
    auto db = redis::ParseDb(path, *uri);
    if (!db.ok()) return std::nullopt;
    options.db = *db;
  }
  auto endpoints = redis::ParseEndpoints(uri->hosts, 6379, "the floor's URI");
  if (!endpoints.ok() || endpoints->size() != 1) return std::nullopt;
  auto conn = redis::Connection::Open((*endpoints)[0], options, false, true, "floor");
  if (!conn.ok()) return std::nullopt;
  if (!(*conn)->Call({"SCRIPT", "LOAD", script.text}, milliseconds(5000), "floor").ok()) {
    return std::nullopt;
  }
  const std::string prefix = "dlock-bench-floor:" + std::to_string(getpid()) + ":";
  std::vector<redis::Command> batch;
  const auto start = std::chrono::steady_clock::now();
  for (int sent = 0; sent < writes;) {
    batch.clear();
    for (; sent < writes && static_cast<int>(batch.size()) < kDepth; ++sent) {
      // The keys expire by themselves (60 s): nothing is left behind.
      batch.push_back({"EVALSHA", script.sha1, "1", prefix + std::to_string(sent), "v", "60000"});
    }
    auto replies = (*conn)->Pipeline(batch, milliseconds(5000), "floor");
    if (!replies.ok()) return std::nullopt;
    for (const redis::ReplyPtr& r : *replies) {
      if (r->type == REDIS_REPLY_ERROR) return std::nullopt;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return WriteFloor{writes / seconds,
                    "EVALSHA of a one-key script doing SET ... PX, distinct keys, 256 a pipeline "
                    "on one connection"};
}

}  // namespace dlock::bench
