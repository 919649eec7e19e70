#include "backends/redis/redis_conn.h"

#include <poll.h>
#include <sys/time.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <functional>
#include <system_error>

#include "core/duration.h"

namespace dlock::redis {
namespace {

using std::chrono::milliseconds;

bool StartsWithWord(std::string_view text, std::string_view word) {
  return text.starts_with(word) &&
         (text.size() == word.size() || text[word.size()] == ' ');
}

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

// The argv/argvlen arrays hiredis wants, pointing into `command`.
struct Argv {
  explicit Argv(const Command& command) {
    argv.reserve(command.size());
    len.reserve(command.size());
    for (const std::string& arg : command) {
      argv.push_back(arg.data());
      len.push_back(arg.size());
    }
  }
  std::vector<const char*> argv;
  std::vector<std::size_t> len;
};

Result<std::vector<ReplyPtr>> PipelineOn(redisContext* c, std::span<const Command> commands,
                                         milliseconds timeout, std::string_view server,
                                         std::string_view what) {
  for (const Command& command : commands) {
    Argv a(command);
    if (redisAppendCommandArgv(c, static_cast<int>(a.argv.size()), a.argv.data(),
                               a.len.data()) != REDIS_OK) {
      return ContextError(c, errno, timeout, server, what);
    }
  }
  std::vector<ReplyPtr> replies;
  replies.reserve(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    errno = 0;
    if (redisGetReply(c, &raw) != REDIS_OK || raw == nullptr) {
      const int saved = errno;
      return ContextError(c, saved, timeout, server, what);
    }
    replies.emplace_back(static_cast<redisReply*>(raw));
  }
  return replies;
}

}  // namespace

Result<std::vector<ReplyPtr>> EvalThrough(const PipelineFn& run, const Script& script,
                                          std::span<const std::string> keys,
                                          std::span<const std::string> args,
                                          std::span<const Command> extra) {
  std::vector<Command> commands;
  commands.reserve(1 + extra.size());
  Command eval;
  eval.reserve(3 + keys.size() + args.size());
  eval.push_back("EVALSHA");
  eval.push_back(script.sha1);
  eval.push_back(std::to_string(keys.size()));
  eval.insert(eval.end(), keys.begin(), keys.end());
  eval.insert(eval.end(), args.begin(), args.end());
  commands.push_back(std::move(eval));
  commands.insert(commands.end(), extra.begin(), extra.end());
  auto replies = run(commands);
  if (!replies.ok() || !IsNoScript((*replies)[0].get())) return replies;
  // The server does not know the script (restarted, failed over, SCRIPT
  // FLUSH): send its text once; EVAL caches it for the next EVALSHA.
  commands[0][0] = "EVAL";
  commands[0][1] = script.text;
  return run(commands);
}

namespace {

// SHA-1 (FIPS 180-4), only to name scripts the way Redis does.
class Sha1 {
 public:
  void Update(std::string_view data) {
    for (unsigned char byte : data) {
      block_[fill_++] = byte;
      if (fill_ == 64) Compress();
    }
    bits_ += static_cast<std::uint64_t>(data.size()) * 8;
  }
  std::string HexDigest() {
    const std::uint64_t bits = bits_;
    block_[fill_++] = 0x80;
    if (fill_ > 56) {
      while (fill_ < 64) block_[fill_++] = 0;
      Compress();
    }
    while (fill_ < 56) block_[fill_++] = 0;
    for (int i = 7; i >= 0; --i) block_[fill_++] = static_cast<unsigned char>(bits >> (i * 8));
    Compress();
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (std::uint32_t word : h_) {
      for (int i = 28; i >= 0; i -= 4) out += kHex[(word >> i) & 0xf];
    }
    return out;
  }

 private:
  static std::uint32_t Rol(std::uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }
  void Compress() {
    std::array<std::uint32_t, 80> w{};
    for (int i = 0; i < 16; ++i) {
      w[i] = (std::uint32_t{block_[4 * i]} << 24) | (std::uint32_t{block_[4 * i + 1]} << 16) |
             (std::uint32_t{block_[4 * i + 2]} << 8) | std::uint32_t{block_[4 * i + 3]};
    }
    for (int i = 16; i < 80; ++i) w[i] = Rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    std::uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4];
    for (int i = 0; i < 80; ++i) {
      std::uint32_t f, k;
      if (i < 20) {
        f = (b & c) | (~b & d), k = 0x5a827999;
      } else if (i < 40) {
        f = b ^ c ^ d, k = 0x6ed9eba1;
      } else if (i < 60) {
        f = (b & c) | (b & d) | (c & d), k = 0x8f1bbcdc;
      } else {
        f = b ^ c ^ d, k = 0xca62c1d6;
      }
      const std::uint32_t t = Rol(a, 5) + f + e + k + w[i];
      e = d, d = c, c = Rol(b, 30), b = a, a = t;
    }
    h_[0] += a, h_[1] += b, h_[2] += c, h_[3] += d, h_[4] += e;
    fill_ = 0;
  }

  std::array<std::uint32_t, 5> h_{0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0};
  std::array<unsigned char, 64> block_{};
  std::size_t fill_ = 0;
  std::uint64_t bits_ = 0;
};

// An error reply `e` from the server at `at` ("<what>: Redis at host:port").
Status FromErrorReply(std::string_view e, const std::string& at) {
  if (StartsWithWord(e, "NOAUTH")) {
    return PermissionDeniedError(at + " requires a password: give it in the URI "
                                      "(redis://[user]:PASSWORD@host:port), or with "
                                      "?password_file= or ?password_env=");
  }
  if (StartsWithWord(e, "WRONGPASS") || e.find("invalid password") != std::string_view::npos ||
      e.find("invalid username-password") != std::string_view::npos) {
    return PermissionDeniedError(at + " refused the login: wrong user name or password");
  }
  if (e.find("without any password configured") != std::string_view::npos) {
    return PermissionDeniedError(at + " has no password set, but the URI gives one: "
                                      "remove it or configure requirepass");
  }
  if (e.find("DB index is out of range") != std::string_view::npos) {
    return InvalidArgumentError(at + " has no such database (db index out of range: "
                                     "the server's 'databases' setting is the limit)");
  }
  if (StartsWithWord(e, "READONLY")) {
    return UnavailableError(at + " is a read-only replica, not the primary (a failover "
                                 "may be under way)");
  }
  if (StartsWithWord(e, "LOADING") || StartsWithWord(e, "MASTERDOWN") ||
      StartsWithWord(e, "BUSY") || StartsWithWord(e, "TRYAGAIN") ||
      StartsWithWord(e, "NOREPLICAS") || StartsWithWord(e, "CLUSTERDOWN") ||
      StartsWithWord(e, "OOM")) {
    return UnavailableError(at + " cannot serve now: " + std::string(e));
  }
  if (StartsWithWord(e, "MOVED") || StartsWithWord(e, "ASK")) {
    // A redis:// URI naming one node of a cluster (redis+cluster:// follows
    // redirections and never lets one through).
    return InvalidArgumentError(at + " is a Redis Cluster node that serves this key elsewhere ('" +
                                std::string(e.substr(0, 60)) +
                                "'): give the cluster as redis+cluster://host:port,host:port,...");
  }
  if (StartsWithWord(e, "CROSSSLOT")) {
    return InvalidArgumentError(at + " refused keys of different hash slots in one call: on a "
                                     "Redis Cluster a fenced write's keys must carry the lock "
                                     "key's hash tag (fence::Redis::HashTag)");
  }
  if (e.find("cluster support disabled") != std::string_view::npos) {
    return InvalidArgumentError(at + " is not a Redis Cluster node (cluster support disabled): "
                                     "use redis:// for one server, redis+sentinel:// with "
                                     "Sentinel");
  }
  if (e.find("Script attempted to access a non local key") != std::string_view::npos) {
    // A slot moved while a script ran and the script touched a key it had
    // not declared: the script stopped at that call, so its writes before
    // it were made and those after it were not (scripts do not roll back).
    // The outcome is unknown, as for a broken connection. dlock's scripts
    // declare every key on a cluster, so a node refuses them whole instead.
    return UnavailableError(at + " serves this key's slot no longer (it is being moved "
                                 "between nodes): " + std::string(e));
  }
  if (StartsWithWord(e, "NOPERM")) {
    return PermissionDeniedError(at + " refused a command or key this user may not use (the "
                                      "ACL dlock needs is in docs/backend-redis.md, \"Secured\"): " +
                                      std::string(e));
  }
  if (e.find("unknown command") != std::string_view::npos) {
    return UnavailableError(at + " lacks a command dlock needs (Redis 5 or later is "
                                 "required): " + std::string(e));
  }
  // Anything else means dlock sent something wrong: a bug.
  return InternalError(at + " rejected a dlock command: " + std::string(e));
}

// A failure hiredis reported on the connection (no reply, or a broken one).
Status FromContextFailure(const Failure& f, const std::string& at) {
  if (f.tls_refused) return PermissionDeniedError(at + ": TLS: " + f.text);
  if (f.not_tls) return UnavailableError(at + " " + f.text);
  switch (f.context_err) {
    case REDIS_ERR_EOF:
      if (f.partial_reply) {
        return UnavailableError(at + " closed the connection in the middle of a reply");
      }
      return UnavailableError(at + " closed the connection");
    case REDIS_ERR_PROTOCOL:
      return UnavailableError(at + " does not speak the Redis protocol (is it a Redis "
                                   "server?): " + f.text);
    case REDIS_ERR_IO: {
      const int err = f.saved_errno;
      if (err == EAGAIN || err == EWOULDBLOCK || err == ETIMEDOUT || err == EINPROGRESS) {
        std::string limit = f.timeout > milliseconds(0)
                                ? " within " + internal::FormatDuration(f.timeout)
                                : "";
        return UnavailableError(at + " did not answer" + limit +
                                " (server paused, overloaded, or not Redis?)");
      }
      if (err == ECONNREFUSED) {
        return UnavailableError(at + ": connection refused (is redis-server running there?)");
      }
      if (err == ECONNRESET || err == EPIPE) {
        return UnavailableError(at + ": connection reset by the server");
      }
      return UnavailableError(at + ": " + (f.text.empty() ? ErrnoText(err) : f.text));
    }
    case REDIS_ERR_OOM:
      return UnavailableError(at + ": out of memory in the Redis client");
    default:
      return UnavailableError(at + ": " + (f.text.empty() ? "connection failed" : f.text));
  }
}

}  // namespace

Status FromRedis(const Failure& f, std::string_view server, std::string_view what) {
  const std::string at = std::string(what) + ": Redis at " + std::string(server);
  if (f.error_reply) return FromErrorReply(f.text, at);
  if (f.odd_reply) {
    return UnavailableError(at + " answered oddly (expected " + f.text + ")");
  }
  return FromContextFailure(f, at);
}

Status ContextError(redisContext* c, int saved_errno, milliseconds timeout,
                    std::string_view server, std::string_view what) {
  Failure f;
  f.timeout = timeout;
  f.saved_errno = saved_errno;
  if (c == nullptr) {
    f.context_err = REDIS_ERR_OOM;
    return FromRedis(f, server, what);
  }
  f.context_err = c->err != 0 ? c->err : REDIS_ERR_IO;
  f.text = c->errstr;
  f.partial_reply =
      c->reader != nullptr && (c->reader->ridx >= 0 || c->reader->pos < c->reader->len);
  return FromRedis(f, server, what);
}

Status ReplyError(const redisReply* r, std::string_view server, std::string_view what) {
  Failure f;
  f.error_reply = true;
  f.text = ReplyString(r);
  return FromRedis(f, server, what);
}

Status OddReply(std::string_view expected, std::string_view server, std::string_view what) {
  Failure f;
  f.odd_reply = true;
  f.text = std::string(expected);
  return FromRedis(f, server, what);
}

std::string Endpoint::Text() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Result<std::vector<Endpoint>> ParseEndpoints(std::string_view hosts, int default_port,
                                             std::string_view what) {
  std::vector<Endpoint> out;
  auto bad = [&](std::string_view item, const std::string& why) {
    return InvalidArgumentError(std::string(what) + ": bad host '" + std::string(item) +
                                "': " + why + " (expected host:port, comma-separated)");
  };
  if (hosts.empty()) return InvalidArgumentError(std::string(what) + ": no host given");
  while (true) {
    const std::size_t comma = hosts.find(',');
    const std::string_view item = hosts.substr(0, comma);
    Endpoint e;
    e.port = default_port;
    std::string_view port_text;
    bool has_port = false;
    if (item.starts_with('[')) {
      const std::size_t close = item.find(']');
      if (close == std::string_view::npos) return bad(item, "unclosed '['");
      e.host = std::string(item.substr(1, close - 1));
      std::string_view rest = item.substr(close + 1);
      if (!rest.empty()) {
        if (rest.front() != ':') return bad(item, "junk after ']'");
        port_text = rest.substr(1);
        has_port = true;
      }
    } else {
      const std::size_t colon = item.rfind(':');
      if (colon != std::string_view::npos && item.find(':') != colon) {
        return bad(item, "an IPv6 address needs brackets");
      }
      e.host = std::string(item.substr(0, colon));
      if (colon != std::string_view::npos) {
        port_text = item.substr(colon + 1);
        has_port = true;
      }
    }
    if (e.host.empty()) return bad(item, "the host name is empty");
    if (has_port) {
      int port = 0;
      auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
      if (ec != std::errc() || p != port_text.data() + port_text.size() || port < 1 ||
          port > 65535) {
        return bad(item, "the port must be a number from 1 to 65535");
      }
      e.port = port;
    }
    out.push_back(std::move(e));
    if (comma == std::string_view::npos) break;
    hosts.remove_prefix(comma + 1);
  }
  return out;
}

std::string Sha1Hex(std::string_view data) {
  Sha1 sha;
  sha.Update(data);
  return sha.HexDigest();
}

Script::Script(std::string t) : text(std::move(t)), sha1(Sha1Hex(text)) {}

timeval ToTimeval(milliseconds ms) {
  if (ms < milliseconds(1)) ms = milliseconds(1);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

bool IsNoScript(const redisReply* r) {
  return r != nullptr && r->type == REDIS_REPLY_ERROR &&
         StartsWithWord(std::string_view(r->str, r->len), "NOSCRIPT");
}

std::string ReplyString(const redisReply* r) {
  if (r == nullptr || r->str == nullptr) return {};
  return std::string(r->str, r->len);
}

bool ReplyInt(const redisReply* r, long long* out) {
  if (r == nullptr) return false;
  if (r->type == REDIS_REPLY_INTEGER) {
    *out = r->integer;
    return true;
  }
  if (r->type != REDIS_REPLY_STRING || r->len == 0) return false;
  auto [p, ec] = std::from_chars(r->str, r->str + r->len, *out);
  return ec == std::errc() && p == r->str + r->len;
}

namespace {

// The commands that log in and check the server, sent with the connect.
Result<std::vector<Command>> HelloCommands(const ConnectOptions& options, bool require_primary,
                                           bool verify, std::string_view what) {
  std::vector<Command> hello;
  if (options.has_password) {
    if (options.user.empty()) {
      hello.push_back({"AUTH", options.password});
    } else {
      hello.push_back({"AUTH", options.user, options.password});
    }
  } else if (!options.user.empty()) {
    return InvalidArgumentError(std::string(what) + ": the URI names user '" + options.user +
                                "' but no password (redis://user:password@host)");
  }
  if (options.db != 0) hello.push_back({"SELECT", std::to_string(options.db)});
  if (require_primary) hello.push_back({"ROLE"});
  // Over TLS always one round trip: a TLS 1.3 server refuses a client
  // certificate only after the handshake, and that must show now.
  if (hello.empty() && (verify || options.tls.enabled)) hello.push_back({"PING"});
  return hello;
}

Status CheckHello(const std::vector<Command>& hello, const std::vector<ReplyPtr>& replies,
                  const std::string& server, std::string_view what) {
  for (std::size_t i = 0; i < hello.size(); ++i) {
    const redisReply* r = replies[i].get();
    if (r->type == REDIS_REPLY_ERROR) return ReplyError(r, server, what);
    if (hello[i][0] == "ROLE") {
      if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
        return OddReply("a ROLE reply", server, what);
      }
      const std::string role = ReplyString(r->element[0]);
      if (role != "master") {
        return UnavailableError(std::string(what) + ": Redis at " + server + " is a " + role +
                                ", not the primary (a failover may be under way)");
      }
    } else if (hello[i][0] == "PING" &&
               !(r->type == REDIS_REPLY_STATUS && ReplyString(r) == "PONG")) {
      return OddReply("PONG", server, what);
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Connection>> Connection::Open(const Endpoint& endpoint,
                                                     const ConnectOptions& options,
                                                     bool require_primary, bool verify,
                                                     std::string_view what) {
  const std::string server = endpoint.Text();
  DLOCK_ASSIGN_OR_RETURN(std::vector<Command> hello,
                         HelloCommands(options, require_primary, verify, what));
  DLOCK_ASSIGN_OR_RETURN(auto transport,
                         Transport::Open(endpoint, options.tls, options.connect_timeout, what));
  std::unique_ptr<Connection> conn(new Connection(std::move(transport), server));
  if (hello.empty()) return conn;
  auto replies = conn->Pipeline(hello, options.connect_timeout, what);
  if (!replies.ok()) {
    // A TLS port closes on plaintext at once (or answers with a TLS alert).
    const Failure& f = conn->transport_->failure();
    if (!options.tls.enabled &&
        (f.context_err == REDIS_ERR_EOF || f.context_err == REDIS_ERR_PROTOCOL ||
         f.saved_errno == ECONNRESET)) {
      return Status(replies.status().code(),
                    replies.status().message() + " (a TLS port? then use rediss://)");
    }
    return replies.status();
  }
  DLOCK_RETURN_IF_ERROR(CheckHello(hello, *replies, server, what));
  return conn;
}

bool Connection::PeerClosed(milliseconds idle) {
  if (std::chrono::steady_clock::now() - last_call_ < idle) return false;
  return transport_->PeerClosed();
}

void Connection::SetTimeout(milliseconds timeout) {
  if (timeout == timeout_) return;
  transport_->SetTimeout(timeout);
  timeout_ = timeout;
}

Status Connection::Broken(std::string_view what) {
  broken_ = true;
  return FromRedis(transport_->failure(), server_, what);
}

Status Connection::Send(std::span<const Command> commands, milliseconds timeout,
                        std::string_view what) {
  if (broken_) {
    return UnavailableError(std::string(what) + ": connection to " + server_ + " is broken");
  }
  SetTimeout(timeout);
  for (const Command& command : commands) transport_->Append(command);
  if (!transport_->Flush()) return Broken(what);
  return Status::Ok();
}

Result<ReplyPtr> Connection::Receive(std::string_view what) {
  ReplyPtr reply;
  if (!transport_->Get(&reply)) return Broken(what);
  last_call_ = std::chrono::steady_clock::now();
  return reply;
}

Result<std::vector<ReplyPtr>> Connection::ReceiveAvailable(std::string_view what) {
  std::vector<ReplyPtr> replies;
  if (!transport_->ReadAvailable(&replies)) return Broken(what);
  return replies;
}

Status Connection::Abandon(std::string_view what) {
  broken_ = true;
  return UnavailableError(std::string(what) + ": Redis at " + server_ +
                          " did not answer before the call's deadline (server paused, "
                          "overloaded, or unreachable?)");
}

Result<std::vector<ReplyPtr>> Connection::Pipeline(std::span<const Command> commands,
                                                   milliseconds timeout, std::string_view what) {
  DLOCK_RETURN_IF_ERROR(Send(commands, timeout, what));
  std::vector<ReplyPtr> replies;
  replies.reserve(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) {
    DLOCK_ASSIGN_OR_RETURN(ReplyPtr reply, Receive(what));
    replies.push_back(std::move(reply));
  }
  return replies;
}

Result<ReplyPtr> Connection::Call(const Command& command, milliseconds timeout,
                                  std::string_view what) {
  DLOCK_ASSIGN_OR_RETURN(auto replies,
                         Pipeline(std::span<const Command>(&command, 1), timeout, what));
  return std::move(replies[0]);
}

Result<std::vector<ReplyPtr>> Connection::Eval(const Script& script,
                                               std::span<const std::string> keys,
                                               std::span<const std::string> args,
                                               std::span<const Command> extra,
                                               milliseconds timeout, std::string_view what) {
  return EvalThrough([&](std::span<const Command> c) { return Pipeline(c, timeout, what); }, script,
                  keys, args, extra);
}

Result<std::vector<ReplyPtr>> EvalOnContext(redisContext* c, const Script& script,
                                            std::span<const std::string> keys,
                                            std::span<const std::string> args,
                                            std::string_view what) {
  std::string server = "(caller's connection)";
  if (c != nullptr && c->tcp.host != nullptr) {
    server = Endpoint{c->tcp.host, c->tcp.port}.Text();
  }
  if (c == nullptr) return InvalidArgumentError(std::string(what) + ": null redisContext");
  if (c->err != 0) return ContextError(c, 0, milliseconds(0), server, what);
  return EvalThrough(
      [&](std::span<const Command> cmds) {
        return PipelineOn(c, cmds, milliseconds(0), server, what);
      },
      script, keys, args, {});
}

}  // namespace dlock::redis
