#include "backends/redis/redis_backend.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <functional>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "backends/redis/redis_conn.h"
#include "backends/redis/redis_keys.h"
#include "backends/redis/redis_scripts.h"
#include "backends/redis/redis_subscriber.h"
#include "backends/redis/redis_uri.h"
#include "core/duration.h"

namespace dlock::redis {
namespace {

using std::chrono::milliseconds;

constexpr const char* kRedisForm = "redis://[user:password@]host[:6379][/db]";
constexpr const char* kSentinelForm =
    "redis+sentinel://[user:password@]host[:26379],host,.../master-name[?db=N]";
constexpr std::size_t kMaxIdleConnections = 8;
constexpr std::size_t kListBatch = 256;
// A waiter's place in the queue lasts at most kPlaceTtl after its last
// attempt (less if the core asks for less), and a waiting client attempts
// again every kPlaceRefresh: a waiter that died or hangs at the head holds
// the others up for at most kPlaceTtl. (The core's own queue_ttl, 3 s, would
// let a dead head stall the queue that long.)
constexpr milliseconds kPlaceTtl{1000};
constexpr milliseconds kPlaceRefresh{300};

struct RedisOptions {
  ConnectOptions connect;
  // The server for redis://; the sentinels for redis+sentinel://.
  std::vector<Endpoint> endpoints;
  bool sentinel = false;
  std::string master_name;
  milliseconds timeout{5000};  // one command's reply
  int wait_replicas = 0;
  milliseconds wait_timeout{1000};
  std::string describe;
};

Status ParseCommon(const internal::Uri& uri, RedisOptions* o) {
  DLOCK_ASSIGN_OR_RETURN(o->timeout, DurationParam(uri, "timeout", milliseconds(5000),
                                                   milliseconds(1), std::chrono::hours(1)));
  DLOCK_ASSIGN_OR_RETURN(o->wait_timeout, DurationParam(uri, "wait_timeout", milliseconds(1000),
                                                        milliseconds(1), std::chrono::minutes(10)));
  if (const std::string* n = uri.Param("wait_replicas")) {
    int v = -1;
    auto [p, ec] = std::from_chars(n->data(), n->data() + n->size(), v);
    if (n->empty() || ec != std::errc() || p != n->data() + n->size() || v < 0 || v > 1000) {
      return InvalidArgumentError("bad wait_replicas '" + *n + "' in " + uri.Redacted() +
                                  ": expected a number of replicas, 0 to 1000");
    }
    o->wait_replicas = v;
  }
  o->describe = uri.Redacted();
  return Status::Ok();
}

Result<RedisOptions> RedisOptionsFromUri(const internal::Uri& uri,
                                         const internal::BackendParams& params) {
  RedisOptions o;
  o.connect = BaseConnectOptions(uri, params);
  DLOCK_RETURN_IF_ERROR(uri.CheckParams({"timeout", "wait_replicas", "wait_timeout"}));
  if (uri.hosts.find(',') != std::string::npos) {
    return BadUri(uri, "redis:// takes one server; for several use redis+sentinel:// (one "
                       "primary found through Sentinel) or redlock:// (independent nodes)",
                  kRedisForm);
  }
  DLOCK_ASSIGN_OR_RETURN(o.endpoints,
                         ParseEndpoints(uri.hosts, 6379, "redis URI " + uri.Redacted()));
  std::string_view path = uri.path;
  if (path.starts_with('/')) path.remove_prefix(1);
  if (!path.empty()) {
    DLOCK_ASSIGN_OR_RETURN(o.connect.db, ParseDb(path, uri));
  }
  DLOCK_RETURN_IF_ERROR(ParseCommon(uri, &o));
  return o;
}

Result<RedisOptions> SentinelOptionsFromUri(const internal::Uri& uri,
                                            const internal::BackendParams& params) {
  RedisOptions o;
  o.sentinel = true;
  o.connect = BaseConnectOptions(uri, params);
  DLOCK_RETURN_IF_ERROR(uri.CheckParams({"db", "timeout", "wait_replicas", "wait_timeout"}));
  DLOCK_ASSIGN_OR_RETURN(o.endpoints,
                         ParseEndpoints(uri.hosts, 26379, "redis+sentinel URI " + uri.Redacted()));
  std::string_view path = uri.path;
  if (path.starts_with('/')) path.remove_prefix(1);
  if (path.empty() || path.find('/') != std::string_view::npos) {
    return BadUri(uri, "the path must be the master name Sentinel monitors", kSentinelForm);
  }
  o.master_name = std::string(path);
  if (const std::string* db = uri.Param("db")) {
    DLOCK_ASSIGN_OR_RETURN(o.connect.db, ParseDb(*db, uri));
  }
  DLOCK_RETURN_IF_ERROR(ParseCommon(uri, &o));
  return o;
}

Result<FencingToken> ParseToken(const redisReply* r) {
  long long v = 0;
  if (!ReplyInt(r, &v) || v <= 0) return InternalError("token");
  return static_cast<FencingToken>(v);
}

std::string Quoted(std::string_view key) { return "'" + std::string(key) + "'"; }

// What a grant on release's message, "<owner>:<token>:<server ms>", says
// after "<owner>:": {token, time}, or nothing if it is not that.
std::optional<std::pair<FencingToken, long long>> ParseGrant(std::string_view text) {
  const char* p = text.data();
  const char* end = text.data() + text.size();
  FencingToken token = 0;
  long long at = 0;
  auto [q, ec] = std::from_chars(p, end, token);
  if (ec != std::errc() || token == 0 || q == end || *q != ':') return std::nullopt;
  auto [r, ec2] = std::from_chars(q + 1, end, at);
  if (ec2 != std::errc() || r != end || at <= 0) return std::nullopt;
  return std::make_pair(token, at);
}

// What a refused attempt leaves for the waiter's next WaitForRelease on the
// same thread, and what that wait leaves for the next TryAcquire (the core
// calls TryAcquire, then WaitForRelease, then TryAcquire, on the caller's
// thread; see backend.h).
struct PendingWait {
  std::uint64_t backend = 0;  // RedisBackend::id_ (never reused, unlike an address)
  std::string channel;
  std::string owner;
  std::optional<Subscriber::Ticket> ticket;
  TimePoint sent{};         // when the refused attempt was sent (client clock)
  long long refused_at = 0; // when the server refused it (server ms)
  // Set by WaitForRelease when a release granted the key to this waiter
  // (docs/backend-redis.md, "Grant on release"): its token.
  FencingToken granted = 0;
};
thread_local PendingWait tls_pending;
std::atomic<std::uint64_t> next_backend_id{1};

class RedisBackend final : public Backend {
 public:
  RedisBackend(RedisOptions options, std::shared_ptr<Clock> clock)
      : options_(std::move(options)), clock_(clock ? std::move(clock) : DefaultClock()) {}
  ~RedisBackend() override { subscriber_.reset(); }

  // Connects once, so that a wrong address, password or database is
  // reported by Open.
  Status Verify() {
    DLOCK_ASSIGN_OR_RETURN(auto conn, Connect("connect", /*verify=*/true));
    Give(std::move(conn), generation());
    return Status::Ok();
  }

  Result<Attempt> TryAcquire(const LeaseRequest& request) override;
  Status Release(std::string_view key, const OwnerId& owner) override;
  std::vector<Status> Renew(std::span<const LeaseRequest> leases) override;
  Result<std::vector<HolderInfo>> List(std::string_view prefix) override;
  Result<std::vector<WaiterInfo>> Waiters(std::string_view prefix) override;
  bool SupportsLockDelay() const override { return true; }
  bool SupportsSharing() const override { return true; }
  bool WaitForRelease(std::string_view key, TimePoint until, std::stop_token stop) override;
  std::string Describe() const override { return options_.describe; }
  Status Ping() override;
  Result<bool> IsDone(std::string_view key) override;
  Status MarkDone(std::string_view key, const OwnerId& owner) override;

 private:
  // A pooled connection, returned on scope exit unless broken.
  class Handle {
   public:
    Handle(RedisBackend* b, std::unique_ptr<Connection> c, std::uint64_t gen)
        : b_(b), c_(std::move(c)), gen_(gen) {}
    Handle(Handle&&) = default;
    ~Handle() {
      if (c_) b_->Give(std::move(c_), gen_);
    }
    Connection* operator->() { return c_.get(); }

   private:
    RedisBackend* b_;
    std::unique_ptr<Connection> c_;
    std::uint64_t gen_;
  };

  std::uint64_t generation() {
    std::lock_guard lock(pool_mu_);
    return generation_;
  }
  Result<std::unique_ptr<Connection>> Connect(std::string_view what, bool verify);
  Result<std::unique_ptr<Connection>> ConnectViaSentinel(std::string_view what);
  Result<Handle> Take(std::string_view what);
  void Give(std::unique_ptr<Connection> c, std::uint64_t gen);
  Subscriber& EnsureSubscriber();
  // The names SCAN MATCH `pattern` finds, sorted, without duplicates.
  // For List and Waiters: SCANs `pattern`, runs `script` over the names in
  // batches, checks each reply row of `fields` (the first is the 1-based
  // index of its name in the batch) and hands `row` those whose key starts
  // with `prefix`.
  using RowFn = std::function<Status(const std::string& key, const redisReply* const* fields,
                                     const std::string& server)>;
  Status ForEachRow(std::string_view prefix, const std::string& pattern,
                    std::optional<std::string> (*key_of)(std::string_view),
                    const Script& script, std::size_t fields, const std::string& rows_noun,
                    const std::string& name_noun, const std::string& what, const RowFn& row);
  Result<std::vector<std::string>> Scan(Handle& conn, const std::string& pattern,
                                        const std::string& what);

  const RedisOptions options_;
  const std::shared_ptr<Clock> clock_;
  const std::uint64_t id_ = next_backend_id.fetch_add(1);

  std::mutex pool_mu_;
  std::vector<std::unique_ptr<Connection>> idle_;  // guarded by pool_mu_
  // Bumped when a connection breaks: the idle ones may lead to a dead or
  // demoted primary too, so they are dropped rather than reused.
  std::uint64_t generation_ = 0;

  std::mutex subscriber_mu_;
  std::unique_ptr<Subscriber> subscriber_;  // made at the first wait
};

Result<std::unique_ptr<Connection>> RedisBackend::ConnectViaSentinel(std::string_view what) {
  ConnectOptions to_sentinel;
  to_sentinel.connect_timeout = options_.connect.connect_timeout;
  std::string errors;
  int unknown = 0, answered = 0;
  for (const Endpoint& s : options_.endpoints) {
    auto sentinel = Connection::Open(s, to_sentinel, false, false, what);
    if (!sentinel.ok()) {
      errors += "; " + sentinel.status().message();
      continue;
    }
    auto reply = (*sentinel)->Call({"SENTINEL", "get-master-addr-by-name", options_.master_name},
                                   options_.connect.connect_timeout, what);
    if (!reply.ok()) {
      errors += "; " + reply.status().message();
      continue;
    }
    const redisReply* r = reply->get();
    if (r->type == REDIS_REPLY_ERROR) {
      errors += "; " + ReplyError(r, s.Text(), "ask sentinel").message();
      continue;
    }
    ++answered;
    if (r->type == REDIS_REPLY_NIL) {
      ++unknown;
      continue;
    }
    long long port = 0;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !ReplyInt(r->element[1], &port)) {
      errors += "; " + OddReply("a master address", s.Text(), what).message();
      continue;
    }
    Endpoint primary{ReplyString(r->element[0]), static_cast<int>(port)};
    auto conn = Connection::Open(primary, options_.connect, /*require_primary=*/true, false,
                                 std::string(what) + " (primary named by sentinel " + s.Text() + ")");
    if (conn.ok()) return conn;
    // A wrong password or database is the same on every server.
    if (conn.status().code() == StatusCode::kInvalidArgument) return conn.status();
    errors += "; " + conn.status().message();
  }
  if (answered > 0 && unknown == answered) {
    return InvalidArgumentError(std::string(what) + ": no sentinel of " + options_.describe +
                                " monitors a master named '" + options_.master_name + "'");
  }
  return UnavailableError(std::string(what) + ": no sentinel of " + options_.describe +
                          " led to a reachable primary for '" + options_.master_name + "'" +
                          errors);
}

Result<std::unique_ptr<Connection>> RedisBackend::Connect(std::string_view what, bool verify) {
  if (options_.sentinel) return ConnectViaSentinel(what);
  return Connection::Open(options_.endpoints[0], options_.connect, false, verify, what);
}

Result<RedisBackend::Handle> RedisBackend::Take(std::string_view what) {
  std::uint64_t gen;
  {
    std::lock_guard lock(pool_mu_);
    gen = generation_;
    while (!idle_.empty()) {
      std::unique_ptr<Connection> c = std::move(idle_.back());
      idle_.pop_back();
      // Closed by the server while idle (restart, failover, CLIENT KILL, idle
      // timeout): reconnect now rather than fail this call. The others in the
      // pool probably lead to the same dead server.
      if (c->PeerClosed(milliseconds(20))) {
        idle_.clear();
        ++generation_;
        gen = generation_;
        break;
      }
      return Handle(this, std::move(c), gen);
    }
  }
  DLOCK_ASSIGN_OR_RETURN(auto c, Connect(what, false));
  return Handle(this, std::move(c), gen);
}

void RedisBackend::Give(std::unique_ptr<Connection> c, std::uint64_t gen) {
  std::lock_guard lock(pool_mu_);
  if (c->broken()) {
    if (gen == generation_) {
      ++generation_;
      idle_.clear();
    }
    return;
  }
  if (gen == generation_ && idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(c));
}

Subscriber& RedisBackend::EnsureSubscriber() {
  std::lock_guard lock(subscriber_mu_);
  if (!subscriber_) {
    subscriber_ = std::make_unique<Subscriber>(
        [this]() { return Connect("subscribe for wake-ups", false); });
  }
  return *subscriber_;
}

Result<Attempt> RedisBackend::TryAcquire(const LeaseRequest& request) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(request.key));
  DLOCK_RETURN_IF_ERROR(ValidateTtl(request.ttl));
  if (request.owner.empty()) return InvalidArgumentError("acquire: the owner id is empty");
  if (request.queue_ttl < milliseconds(0)) {
    return InvalidArgumentError("acquire: queue_ttl is negative");
  }
  if (request.lock_delay < milliseconds(0) || request.lock_delay > kMaxTtl) {
    return InvalidArgumentError("acquire: lock_delay is out of range");
  }
  if (request.limit == 0) return InvalidArgumentError("acquire: limit is 0");
  DLOCK_RETURN_IF_ERROR(ValidateLabel(request.label));
  const std::string channel = WakeChannel(options_.connect.db, request.key);
  const PendingWait pending = std::exchange(tls_pending, {});
  if (pending.granted != 0 && pending.backend == id_ && pending.channel == channel &&
      pending.owner == request.owner.ToString()) {
    // A release granted the key to this waiter after its last refused
    // attempt was sent: the lease counts from that send. Taken only while
    // most of the ttl is left; otherwise an attempt (which finds the key
    // ours and renews it) tells more.
    if (clock_->Now() - pending.sent < request.ttl / 4) {
      return Attempt{true, pending.granted, milliseconds(0), milliseconds(0), pending.sent};
    }
  }
  const std::string what = "acquire " + Quoted(request.key);
  // As few arguments as possible (each costs the server on every call); the
  // script names the key's other Redis keys from the lock's.
  const std::string keys[] = {LockName(request.key), CounterName(request.key),
                              QueueName(request.key)};
  const std::string ttl = std::to_string(request.ttl.count());
  const std::string args[] = {
      request.owner.ToString() + "|" + ttl + "||" + request.label, ttl,
      std::to_string(request.limit) + "|" + std::to_string(request.lock_delay.count()),
      std::to_string(std::min(request.queue_ttl, kPlaceTtl).count()), channel};
  std::vector<Command> extra;
  milliseconds timeout = options_.timeout;
  if (options_.wait_replicas > 0) {
    extra.push_back({"WAIT", std::to_string(options_.wait_replicas),
                     std::to_string(options_.wait_timeout.count())});
    timeout += options_.wait_timeout;
  }
  // Both taken before the attempt is sent: anything published after the
  // ticket wakes the waiter (redis_subscriber.h), and a grant that follows
  // this attempt's refusal follows `sent`.
  const TimePoint sent = clock_->Now();
  std::optional<Subscriber::Ticket> ticket;
  if (request.queue_ttl > milliseconds(0)) {
    std::lock_guard lock(subscriber_mu_);
    if (subscriber_) ticket = subscriber_->Current(channel);
  }

  auto conn = Take(what);
  if (!conn.ok()) return conn.status();
  auto replies = (*conn)->Eval(scripts::Acquire(), keys, args, extra, timeout, what);
  if (!replies.ok()) return replies.status();
  const redisReply* r = (*replies)[0].get();
  if (r->type == REDIS_REPLY_ERROR) return ReplyError(r, (*conn)->server(), what);
  long long granted = 0, left = 0, server_now = 0;
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->elements > 4 ||
      !ReplyInt(r->element[0], &granted) || !ReplyInt(r->element[2], &left) ||
      (r->elements == 4 && !ReplyInt(r->element[3], &server_now))) {
    return OddReply("the acquire script's {granted, token, ttl[, time]}", (*conn)->server(), what);
  }
  if (granted == 1) {
    auto token = ParseToken(r->element[1]);
    if (!token.ok()) return OddReply("a positive token", (*conn)->server(), what);
    if (options_.wait_replicas > 0) {
      long long confirmed = 0;
      const redisReply* w = (*replies)[1].get();
      if (w->type == REDIS_REPLY_ERROR) return ReplyError(w, (*conn)->server(), what);
      if (!ReplyInt(w, &confirmed)) return OddReply("WAIT's replica count", (*conn)->server(), what);
      if (confirmed < options_.wait_replicas) {
        // The grant may not survive a failover: not granted as far as the
        // caller knows. The core retries with the same owner (which gets the
        // same token, and WAITs again) or releases when it gives up.
        return UnavailableError(what + ": only " + std::to_string(confirmed) + " of " +
                                std::to_string(options_.wait_replicas) +
                                " replicas confirmed the grant within " +
                                internal::FormatDuration(options_.wait_timeout) +
                                " (wait_replicas); it could be lost in a failover");
      }
    }
    return Attempt{true, *token, milliseconds(0)};
  }
  if (request.queue_ttl > milliseconds(0)) {
    tls_pending = {id_, channel, request.owner.ToString(), ticket, sent, server_now};
  }
  return Attempt{false, 0, milliseconds(std::max<long long>(0, left))};
}

bool RedisBackend::WaitForRelease(std::string_view key, TimePoint until, std::stop_token stop) {
  const std::string channel = WakeChannel(options_.connect.db, key);
  PendingWait pending = std::exchange(tls_pending, {});
  if (pending.backend != id_ || pending.channel != channel) pending = {};
  Subscriber& subscriber = EnsureSubscriber();
  // Back for another attempt by kPlaceRefresh at the latest: it keeps this
  // waiter's place, and drops a dead head's once its place expired.
  const auto left = std::clamp<Duration>(until - clock_->Now(), Duration::zero(), kPlaceRefresh);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::nanoseconds>(left);
  std::string message;
  const Subscriber::Outcome outcome =
      subscriber.Wait(channel, pending.ticket, pending.owner, deadline, std::move(stop), &message);
  // "owner:token:time": the key is this waiter's. Believed only when the
  // grant's time (server ms) is not before the refusal of the attempt the
  // wait follows, so that the lease may count from that attempt's send. (In
  // the same millisecond the grant came after the refusal: a grant before it
  // would still have held, a ttl being >= 10 ms, and the attempt would have
  // found the key its own.) Not with wait_replicas, whose grants an attempt
  // must confirm with WAIT.
  const auto grant = ParseGrant(message);
  if (grant && options_.wait_replicas == 0 && pending.refused_at > 0 &&
      grant->second >= pending.refused_at) {
    pending.granted = grant->first;
    tls_pending = std::move(pending);
  }
  return outcome != Subscriber::Outcome::kDown;
}

Status RedisBackend::Ping() {
  DLOCK_ASSIGN_OR_RETURN(Handle conn, Take("ping"));
  DLOCK_ASSIGN_OR_RETURN(auto replies,
                         conn->Eval(scripts::Ping(), {}, {}, {}, options_.timeout, "ping"));
  const redisReply* r = replies[0].get();
  if (r->type == REDIS_REPLY_ERROR) return ReplyError(r, conn->server(), "ping");
  return Status::Ok();
}

Result<bool> RedisBackend::IsDone(std::string_view key) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  const std::string what = "read the run-once record of " + Quoted(key);
  DLOCK_ASSIGN_OR_RETURN(Handle conn, Take(what));
  DLOCK_ASSIGN_OR_RETURN(ReplyPtr reply,
                         conn->Call({"EXISTS", DoneName(key)}, options_.timeout, what));
  if (reply->type == REDIS_REPLY_ERROR) return ReplyError(reply.get(), conn->server(), what);
  if (reply->type != REDIS_REPLY_INTEGER) return OddReply("an EXISTS count", conn->server(), what);
  return reply->integer > 0;
}

Status RedisBackend::MarkDone(std::string_view key, const OwnerId& owner) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  const std::string what = "mark " + Quoted(key) + " done";
  const std::string keys[] = {LockName(key), CounterName(key), DoneName(key)};
  const std::string args[] = {owner.ToString()};
  std::vector<Command> extra;
  milliseconds timeout = options_.timeout;
  if (options_.wait_replicas > 0) {
    extra.push_back({"WAIT", std::to_string(options_.wait_replicas),
                     std::to_string(options_.wait_timeout.count())});
    timeout += options_.wait_timeout;
  }
  DLOCK_ASSIGN_OR_RETURN(Handle conn, Take(what));
  DLOCK_ASSIGN_OR_RETURN(auto replies,
                         conn->Eval(scripts::MarkDone(), keys, args, extra, timeout, what));
  const redisReply* r = replies[0].get();
  if (r->type == REDIS_REPLY_ERROR) return ReplyError(r, conn->server(), what);
  long long marked = 0;
  if (!ReplyInt(r, &marked)) return OddReply("the mark-done script's result", conn->server(), what);
  if (marked != 1) return NotOwnerError(what + ": the lock is no longer held by this owner");
  if (options_.wait_replicas > 0) {
    long long confirmed = 0;
    if (!ReplyInt(replies[1].get(), &confirmed) || confirmed < options_.wait_replicas) {
      return UnavailableError(what + ": fewer than " + std::to_string(options_.wait_replicas) +
                              " replicas confirmed the record (wait_replicas)");
    }
  }
  return Status::Ok();
}

Status RedisBackend::Release(std::string_view key, const OwnerId& owner) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  const std::string what = "release " + Quoted(key);
  const std::string keys[] = {LockName(key), QueueName(key)};
  const std::string args[] = {owner.ToString(), WakeChannel(options_.connect.db, key)};
  DLOCK_ASSIGN_OR_RETURN(Handle conn, Take(what));
  DLOCK_ASSIGN_OR_RETURN(auto replies,
                         conn->Eval(scripts::Release(), keys, args, {}, options_.timeout, what));
  const redisReply* r = replies[0].get();
  if (r->type == REDIS_REPLY_ERROR) return ReplyError(r, conn->server(), what);
  long long result = 0;
  if (!ReplyInt(r, &result)) return OddReply("the release script's result", conn->server(), what);
  if (result < 0) return NotOwnerError(what + ": the lock is held by another owner");
  return Status::Ok();
}

std::vector<Status> RedisBackend::Renew(std::span<const LeaseRequest> leases) {
  std::vector<Status> result(leases.size());
  std::vector<std::size_t> index;  // leases[index[i]] is the script's KEYS[i+1]
  std::vector<std::string> keys, args;
  milliseconds shortest = options_.timeout * 3;
  for (std::size_t i = 0; i < leases.size(); ++i) {
    result[i] = ValidateKey(leases[i].key);
    if (result[i].ok()) result[i] = ValidateTtl(leases[i].ttl);
    if (!result[i].ok()) continue;
    index.push_back(i);
    keys.push_back(LockName(leases[i].key));
    args.push_back(leases[i].owner.ToString());
    args.push_back(std::to_string(leases[i].ttl.count()));
    shortest = std::min(shortest, leases[i].ttl);
  }
  if (index.empty()) return result;
  auto fail_all = [&](const Status& error) {
    for (std::size_t i : index) result[i] = error;
    return result;
  };
  // A renewal answered after a third of the TTL is of little use, and a
  // renewal thread stuck longer would delay loss detection.
  const milliseconds timeout = std::clamp(shortest / 3, milliseconds(1), options_.timeout);
  auto conn = Take("renew");
  if (!conn.ok()) return fail_all(conn.status());
  auto replies = (*conn)->Eval(scripts::Renew(), keys, args, {}, timeout, "renew");
  if (!replies.ok()) return fail_all(replies.status());
  const redisReply* r = (*replies)[0].get();
  if (r->type == REDIS_REPLY_ERROR) return fail_all(ReplyError(r, (*conn)->server(), "renew"));
  if (r->type != REDIS_REPLY_ARRAY || r->elements != index.size()) {
    return fail_all(OddReply("one renewal result per lease", (*conn)->server(), "renew"));
  }
  for (std::size_t j = 0; j < index.size(); ++j) {
    long long ok = 0;
    ReplyInt(r->element[j], &ok);
    if (ok != 1) {
      result[index[j]] = NotOwnerError("lease on key " + Quoted(leases[index[j]].key) +
                                       " is no longer held by this owner");
    }
  }
  return result;
}

Result<std::vector<std::string>> RedisBackend::Scan(Handle& conn, const std::string& pattern,
                                                    const std::string& what) {
  std::vector<std::string> names;
  std::string cursor = "0";
  do {
    DLOCK_ASSIGN_OR_RETURN(
        ReplyPtr reply,
        conn->Call({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}, options_.timeout, what));
    const redisReply* r = reply.get();
    if (r->type == REDIS_REPLY_ERROR) return ReplyError(r, conn->server(), what);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[1]->type != REDIS_REPLY_ARRAY) {
      return OddReply("a SCAN reply", conn->server(), what);
    }
    cursor = ReplyString(r->element[0]);
    for (std::size_t i = 0; i < r->element[1]->elements; ++i) {
      names.push_back(ReplyString(r->element[1]->element[i]));
    }
  } while (cursor != "0");
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

// A number the List or Waiters script returned as a decimal string.
long long ReplyNumber(const redisReply* r, long long otherwise) {
  long long v = 0;
  return ReplyInt(r, &v) ? v : otherwise;
}

Status RedisBackend::ForEachRow(std::string_view prefix, const std::string& pattern,
                                std::optional<std::string> (*key_of)(std::string_view),
                                const Script& script, std::size_t fields,
                                const std::string& rows_noun, const std::string& name_noun,
                                const std::string& what, const RowFn& row) {
  DLOCK_ASSIGN_OR_RETURN(Handle conn, Take(what));
  DLOCK_ASSIGN_OR_RETURN(const std::vector<std::string> names, Scan(conn, pattern, what));
  for (std::size_t start = 0; start < names.size(); start += kListBatch) {
    std::vector<std::string> batch;
    std::vector<std::optional<std::string>> batch_keys;
    for (std::size_t i = start; i < std::min(names.size(), start + kListBatch); ++i) {
      batch.push_back(names[i]);
      batch_keys.push_back(key_of(names[i]));
    }
    DLOCK_ASSIGN_OR_RETURN(auto replies, conn->Eval(script, batch, {}, {}, options_.timeout, what));
    const redisReply* r = replies[0].get();
    if (r->type == REDIS_REPLY_ERROR) return ReplyError(r, conn->server(), what);
    if (r->type != REDIS_REPLY_ARRAY || r->elements % fields != 0) {
      return OddReply(rows_noun + " of " + std::to_string(fields) + " fields", conn->server(),
                      what);
    }
    for (std::size_t i = 0; i < r->elements; i += fields) {
      const redisReply* const* f = r->element + i;
      const long long index = ReplyNumber(f[0], 0);
      if (index < 1 || static_cast<std::size_t>(index) > batch_keys.size()) {
        return OddReply("a " + name_noun + " index", conn->server(), what);
      }
      const auto& key = batch_keys[index - 1];
      if (!key || !key->starts_with(prefix)) continue;
      DLOCK_RETURN_IF_ERROR(row(*key, f, conn->server()));
    }
  }
  return Status::Ok();
}

Result<std::vector<HolderInfo>> RedisBackend::List(std::string_view prefix) {
  const std::string what = "list " + Quoted(prefix);
  std::vector<HolderInfo> holders;
  // Fields: see scripts::List.
  Status s = ForEachRow(
      prefix, LockPattern(prefix), &KeyFromLockName, scripts::List(), 8, "holdings", "lock", what,
      [&](const std::string& key, const redisReply* const* f, const std::string& server) {
        const long long pttl = ReplyNumber(f[2], 0);
        if (pttl <= 0) return Status::Ok();
        auto owner = OwnerId::Parse(ReplyString(f[1]));
        const long long token = ReplyNumber(f[3], 0);
        if (!owner.ok() || token <= 0) {
          return InternalError(what + ": lock of " + Quoted(key) + " on " + server +
                               " holds a malformed value (not written by dlock?)");
        }
        HolderInfo h;
        h.key = key;
        h.owner = *owner;
        h.token = static_cast<FencingToken>(token);
        h.ttl_remaining = milliseconds(pttl);
        h.ttl = milliseconds(std::max(0LL, ReplyNumber(f[4], 0)));
        if (const long long held_for = ReplyNumber(f[5], -1); held_for >= 0) {
          h.held_for = milliseconds(held_for);
        }
        h.limit = static_cast<std::uint32_t>(ReplyNumber(f[6], 1));
        h.label = ReplyString(f[7]);
        holders.push_back(std::move(h));
        return Status::Ok();
      });
  if (!s.ok()) return s;
  std::stable_sort(holders.begin(), holders.end(), [](const HolderInfo& a, const HolderInfo& b) {
    return a.key != b.key ? a.key < b.key : a.token < b.token;
  });
  return holders;
}

Result<std::vector<WaiterInfo>> RedisBackend::Waiters(std::string_view prefix) {
  const std::string what = "list the waiters of " + Quoted(prefix);
  std::vector<WaiterInfo> waiters;
  // Fields: see scripts::Waiters.
  Status s = ForEachRow(
      prefix, QueuePattern(prefix), &KeyFromQueueName, scripts::Waiters(), 5, "waiters", "queue", what,
      [&](const std::string& key, const redisReply* const* f, const std::string&) {
        auto owner = OwnerId::Parse(ReplyString(f[1]));
        if (!owner.ok()) return Status::Ok();  // not written by dlock
        WaiterInfo w;
        w.key = key;
        w.owner = *owner;
        w.limit = static_cast<std::uint32_t>(ReplyNumber(f[2], 1));
        if (const long long waited = ReplyNumber(f[3], -1); waited >= 0) {
          w.waited_for = milliseconds(waited);
        }
        w.label = ReplyString(f[4]);
        waiters.push_back(std::move(w));
        return Status::Ok();
      });
  if (!s.ok()) return s;
  std::stable_sort(waiters.begin(), waiters.end(),
                   [](const WaiterInfo& a, const WaiterInfo& b) { return a.key < b.key; });
  return waiters;
}

template <typename MakeOptions>
Result<std::unique_ptr<Backend>> OpenWith(const internal::Uri& uri,
                                          const internal::BackendParams& params,
                                          MakeOptions make) {
  DLOCK_ASSIGN_OR_RETURN(RedisOptions options, make(uri, params));
  auto backend = std::make_unique<RedisBackend>(std::move(options), params.clock);
  DLOCK_RETURN_IF_ERROR(backend->Verify());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace

Result<std::unique_ptr<Backend>> Open(const internal::Uri& uri,
                                      const internal::BackendParams& params) {
  return OpenWith(uri, params, RedisOptionsFromUri);
}

Result<std::unique_ptr<Backend>> OpenSentinel(const internal::Uri& uri,
                                              const internal::BackendParams& params) {
  return OpenWith(uri, params, SentinelOptionsFromUri);
}

}  // namespace dlock::redis
