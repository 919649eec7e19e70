// Connections to Redis for the backends and the fence: RAII handles around
// hiredis, pipelined calls, Lua scripts by SHA with a NOSCRIPT fallback, and
// the one function that turns hiredis failures and error replies into dlock
// Statuses (FromRedis).
//
// Thread-safety: a Connection is used by one thread at a time (the backends
// keep a pool of them). The free functions are thread-safe.
#ifndef DLOCK_SRC_BACKENDS_REDIS_REDIS_CONN_H_
#define DLOCK_SRC_BACKENDS_REDIS_REDIS_CONN_H_

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/redis/redis_transport.h"
#include "dlock/status.h"

namespace dlock::redis {

struct ContextFree {
  void operator()(redisContext* c) const {
    if (c != nullptr) redisFree(c);
  }
};
using ContextPtr = std::unique_ptr<redisContext, ContextFree>;

// The one place where hiredis errors and Redis error replies become dlock
// Statuses. `server` is "host:port" (never a password), `what` says what was
// being done ("acquire jobs/a").
Status FromRedis(const Failure& failure, std::string_view server, std::string_view what);

// Shorthands that build the Failure.
Status ContextError(redisContext* c, int saved_errno, std::chrono::milliseconds timeout,
                    std::string_view server, std::string_view what);
Status ReplyError(const redisReply* r, std::string_view server, std::string_view what);
Status OddReply(std::string_view expected, std::string_view server, std::string_view what);
// Whether `s` is the same on every server and retrying cannot help: a bad
// argument, or credentials or rights the server refused.
inline bool IsFinal(const Status& s) {
  return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kPermissionDenied;
}

// "h1:6379,h2,[::1]:6380" -> endpoints (default_port where none is given).
Result<std::vector<Endpoint>> ParseEndpoints(std::string_view hosts, int default_port,
                                             std::string_view what);

struct ConnectOptions {
  std::string user;
  std::string password;  // never printed
  bool has_password = false;
  int db = 0;
  std::chrono::milliseconds connect_timeout{5000};
  TlsOptions tls;  // rediss://
};

// A Lua script and its SHA-1, computed here so that calls go by EVALSHA.
struct Script {
  explicit Script(std::string text);
  std::string text;
  std::string sha1;  // 40 lowercase hex digits
};
std::string Sha1Hex(std::string_view data);

// Runs commands somewhere (one connection, or a cluster's routing) and
// returns one reply per command.
using PipelineFn = std::function<Result<std::vector<ReplyPtr>>(std::span<const Command>)>;

// EVALSHA script keys args, then `extra`, through `run`; on NOSCRIPT (a
// restarted, failed over or flushed server) the same again with EVAL,
// which also caches the script.
Result<std::vector<ReplyPtr>> EvalThrough(const PipelineFn& run, const Script& script,
                                          std::span<const std::string> keys,
                                          std::span<const std::string> args,
                                          std::span<const Command> extra);

class Connection {
 public:
  // Connects, authenticates and selects the database, in one round trip.
  // require_primary: also checks ROLE (Sentinel: the address may be stale).
  // verify: makes at least one round trip, so that a server that is not
  // Redis is found now rather than at the first call.
  static Result<std::unique_ptr<Connection>> Open(const Endpoint& endpoint,
                                                  const ConnectOptions& options,
                                                  bool require_primary, bool verify,
                                                  std::string_view what);

  // Sends every command in one write and reads every reply. Error replies
  // come back as replies (type REDIS_REPLY_ERROR); the call itself fails
  // only when the connection breaks, times out or the bytes are not Redis
  // protocol, and the connection is then broken() for good.
  Result<std::vector<ReplyPtr>> Pipeline(std::span<const Command> commands,
                                         std::chrono::milliseconds timeout,
                                         std::string_view what);
  Result<ReplyPtr> Call(const Command& command, std::chrono::milliseconds timeout,
                        std::string_view what);

  // EVALSHA script keys args, then `extra` commands, in one round trip; on
  // NOSCRIPT (a restarted or flushed server) the same again with EVAL,
  // which also caches the script. Replies: the script's, then extra's.
  Result<std::vector<ReplyPtr>> Eval(const Script& script, std::span<const std::string> keys,
                                     std::span<const std::string> args,
                                     std::span<const Command> extra,
                                     std::chrono::milliseconds timeout, std::string_view what);

  bool broken() const { return broken_; }
  // An idle connection with bytes or EOF waiting has been closed (or
  // spoken to) by the server; the caller should not send on it. Checked
  // only after `idle` without a call: a connection used a moment ago is
  // almost surely alive, and the check costs a system call.
  bool PeerClosed(std::chrono::milliseconds idle);
  const std::string& server() const { return server_; }

  // The halves of Pipeline, for callers that overlap several connections
  // (Redlock) or read as messages arrive (the subscriber). A failure
  // breaks the connection, as in Pipeline.
  Status Send(std::span<const Command> commands, std::chrono::milliseconds timeout,
              std::string_view what);
  Result<ReplyPtr> Receive(std::string_view what);
  // Every whole reply that has arrived, without blocking.
  Result<std::vector<ReplyPtr>> ReceiveAvailable(std::string_view what);
  int fd() const { return transport_->fd(); }
  // Gives up on the replies still owed (the caller's deadline passed): the
  // connection is broken() from now on, so that no later call reads them
  // as its own. Says that the server did not answer in time.
  Status Abandon(std::string_view what);

 private:
  Connection(std::unique_ptr<Transport> transport, std::string server)
      : transport_(std::move(transport)), server_(std::move(server)) {}
  void SetTimeout(std::chrono::milliseconds timeout);
  Status Broken(std::string_view what);

  std::unique_ptr<Transport> transport_;
  std::string server_;
  std::chrono::milliseconds timeout_{-1};
  bool broken_ = false;
  std::chrono::steady_clock::time_point last_call_{};
};

// Runs an already connected hiredis context (the fence's caller owns it)
// through the same pipeline + NOSCRIPT logic. The context's timeout is left
// as the caller set it.
Result<std::vector<ReplyPtr>> EvalOnContext(redisContext* c, const Script& script,
                                            std::span<const std::string> keys,
                                            std::span<const std::string> args,
                                            std::string_view what);

bool IsNoScript(const redisReply* r);
std::string ReplyString(const redisReply* r);  // a bulk/status reply's bytes
// The number in an integer reply or a bulk string of digits.
bool ReplyInt(const redisReply* r, long long* out);

timeval ToTimeval(std::chrono::milliseconds ms);

}  // namespace dlock::redis

#endif  // DLOCK_SRC_BACKENDS_REDIS_REDIS_CONN_H_
