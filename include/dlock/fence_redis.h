// The Redis fence: the caller's write to Redis happens only if its fencing
// token is admitted for the lock key, in one Lua script, so that nothing can
// run between the check and the write (dlock/fence.h has the rule).
//
//   redisContext* c = redisConnect("127.0.0.1", 6379);   // the caller's own
//   Status s = dlock::fence::Redis::Set(c, "orders/42", lease->token(),
//                                       "orders:42:state", "shipped");
//   if (s.code() == dlock::StatusCode::kStaleToken) { /* a newer holder exists */ }
//
// The highest admitted token for lock key K is kept beside the lock, in
// dlock:{K}:fence (K escaped as docs/backend-redis.md says), in the database
// the context has selected; it never expires. A token is admitted when it is
// >= that value, and recorded after the write succeeded. Redis scripts do
// not roll back: a caller-supplied script that fails half-way keeps the
// writes it made before the error (and records nothing).
//
// Tokens are 1 .. 2^53 (Lua numbers are doubles). Redlock's token 0 is
// refused: Redlock grants are not ordered (docs/backend-redis.md).
//
// Thread-safety: like hiredis, one context must not be used by two threads
// at once; the functions themselves keep no state.
#ifndef DLOCK_FENCE_REDIS_H_
#define DLOCK_FENCE_REDIS_H_

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "dlock/export.h"
#include "dlock/status.h"
#include "dlock/types.h"

struct redisContext;
struct redisReply;

namespace dlock::fence {

// Owns a hiredis reply (freeReplyObject).
struct DLOCK_EXPORT RedisReplyFree {
  void operator()(redisReply* r) const;
};
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyFree>;

class DLOCK_EXPORT Redis {
 public:
  // SET key value, if `token` is admitted for `lock_key`.
  static Status Set(redisContext* context, std::string_view lock_key, FencingToken token,
                    std::string_view key, std::string_view value);
  // HSET key field value, if admitted.
  static Status HSet(redisContext* context, std::string_view lock_key, FencingToken token,
                     std::string_view key, std::string_view field, std::string_view value);
  // Runs `lua` (a script body as for EVAL, seeing its own KEYS and ARGV) if
  // admitted, and returns its reply. An error the script raises comes back
  // as kFailedPrecondition with its message; nothing is recorded then.
  static Result<RedisReplyPtr> Eval(redisContext* context, std::string_view lock_key,
                                    FencingToken token, std::string_view lua,
                                    std::span<const std::string> keys,
                                    std::span<const std::string> args);
  // The highest token admitted for `lock_key` (0 if none).
  static Result<FencingToken> Highest(redisContext* context, std::string_view lock_key);
  // The Redis key holding it.
  static std::string RecordKey(std::string_view lock_key);
  // "{K}", K escaped: the Redis Cluster hash tag of the record. On a
  // cluster a fenced write's keys must share the record's hash slot, so
  // name them with it ("app:" + HashTag("orders/42") + ":state"); a key in
  // another slot is refused (kInvalidArgument, CROSSSLOT).
  static std::string HashTag(std::string_view lock_key);
};

// The same fence on a connection dlock opens from a store URI: redis:// or
// rediss:// (TLS: cacert=, cert=, key=), with the URI's user, password (or
// password_file= / password_env=) and database. For a Redis that wants TLS,
// which a hiredis 0.14 context cannot speak. Or a Redis Cluster,
// redis+cluster://h1:p1,h2:p2,... (rediss+cluster:// over TLS): each write
// goes to the primary of the record's slot, following MOVED and ASK; the
// written key must carry Redis::HashTag(lock_key).
//
//   auto fence = dlock::fence::RedisConnection::Open(
//       "rediss://app@cache:6380/0?cacert=/etc/app/ca.pem&password_file=/etc/app/pw");
//   Status s = (*fence)->Set("orders/42", lease->token(), "orders:42:state", "shipped");
//
// A broken connection is opened again at the next call (and the TLS files
// read again). Thread-safety: one thread at a time.
class DLOCK_EXPORT RedisConnection {
 public:
  // Connects now: a refused password or certificate is kPermissionDenied, a
  // bad URI kInvalidArgument, an unreachable server kUnavailable.
  static Result<std::unique_ptr<RedisConnection>> Open(std::string_view uri);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // As Redis::Set and Redis::Highest.
  Status Set(std::string_view lock_key, FencingToken token, std::string_view key,
             std::string_view value);
  Result<FencingToken> Highest(std::string_view lock_key);

  struct Impl;  // the connection and how to open it again; opaque

 private:
  DLOCK_INTERNAL explicit RedisConnection(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dlock::fence

#endif  // DLOCK_FENCE_REDIS_H_
