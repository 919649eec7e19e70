#include <hiredis/hiredis.h>

#include <cerrno>
#include <charconv>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "backends/redis/redis_cluster.h"
#include "backends/redis/redis_conn.h"
#include "backends/redis/redis_fence_conn.h"
#include "backends/redis/redis_keys.h"
#include "backends/redis/redis_slots.h"
#include "dlock/fence.h"
#include "dlock/fence_redis.h"
#include "dlock/metrics.h"

namespace dlock::fence {
namespace {

using redis::Script;

constexpr FencingToken kMaxToken = FencingToken{1} << 53;
constexpr std::string_view kStale = "DLOCK_STALE ";

// KEYS[1] the record; ARGV[1] the token. The caller's KEYS/ARGV follow.
// On a stale token: an error reply "DLOCK_STALE <highest>".
constexpr const char* kPrelude = R"lua(
local dlock_highest = redis.call('GET', KEYS[1])
if dlock_highest and tonumber(ARGV[1]) < tonumber(dlock_highest) then
  return redis.error_reply('DLOCK_STALE ' .. dlock_highest)
end
)lua";

const Script& SetScript() {
  static const Script s(std::string(kPrelude) + R"lua(
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[1], ARGV[1])
return 1
)lua");
  return s;
}

const Script& HSetScript() {
  static const Script s(std::string(kPrelude) + R"lua(
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('SET', KEYS[1], ARGV[1])
return 1
)lua");
  return s;
}

// The caller's body runs as a function of its own KEYS and ARGV.
std::string UserScriptText(std::string_view lua) {
  return std::string(kPrelude) + R"lua(
local dlock_keys, dlock_argv = {}, {}
for i = 2, #KEYS do dlock_keys[i - 1] = KEYS[i] end
for i = 2, #ARGV do dlock_argv[i - 1] = ARGV[i] end
local dlock_result = (function(KEYS, ARGV)
)lua" + std::string(lua) + R"lua(
end)(dlock_keys, dlock_argv)
redis.call('SET', KEYS[1], ARGV[1])
return dlock_result
)lua";
}

// The composed scripts by body, so that a repeated Eval goes by EVALSHA.
const Script& UserScript(std::string_view lua) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::unique_ptr<Script>> cache;
  std::lock_guard lock(mu);
  auto it = cache.find(std::string(lua));
  if (it == cache.end()) {
    if (cache.size() > 256) cache.clear();  // bound it; a miss costs one hash
    it = cache.emplace(std::string(lua), std::make_unique<Script>(UserScriptText(lua))).first;
  }
  return *it->second;
}

Status CheckRedisToken(FencingToken token) {
  if (token == 0) {
    return InvalidArgumentError("fencing token 0 is not a token (Redlock grants have none): "
                                "the Redis fence needs an ordered token from 1 to 2^53");
  }
  if (token > kMaxToken) {
    return InvalidArgumentError("fencing token " + std::to_string(token) +
                                " is out of range for the Redis fence: 1 to 2^53");
  }
  return Status::Ok();
}

std::string Server(redisContext* c) {
  if (c != nullptr && c->tcp.host != nullptr) return redis::Endpoint{c->tcp.host, c->tcp.port}.Text();
  return "(caller's connection)";
}

// Runs composed fence scripts on some connection: EVALSHA, EVAL on NOSCRIPT.
using Evaluator = std::function<Result<std::vector<redis::ReplyPtr>>(
    const Script&, std::span<const std::string>, std::span<const std::string>)>;

// Runs a fence script; kStaleToken from the prelude's error.
Result<redis::ReplyPtr> RunWith(const Evaluator& eval, const std::string& server,
                                const Script& script, std::string_view lock_key,
                                FencingToken token, std::span<const std::string> keys,
                                std::span<const std::string> args, bool user_script) {
  DLOCK_RETURN_IF_ERROR(CheckRedisToken(token));
  DLOCK_RETURN_IF_ERROR(ValidateKey(lock_key));
  std::vector<std::string> all_keys{Redis::RecordKey(lock_key)};
  all_keys.insert(all_keys.end(), keys.begin(), keys.end());
  std::vector<std::string> all_args{std::to_string(token)};
  all_args.insert(all_args.end(), args.begin(), args.end());
  DLOCK_ASSIGN_OR_RETURN(auto replies, eval(script, all_keys, all_args));
  redis::ReplyPtr reply = std::move(replies[0]);
  if (reply->type == REDIS_REPLY_ERROR) {
    const std::string what = "fenced write for key '" + std::string(lock_key) + "'";
    const std::string text = redis::ReplyString(reply.get());
    if (text.starts_with(kStale)) {
      const std::string highest = text.substr(kStale.size());
      FencingToken h = 0;
      std::from_chars(highest.data(), highest.data() + highest.size(), h);
      Status stale = StaleToken(token, h, lock_key);
      RecordFenceDecision("redis", stale);
      return stale;
    }
    if (user_script && text.find("user_script") != std::string::npos) {
      return FailedPreconditionError(what + ": the caller's script failed: " + text);
    }
    return redis::ReplyError(reply.get(), server, what);
  }
  RecordFenceDecision("redis", Status::Ok());
  return reply;
}

Result<redis::ReplyPtr> Run(redisContext* c, const Script& script, std::string_view lock_key,
                            FencingToken token, std::span<const std::string> keys,
                            std::span<const std::string> args, bool user_script) {
  const std::string what = "fenced write for key '" + std::string(lock_key) + "'";
  return RunWith(
      [&](const Script& s, std::span<const std::string> k, std::span<const std::string> a) {
        return redis::EvalOnContext(c, s, k, a, what);
      },
      Server(c), script, lock_key, token, keys, args, user_script);
}

// The highest token from GET's reply.
Result<FencingToken> HighestFrom(const redisReply* reply, const std::string& server) {
  if (reply->type == REDIS_REPLY_NIL) return FencingToken{0};
  long long v = 0;
  if (!redis::ReplyInt(reply, &v) || v < 0) {
    if (reply->type == REDIS_REPLY_ERROR) return redis::ReplyError(reply, server, "read fence");
    return redis::OddReply("a token", server, "read fence");
  }
  return static_cast<FencingToken>(v);
}

}  // namespace

void RedisReplyFree::operator()(redisReply* r) const {
  if (r != nullptr) freeReplyObject(r);
}

std::string Redis::RecordKey(std::string_view lock_key) { return redis::FenceName(lock_key); }

std::string Redis::HashTag(std::string_view lock_key) {
  return "{" + redis::EscapeKey(lock_key) + "}";
}

Status Redis::Set(redisContext* context, std::string_view lock_key, FencingToken token,
                  std::string_view key, std::string_view value) {
  const std::string keys[] = {std::string(key)};
  const std::string args[] = {std::string(value)};
  auto r = Run(context, SetScript(), lock_key, token, keys, args, false);
  return r.status();
}

Status Redis::HSet(redisContext* context, std::string_view lock_key, FencingToken token,
                   std::string_view key, std::string_view field, std::string_view value) {
  const std::string keys[] = {std::string(key)};
  const std::string args[] = {std::string(field), std::string(value)};
  auto r = Run(context, HSetScript(), lock_key, token, keys, args, false);
  return r.status();
}

Result<RedisReplyPtr> Redis::Eval(redisContext* context, std::string_view lock_key,
                                  FencingToken token, std::string_view lua,
                                  std::span<const std::string> keys,
                                  std::span<const std::string> args) {
  auto r = Run(context, UserScript(lua), lock_key, token, keys, args, true);
  if (!r.ok()) return r.status();
  return RedisReplyPtr(r->release());
}

Result<FencingToken> Redis::Highest(redisContext* context, std::string_view lock_key) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(lock_key));
  const std::string key = RecordKey(lock_key);
  const char* argv[] = {"GET", key.c_str()};
  const std::size_t len[] = {3, key.size()};
  if (context == nullptr) return InvalidArgumentError("fence: null redisContext");
  redis::ReplyPtr reply(static_cast<redisReply*>(redisCommandArgv(context, 2, argv, len)));
  if (!reply) return redis::ContextError(context, errno, std::chrono::milliseconds(0), Server(context), "read fence");
  return HighestFrom(reply.get(), Server(context));
}

}  // namespace dlock::fence

namespace dlock::redis {

Status FenceSet(Connection& c, std::string_view lock_key, FencingToken token,
                std::string_view key, std::string_view value,
                std::chrono::milliseconds timeout) {
  const std::string keys[] = {std::string(key)};
  const std::string args[] = {std::string(value)};
  const std::string what = "fenced write for key '" + std::string(lock_key) + "'";
  return fence::RunWith(
             [&](const Script& s, std::span<const std::string> k, std::span<const std::string> a) {
               return c.Eval(s, k, a, {}, timeout, what);
             },
             c.server(), fence::SetScript(), lock_key, token, keys, args, false)
      .status();
}

Status FenceSet(ClusterRouter& cluster, std::string_view lock_key, FencingToken token,
                std::string_view key, std::string_view value,
                std::chrono::milliseconds timeout) {
  const std::string keys[] = {std::string(key)};
  const std::string args[] = {std::string(value)};
  const std::string what = "fenced write for key '" + std::string(lock_key) + "'";
  std::string server = "the cluster";  // named once a node answers
  const std::uint16_t slot = HashSlot(fence::Redis::RecordKey(lock_key));
  const auto deadline = ClusterRouter::Within(timeout);  // for both tries (NOSCRIPT)
  return fence::RunWith(
             [&](const Script& s, std::span<const std::string> k,
                 std::span<const std::string> a) -> Result<std::vector<ReplyPtr>> {
               DLOCK_ASSIGN_OR_RETURN(auto routed, cluster.Eval(slot, s, k, a, {}, deadline, what));
               server = std::move(routed.server);
               return std::move(routed.replies);
             },
             server, fence::SetScript(), lock_key, token, keys, args, false)
      .status();
}

Result<FencingToken> FenceHighest(ClusterRouter& cluster, std::string_view lock_key,
                                  std::chrono::milliseconds timeout) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(lock_key));
  const Command get{"GET", fence::Redis::RecordKey(lock_key)};
  DLOCK_ASSIGN_OR_RETURN(auto routed,
                         cluster.Run(HashSlot(get[1]), {&get, 1}, ClusterRouter::Within(timeout),
                                     "read fence"));
  return fence::HighestFrom(routed.replies[0].get(), routed.server);
}

Result<FencingToken> FenceHighest(Connection& c, std::string_view lock_key,
                                  std::chrono::milliseconds timeout) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(lock_key));
  DLOCK_ASSIGN_OR_RETURN(ReplyPtr reply,
                         c.Call({"GET", fence::Redis::RecordKey(lock_key)}, timeout, "read fence"));
  return fence::HighestFrom(reply.get(), c.server());
}

}  // namespace dlock::redis
