#include "backends/redis/redis_backend.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "backends/redis/redis_cluster.h"
#include "backends/redis/redis_conn.h"
#include "backends/redis/redis_keys.h"
#include "backends/redis/redis_scripts.h"
#include "backends/redis/redis_slots.h"
#include "backends/redis/redis_subscriber.h"
#include "backends/redis/redis_uri.h"
#include "core/duration.h"

namespace dlock::redis {
namespace {

using std::chrono::milliseconds;

constexpr const char* kRedisForm =
    "redis[s]://[user:password@]host[:6379][/db][?cacert=&cert=&key=]";
constexpr const char* kSentinelForm =
    "redis[s]+sentinel://[user:password@]host[:26379],host,.../master-name[?db=N]";
constexpr const char* kClusterForm =
    "redis[s]+cluster://[user:password@]host[:6379],host,...[?cacert=&cert=&key=]";
constexpr std::size_t kMaxIdleConnections = 8;
constexpr std::size_t kListBatch = 256;
// A waiter blocked in Wait keeps its place in the queue kPlaceTtl after
// each attempt (less if the core asks for less), and attempts again every
// kPlaceRefresh: a waiter that died or hangs at the head holds the others
// up for at most kPlaceTtl. (The core's own queue_ttl, 3 s, would let a
// dead head stall the queue that long.)
constexpr milliseconds kPlaceTtl{1000};
constexpr milliseconds kPlaceRefresh{300};

// The place of any other waiter: an asynchronous one, which the core keeps
// with KeepPlaces (or attempts again) every third of queue_ttl, and any
// waiter's first attempt. It lasts two of those thirds: a keep may come a
// whole third late (a busy worker) and the place still holds, and a dead
// waiter holds the queue up for at most two thirds of queue_ttl (2 s), not
// all of it. Shorter would lapse between keeps; the keeps' period is the
// core's.
milliseconds KeptPlaceTtl(milliseconds queue_ttl) { return queue_ttl * 2 / 3; }
// An attempt cut to the caller's deadline still gets at least this long:
// the one short try the Backend contract promises.
constexpr milliseconds kShortTry{100};

struct RedisOptions {
  ConnectOptions connect;
  ConnectOptions to_sentinel;  // redis+sentinel://: TLS and the sentinels' password
  // The server for redis://; the sentinels for redis+sentinel://.
  std::vector<Endpoint> endpoints;
  bool sentinel = false;
  bool cluster = false;  // redis+cluster://: endpoints are the seed nodes
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
  DLOCK_RETURN_IF_ERROR(
      uri.CheckParams({"timeout", "wait_replicas", "wait_timeout", "cacert", "cert", "key"}));
  DLOCK_RETURN_IF_ERROR(TlsFromUri(uri, &o.connect));
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
  DLOCK_RETURN_IF_ERROR(uri.CheckParams({"db", "timeout", "wait_replicas", "wait_timeout",
                                         "cacert", "cert", "key", "sentinel_password_file",
                                         "sentinel_password_env"}));
  DLOCK_RETURN_IF_ERROR(TlsFromUri(uri, &o.connect));
  o.to_sentinel.connect_timeout = o.connect.connect_timeout;
  o.to_sentinel.tls = o.connect.tls;
  DLOCK_RETURN_IF_ERROR(SentinelPasswordFromUri(uri, &o.to_sentinel));
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

Result<RedisOptions> ClusterOptionsFromUri(const internal::Uri& uri,
                                           const internal::BackendParams& params) {
  RedisOptions o;
  o.cluster = true;
  o.connect = BaseConnectOptions(uri, params);
  DLOCK_RETURN_IF_ERROR(
      uri.CheckParams({"timeout", "wait_replicas", "wait_timeout", "cacert", "cert", "key"}));
  DLOCK_RETURN_IF_ERROR(TlsFromUri(uri, &o.connect));
  DLOCK_ASSIGN_OR_RETURN(o.endpoints,
                         ParseEndpoints(uri.hosts, 6379, uri.scheme + " URI " + uri.Redacted()));
  if (uri.path != "" && uri.path != "/" && uri.path != "/0") {
    return BadUri(uri, "a Redis Cluster has only database 0; give no path", kClusterForm);
  }
  DLOCK_RETURN_IF_ERROR(ParseCommon(uri, &o));
  return o;
}

// The hash slot of every Redis key and channel of dlock key `key` (they
// share its hash tag).
std::uint16_t KeySlot(std::string_view key) { return HashSlot(LockName(key)); }

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

// Checks a request before any round trip.
Status CheckAcquire(const LeaseRequest& request) {
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
  return ValidateLabel(request.label);
}

// What one run of the acquire script said.
struct AcquireReply {
  Attempt attempt;
  long long server_now = 0;  // when refused: the server's time (ms)
};

class RedisAcquisition;

class RedisBackend final : public Backend {
 public:
  RedisBackend(RedisOptions options, std::shared_ptr<Clock> clock)
      : options_(std::move(options)), clock_(clock ? std::move(clock) : DefaultClock()) {
    if (options_.cluster) {
      cluster_ = std::make_unique<ClusterRouter>(options_.endpoints, options_.connect);
      reaper_ = std::make_unique<SubscriberReaper>();
    }
  }
  // Every subscriber is gone before the router: the waits that shared them
  // ended with the core's Acquire calls, and the reaper destroys them
  // (joining their threads) before it goes.
  ~RedisBackend() override {
    std::lock_guard lock(subscriber_mu_);
    subscriber_.reset();
    node_subscribers_.clear();
  }

  // Connects once, so that a wrong address, password or database is
  // reported by Open; on a cluster, reads the slot map.
  Status Verify() {
    if (cluster_) return cluster_->Refresh("connect");
    DLOCK_ASSIGN_OR_RETURN(auto conn, Connect("connect", /*verify=*/true));
    Give(std::move(conn), generation());
    return Status::Ok();
  }

  // A single attempt: it takes no place in the queue, whatever
  // request.queue_ttl says. Waiters queue through Begin.
  Result<Attempt> TryAcquire(const LeaseRequest& request) override;
  std::unique_ptr<Acquisition> Begin(const LeaseRequest& request) override;
  Status Release(std::string_view key, const OwnerId& owner) override;
  // One pipeline each (on a cluster one per node, every node at once),
  // without wait_replicas (WAIT would have to confirm each grant): with it,
  // one call at a time.
  std::vector<Result<Attempt>> TryAcquireMany(std::span<const LeaseRequest> requests) override;
  std::vector<Status> ReleaseMany(std::span<const LeaseRequest> holdings) override;
  bool BatchesCalls() const override { return options_.wait_replicas == 0; }
  // One pipeline too (one per node on a cluster), with or without
  // wait_replicas: a place lost in a failover only costs its waiter its
  // turn, never a grant.
  std::vector<Status> KeepPlaces(std::span<const LeaseRequest> waiters) override;
  bool KeepsPlaces() const override { return true; }
  std::vector<Status> Renew(std::span<const LeaseRequest> leases) override;
  Result<std::vector<HolderInfo>> List(std::string_view prefix) override;
  Result<std::vector<WaiterInfo>> Waiters(std::string_view prefix) override;
  Result<std::uint64_t> StoredObjects(std::string_view prefix) override;
  bool SupportsLockDelay() const override { return true; }
  bool SupportsSharing() const override { return true; }
  std::string Describe() const override { return options_.describe; }
  Status Ping() override;
  Result<bool> IsDone(std::string_view key) override;
  Status MarkDone(std::string_view key, const OwnerId& owner,
                  std::chrono::milliseconds keep) override;
  Status RecordBreak(const BreakRecord& record, std::chrono::milliseconds keep) override;
  Result<std::vector<BreakRecord>> Breaks(std::string_view prefix) override;

 private:
  friend class RedisAcquisition;

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
  // The subscriber that hears `channel`: the backend's one, or on a
  // cluster the one of the node serving the channel's slot (made at the
  // first wait); null when no node is known to serve it by `deadline`.
  std::shared_ptr<Subscriber> SubscriberFor(const std::string& channel,
                                            ClusterRouter::SteadyTime deadline);
  // A cluster node's subscriber, destroyed by the reaper.
  std::shared_ptr<Subscriber> MakeNodeSubscriber(const Endpoint& node);
  // A refused subscription, told once per backend (Subscriber).
  void ReportRefusal(const std::string& error);
  // When an attempt for `request` must end: the write timeout, cut to the
  // caller's deadline (request.deadline) but no shorter than kShortTry.
  ClusterRouter::SteadyTime AttemptDeadline(const LeaseRequest& request) const;
  // The channel's ticket, with the subscriber that gave it, if that
  // subscriber exists and has the channel subscribed (and asks for the
  // subscription either way); nullopt before the first wait.
  struct Subscription {
    std::shared_ptr<Subscriber> subscriber;
    Subscriber::Ticket ticket;
  };
  std::optional<Subscription> CurrentTicket(const std::string& channel,
                                            ClusterRouter::SteadyTime deadline);
  bool Sharded() const { return cluster_ != nullptr; }

  // Runs `script` for dlock key `key`: on the primary of its slot on a
  // cluster, on the one server otherwise; and says which server answered.
  Result<ClusterRouter::Routed> EvalFor(std::string_view key, const Script& script,
                                        std::span<const std::string> keys,
                                        std::span<const std::string> args,
                                        std::span<const Command> extra,
                                        ClusterRouter::SteadyTime deadline,
                                        const std::string& what);
  // `keys`, and on a cluster also the names `others` gives for `key`: a
  // script's every key is declared there, so that a call on a slot whose
  // keys are half migrated is refused whole (TRYAGAIN) rather than failing
  // half-way. Elsewhere the scripts name a key's other keys themselves,
  // which costs the server nothing per call.
  using NameOf = std::string (*)(std::string_view);
  template <typename Names>
  std::vector<std::string> Declared(std::vector<std::string> keys, std::string_view key,
                                    const Names& others) const {
    if (cluster_) {
      for (NameOf name : others) keys.push_back(name(key));
    }
    return keys;
  }
  std::vector<std::string> Declared(std::vector<std::string> keys, std::string_view key,
                                    std::initializer_list<NameOf> others) const {
    return Declared<std::initializer_list<NameOf>>(std::move(keys), key, others);
  }

  // `WAIT wait_replicas wait_timeout` to pipeline after a write that must
  // reach the replicas (none without wait_replicas), and the reply timeout
  // that then applies.
  std::vector<Command> ReplicaWait() const;
  std::chrono::milliseconds WriteTimeout() const;
  // The keys and arguments of one acquire script call, and of a release.
  struct ScriptCall {
    std::vector<std::string> keys;
    std::vector<std::string> args;
  };
  // `channel`: the key's wake-up channel, if the caller has it already.
  ScriptCall AcquireCall(const LeaseRequest& request, milliseconds place_ttl,
                         const std::string* channel = nullptr) const;
  ScriptCall ReleaseCall(std::string_view key, const OwnerId& owner) const;
  Status ReadReleaseReply(const redisReply* r, const std::string& server, const std::string& what);
  // A script call for dlock key `key`, for RunEach: on its slot on a
  // cluster.
  ClusterRouter::SlotCall SlotCallFor(std::string_view key, ScriptCall call) const;
  // One run of the acquire script for a checked request, taking (or
  // refreshing) a place in the queue for place_ttl when that is not zero,
  // by `deadline` (AttemptDeadline, taken once per attempt).
  Result<AcquireReply> RunAcquire(const LeaseRequest& request, const std::string& channel,
                                  std::chrono::milliseconds place_ttl,
                                  ClusterRouter::SteadyTime deadline);
  // What the acquire script answered for `key` (the message's "acquire
  // 'key'" is made only for an error).
  Result<AcquireReply> ReadAcquireReply(std::span<const ReplyPtr> replies,
                                        const std::string& server, std::string_view key);
  // kUnavailable unless WAIT's reply (after waiting up to `waited`) says
  // wait_replicas confirmed a grant or a renewal.
  Status CheckReplicated(const redisReply* wait_reply, const std::string& server,
                         const std::string& what, milliseconds waited);
  // Renew's script call on the one server (not a cluster), `wait` after it.
  void RenewOnServer(ClusterRouter::SlotCall& call, std::span<const Command> wait,
                     const ClusterRouter::TailCheck& check_wait, milliseconds timeout);
  // What one KeepPlaces script call said, into the results of its places.
  static void ApplyKeeps(const ClusterRouter::SlotCall& call, std::span<const LeaseRequest> waiters,
                         const std::vector<std::size_t>& group, std::vector<Status>* out);
  // What one renew call said, into the results of its leases.
  static void ApplyRenewals(const ClusterRouter::SlotCall& call,
                            std::span<const LeaseRequest> leases,
                            const std::vector<std::size_t>& group, std::vector<Status>* result);

  // For List, Waiters and Breaks: SCANs `pattern` on every server (every
  // primary of a cluster), runs `script` over the names in batches, checks
  // each reply row of `fields` (the first is the 1-based index of its name
  // in the batch) and hands `row` those whose key starts with `prefix`.
  using RowFn = std::function<Status(const std::string& key, const redisReply* const* fields,
                                     const std::string& server)>;
  struct RowQuery {
    std::string_view prefix;
    std::string pattern;
    std::optional<std::string> (*key_of)(std::string_view);  // a name's dlock key
    NameOf name_of;                                          // ... and back
    std::vector<NameOf> others;  // the other names the script reads
    const Script* script;
    std::size_t fields;
    std::string rows_noun, name_noun, what;
  };
  Status ForEachRow(const RowQuery& q, const RowFn& row);
  // The calls of `script` in one pipeline on one connection of the one
  // server (loading the script first if the server lacks it); on a cluster
  // each on its slot's primary, a node's calls in one pipeline, every node
  // at once. Each within `timeout`. On the one server the calls' keys and
  // arguments are moved into the commands sent.
  void RunEach(const Script& script, std::span<ClusterRouter::SlotCall> calls,
               milliseconds timeout, const std::string& what);
  void RunOnServer(const Script& script, std::span<ClusterRouter::SlotCall> calls,
                   milliseconds timeout, const std::string& what);
  Status ParseRows(const RowQuery& q, const ClusterRouter::SlotCall& call,
                   const std::vector<std::string>& keys, const RowFn& row);
  // Where to look for everything: the one server (nullopt), or every
  // primary of the cluster.
  Result<std::vector<std::optional<Endpoint>>> Servers(const std::string& what);
  // The names SCAN MATCH `pattern` finds on `node` (nullopt: the one
  // server), sorted, without duplicates.
  Result<std::vector<std::string>> Scan(const std::optional<Endpoint>& node,
                                        const std::string& pattern, const std::string& what);

  const RedisOptions options_;
  const std::shared_ptr<Clock> clock_;

  std::mutex pool_mu_;
  std::vector<std::unique_ptr<Connection>> idle_;  // guarded by pool_mu_
  // Bumped when a connection breaks: the idle ones may lead to a dead or
  // demoted primary too, so they are dropped rather than reused.
  std::uint64_t generation_ = 0;

  // redis+cluster://: the slot map and a pool per primary (subscribers
  // below use it, so it is declared before them and outlives them).
  std::unique_ptr<ClusterRouter> cluster_;
  std::atomic<bool> refusal_reported_{false};
  // On a cluster: destroys its subscribers; declared after what they use,
  // before them, so that it outlives them and goes before the router.
  std::unique_ptr<SubscriberReaper> reaper_;

  std::mutex subscriber_mu_;
  std::shared_ptr<Subscriber> subscriber_;  // made at the first wait
  // On a cluster: one per primary, by Endpoint::Text(); guarded by
  // subscriber_mu_.
  std::map<std::string, std::shared_ptr<Subscriber>> node_subscribers_;
};

// One acquire of one key by one owner (Acquisition, backend.h). A refused
// attempt records what the wait after it needs (its subscription ticket,
// its send time and the server's time of the refusal); that wait may bring
// a grant on release, which the next Try hands out without a round trip.
// Notify is the same wait as a Subscriber watch: the subscriber's reader
// notes the grant and calls `wake`.
class RedisAcquisition final : public Acquisition {
 public:
  RedisAcquisition(RedisBackend& backend, LeaseRequest request)
      : backend_(backend),
        request_(std::move(request)),
        channel_(WakeChannel(backend.options_.connect.db, request_.key)),
        owner_(request_.owner.ToString()) {}
  ~RedisAcquisition() override { StopNotify(); }

  Result<Attempt> Try() override;
  bool Wait(TimePoint until, std::stop_token stop) override;
  bool Notify(std::function<void()> wake) override;
  void StopNotify() override;
  void Abandon() override;

 private:
  struct Refusal {
    // Taken before the attempt was sent, from the subscriber the wait uses.
    std::optional<RedisBackend::Subscription> ticket;
    TimePoint sent{};                          // client clock
    long long refused_at = 0;                  // server ms
  };
  // A grant on release: the key is this waiter's since after `sent`.
  struct HandedOver {
    FencingToken token = 0;
    TimePoint sent{};
  };
  bool Waiting() const { return request_.queue_ttl > milliseconds(0); }
  // The subscriber a wait after `refusal` listens to (the ticket's own, if
  // it has one), and the ticket; no subscriber when none serves the
  // channel by `deadline`.
  std::pair<std::shared_ptr<Subscriber>, std::optional<Subscriber::Ticket>> WaitOn(
      const std::optional<Refusal>& refusal, ClusterRouter::SteadyTime deadline);
  // The grant on release, if one came and most of the ttl is left.
  std::optional<Attempt> TakeHandedOver();
  // Believes a grant message `text` that followed `refusal`.
  void NoteGrant(const Refusal& refusal, std::string_view text);

  RedisBackend& backend_;
  const LeaseRequest request_;
  const std::string channel_;
  const std::string owner_;
  std::optional<Refusal> refusal_;         // the last Try's, for the next Wait
  std::optional<HandedOver> handed_over_;  // from the last Wait, for the next Try
  bool maybe_granted_ = false;             // a reply was lost: Abandon must release
  bool abandoned_ = false;
  // Has waited in Wait (a blocking acquire): attempts every kPlaceRefresh.
  bool blocks_ = false;
  // Notify's watch, until StopNotify.
  std::shared_ptr<Subscriber> watched_by_;
  std::uint64_t watch_ = 0;
};

// A sentinel's refusal, with where its password comes from when that is
// what it refused.
Status SentinelRefused(const Status& s) {
  if (s.message().find("password") == std::string::npos) return s;
  return Status(s.code(), s.message() + " (for a sentinel: its own password, from "
                                        "sentinel_password_file= or sentinel_password_env=)");
}

Result<std::unique_ptr<Connection>> RedisBackend::ConnectViaSentinel(std::string_view what) {
  const ConnectOptions& to_sentinel = options_.to_sentinel;
  std::string errors;
  int unknown = 0, answered = 0;
  for (const Endpoint& s : options_.endpoints) {
    auto sentinel = Connection::Open(s, to_sentinel, false, false, what);
    // The sentinels share a password and a CA: a refusal is the same on all.
    if (!sentinel.ok() && IsFinal(sentinel.status())) return SentinelRefused(sentinel.status());
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
      Status refused = ReplyError(r, s.Text(), "ask sentinel");
      if (refused.code() == StatusCode::kPermissionDenied) return SentinelRefused(refused);
      errors += "; " + refused.message();
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
    if (IsFinal(conn.status())) return conn.status();
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

std::shared_ptr<Subscriber> RedisBackend::SubscriberFor(const std::string& channel,
                                                        ClusterRouter::SteadyTime deadline) {
  if (!cluster_) {
    std::lock_guard lock(subscriber_mu_);
    if (!subscriber_) {
      subscriber_ = std::make_shared<Subscriber>(
          [this]() { return Connect("subscribe for wake-ups", false); },
          Subscriber::Mode::kClassic, std::function<void()>(),
          [this](const std::string& error) { ReportRefusal(error); });
    }
    return subscriber_;
  }
  constexpr std::string_view kWhat = "subscribe for wake-ups";
  auto node = cluster_->PrimaryOf(HashSlot(channel), kWhat, deadline);
  if (!node.ok()) return nullptr;
  const auto primaries = cluster_->Primaries(kWhat, deadline);
  // Subscribers of nodes that serve no slot any more go, at every call (a
  // wait in progress keeps its own until it ends); the reaper destroys them.
  std::vector<std::shared_ptr<Subscriber>> retired;
  std::lock_guard lock(subscriber_mu_);
  if (primaries.ok()) {
    for (auto it = node_subscribers_.begin(); it != node_subscribers_.end();) {
      const bool serves = std::any_of(primaries->begin(), primaries->end(),
                                      [&](const Endpoint& e) { return e.Text() == it->first; });
      if (serves) {
        ++it;
      } else {
        retired.push_back(std::move(it->second));
        it = node_subscribers_.erase(it);
      }
    }
  }
  std::shared_ptr<Subscriber>& sub = node_subscribers_[node->Text()];
  if (!sub) sub = MakeNodeSubscriber(*node);
  return sub;
}

std::shared_ptr<Subscriber> RedisBackend::MakeNodeSubscriber(const Endpoint& node) {
  ClusterRouter* router = cluster_.get();
  return reaper_->Make(
      [router, node] { return router->Open(node, "subscribe for wake-ups"); },
      Subscriber::Mode::kSharded, [router] { router->MarkStale(); },
      [this](const std::string& error) { ReportRefusal(error); });
}

void RedisBackend::ReportRefusal(const std::string& error) {
  // A library has no log of its own; this misconfiguration (the ACL lacks
  // the wake-up channel or command) would otherwise only show as slower
  // hand-offs. Once, to stderr: waits go on, polling.
  if (refusal_reported_.exchange(true)) return;
  std::fprintf(stderr,
               "dlock: %s refused the subscription for wake-ups (%.200s): waiters poll "
               "instead of being woken; the ACL dlock needs is in docs/backend-redis.md\n",
               options_.describe.c_str(), error.c_str());
}

std::optional<RedisBackend::Subscription> RedisBackend::CurrentTicket(
    const std::string& channel, ClusterRouter::SteadyTime deadline) {
  std::shared_ptr<Subscriber> sub;
  if (!cluster_) {
    std::lock_guard lock(subscriber_mu_);
    sub = subscriber_;
  } else if (auto node = cluster_->PrimaryOf(HashSlot(channel), "subscribe", deadline);
             node.ok()) {
    std::lock_guard lock(subscriber_mu_);
    if (auto it = node_subscribers_.find(node->Text()); it != node_subscribers_.end()) {
      sub = it->second;
    }
  }
  if (!sub) return std::nullopt;
  std::optional<Subscriber::Ticket> ticket = sub->Current(channel);
  if (!ticket) return std::nullopt;
  return Subscription{std::move(sub), *ticket};
}

Result<ClusterRouter::Routed> RedisBackend::EvalFor(std::string_view key, const Script& script,
                                                    std::span<const std::string> keys,
                                                    std::span<const std::string> args,
                                                    std::span<const Command> extra,
                                                    ClusterRouter::SteadyTime deadline,
                                                    const std::string& what) {
  if (cluster_) return cluster_->Eval(KeySlot(key), script, keys, args, extra, deadline, what);
  const milliseconds timeout = std::max(
      milliseconds(1),
      std::chrono::ceil<milliseconds>(deadline - std::chrono::steady_clock::now()));
  DLOCK_ASSIGN_OR_RETURN(Handle conn, Take(what));
  DLOCK_ASSIGN_OR_RETURN(auto replies, conn->Eval(script, keys, args, extra, timeout, what));
  return ClusterRouter::Routed{std::move(replies), conn->server()};
}

std::vector<Command> RedisBackend::ReplicaWait() const {
  if (options_.wait_replicas == 0) return {};
  return {{"WAIT", std::to_string(options_.wait_replicas),
           std::to_string(options_.wait_timeout.count())}};
}

milliseconds RedisBackend::WriteTimeout() const {
  return options_.timeout + (options_.wait_replicas > 0 ? options_.wait_timeout : milliseconds(0));
}

Result<Attempt> RedisBackend::TryAcquire(const LeaseRequest& request) {
  DLOCK_RETURN_IF_ERROR(CheckAcquire(request));
  const std::string channel = WakeChannel(options_.connect.db, request.key);
  DLOCK_ASSIGN_OR_RETURN(AcquireReply reply,
                         RunAcquire(request, channel, milliseconds(0), AttemptDeadline(request)));
  return reply.attempt;
}

Result<AcquireReply> RedisBackend::RunAcquire(const LeaseRequest& request,
                                              const std::string& channel, milliseconds place_ttl,
                                              ClusterRouter::SteadyTime deadline) {
  const std::string what = "acquire " + Quoted(request.key);
  const ScriptCall call = AcquireCall(request, place_ttl, &channel);
  DLOCK_ASSIGN_OR_RETURN(auto answer, EvalFor(request.key, scripts::Acquire(Sharded()), call.keys,
                                               call.args, ReplicaWait(), deadline, what));
  return ReadAcquireReply(answer.replies, answer.server, request.key);
}

RedisBackend::ScriptCall RedisBackend::AcquireCall(const LeaseRequest& request,
                                                   milliseconds place_ttl,
                                                   const std::string* channel) const {
  // As few arguments as possible (each costs the server on every call); the
  // script names the key's other Redis keys from the lock's. The key is
  // escaped once for all of its names.
  const std::string escaped = EscapeKey(request.key);
  ScriptCall call;
  call.keys = Declared({NameOfEscaped(escaped, "lock"), SlotCounterNameOfEscaped(escaped),
                        NameOfEscaped(escaped, "queue")},
                       request.key,
                       {QueueExpiryName, QueueInfoName, HoldersName, HoldInfoName, CounterName});
  std::string ttl = std::to_string(request.ttl.count());
  call.args.reserve(5);
  call.args.push_back(request.owner.ToString() + "|" + ttl + "||" + request.label);
  call.args.push_back(std::move(ttl));
  call.args.push_back(std::to_string(request.limit) + "|" +
                      std::to_string(request.lock_delay.count()));
  call.args.push_back(std::to_string(place_ttl.count()));
  call.args.push_back(channel ? *channel : WakeChannelOfEscaped(options_.connect.db, escaped));
  return call;
}

ClusterRouter::SteadyTime RedisBackend::AttemptDeadline(const LeaseRequest& request) const {
  const auto now = std::chrono::steady_clock::now();
  const auto own = now + WriteTimeout();
  if (request.deadline == TimePoint::max()) return own;
  const auto caller =
      now + std::chrono::duration_cast<std::chrono::nanoseconds>(request.deadline - clock_->Now());
  return std::min(own, std::max(caller, now + kShortTry));
}

Result<AcquireReply> RedisBackend::ReadAcquireReply(std::span<const ReplyPtr> replies,
                                                    const std::string& server,
                                                    std::string_view key) {
  const auto what = [key] { return "acquire " + Quoted(key); };
  const redisReply* r = replies[0].get();
  if (r->type == REDIS_REPLY_ERROR) return ReplyError(r, server, what());
  long long granted = 0, left = 0, server_now = 0;
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || r->elements > 4 ||
      !ReplyInt(r->element[0], &granted) || !ReplyInt(r->element[2], &left) ||
      (r->elements == 4 && !ReplyInt(r->element[3], &server_now))) {
    return OddReply("the acquire script's {granted, token, ttl[, time]}", server, what());
  }
  if (granted != 1) {
    return AcquireReply{Attempt{false, 0, milliseconds(std::max<long long>(0, left))}, server_now};
  }
  auto token = ParseToken(r->element[1]);
  if (!token.ok()) return OddReply("a positive token", server, what());
  if (options_.wait_replicas > 0) {
    DLOCK_RETURN_IF_ERROR(CheckReplicated(replies[1].get(), server, what(), options_.wait_timeout));
  }
  return AcquireReply{Attempt{true, *token, milliseconds(0)}};
}

// The grant may not survive a failover: not granted as far as the caller
// knows. The core retries with the same owner (which gets the same token,
// and WAITs again) or releases when it gives up. A renewal likewise: not
// renewed.
Status RedisBackend::CheckReplicated(const redisReply* w, const std::string& server,
                                     const std::string& what, milliseconds waited) {
  long long confirmed = 0;
  if (w->type == REDIS_REPLY_ERROR) return ReplyError(w, server, what);
  if (!ReplyInt(w, &confirmed)) return OddReply("WAIT's replica count", server, what);
  if (confirmed >= options_.wait_replicas) return Status::Ok();
  return UnavailableError(what + ": only " + std::to_string(confirmed) + " of " +
                          std::to_string(options_.wait_replicas) + " replicas confirmed it within " +
                          internal::FormatDuration(waited) +
                          " (wait_replicas); it could be lost in a failover");
}

std::unique_ptr<Acquisition> RedisBackend::Begin(const LeaseRequest& request) {
  return std::make_unique<RedisAcquisition>(*this, request);
}

Result<Attempt> RedisAcquisition::Try() {
  refusal_.reset();
  DLOCK_RETURN_IF_ERROR(CheckAcquire(request_));
  if (std::optional<Attempt> handed = TakeHandedOver()) return *handed;
  // Both taken before the attempt is sent: anything published after the
  // ticket wakes the waiter (redis_subscriber.h), and a grant that follows
  // this attempt's refusal follows `sent`.
  const TimePoint sent = backend_.clock_->Now();
  // One deadline for the whole attempt, the subscription's look included.
  const ClusterRouter::SteadyTime deadline = backend_.AttemptDeadline(request_);
  std::optional<RedisBackend::Subscription> ticket;
  if (Waiting()) ticket = backend_.CurrentTicket(channel_, deadline);
  // A waiter that blocks in Wait is back by kPlaceRefresh; any other is
  // kept (or back) by the core's timer, every third of queue_ttl.
  const milliseconds place_ttl =
      !Waiting() ? milliseconds(0)
                 : (blocks_ ? std::min(request_.queue_ttl, kPlaceTtl)
                            : KeptPlaceTtl(request_.queue_ttl));
  Result<AcquireReply> reply = backend_.RunAcquire(request_, channel_, place_ttl, deadline);
  if (!reply.ok()) {
    // A lost reply may hide a grant.
    if (reply.status().code() == StatusCode::kUnavailable) maybe_granted_ = true;
    return reply.status();
  }
  if (!reply->attempt.granted && Waiting()) refusal_ = Refusal{ticket, sent, reply->server_now};
  return reply->attempt;
}

std::optional<Attempt> RedisAcquisition::TakeHandedOver() {
  const std::optional<HandedOver> h = std::exchange(handed_over_, std::nullopt);
  // The lease counts from the send of the attempt the grant followed. Taken
  // only while most of the ttl is left; otherwise an attempt (which finds
  // the key ours and renews it) tells more.
  if (!h || backend_.clock_->Now() - h->sent >= request_.ttl / 4) return std::nullopt;
  return Attempt{true, h->token, milliseconds(0), milliseconds(0), h->sent};
}

bool RedisAcquisition::Wait(TimePoint until, std::stop_token stop) {
  blocks_ = true;
  const std::optional<Refusal> refusal = std::exchange(refusal_, std::nullopt);
  // Back for another attempt by kPlaceRefresh at the latest: it keeps this
  // waiter's place, and drops a dead head's once its place expired.
  const auto left =
      std::clamp<Duration>(until - backend_.clock_->Now(), Duration::zero(), kPlaceRefresh);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::nanoseconds>(left);
  // Finding the subscriber (a reload of the slot map) keeps to the wait's
  // deadline too.
  auto [subscriber, ticket] = WaitOn(refusal, deadline);
  if (!subscriber) return false;
  std::string message;
  const Subscriber::Outcome outcome =
      subscriber->Wait(channel_, ticket, owner_, deadline, std::move(stop), &message);
  if (refusal) NoteGrant(*refusal, message);
  return outcome != Subscriber::Outcome::kDown;
}

std::pair<std::shared_ptr<Subscriber>, std::optional<Subscriber::Ticket>> RedisAcquisition::WaitOn(
    const std::optional<Refusal>& refusal, ClusterRouter::SteadyTime deadline) {
  // The ticket's own subscriber: on a cluster the channel's slot may have
  // moved since, and then that subscriber wakes this wait.
  if (refusal && refusal->ticket) return {refusal->ticket->subscriber, refusal->ticket->ticket};
  return {backend_.SubscriberFor(channel_, deadline), std::nullopt};
}

bool RedisAcquisition::Notify(std::function<void()> wake) {
  StopNotify();
  std::optional<Refusal> refusal = std::exchange(refusal_, std::nullopt);
  auto [subscriber, ticket] = WaitOn(refusal, backend_.AttemptDeadline(request_));
  if (!subscriber) return false;
  // The grant a release hands over is noted before `wake`: the core's Try
  // after the wake takes it. Between Notify and the wake (or StopNotify,
  // which waits for a call in progress) nothing else touches this object.
  // The watch keeps no ticket: it would hold its own subscriber.
  if (refusal) refusal->ticket.reset();
  watch_ = subscriber->Watch(
      channel_, ticket, owner_,
      [this, refusal = std::move(refusal), wake = std::move(wake)](std::string_view grant) {
        if (refusal) NoteGrant(*refusal, grant);
        wake();
      });
  if (watch_ == 0) return false;
  watched_by_ = std::move(subscriber);
  return true;
}

void RedisAcquisition::StopNotify() {
  if (watch_ == 0) return;
  watched_by_->Unwatch(std::exchange(watch_, 0));
  watched_by_.reset();
}

void RedisAcquisition::NoteGrant(const Refusal& refusal, std::string_view text) {
  // "token:time" after "<owner>:": the key is this waiter's. Believed only
  // when the grant's time (server ms) is not before the refusal, so that the
  // lease may count from the refused attempt's send. In the same
  // millisecond the grant still came after the refusal: a grant before it
  // would still have held (a ttl is at least 10 ms), and the attempt would
  // have found the key its own. Not with wait_replicas, whose grants an
  // attempt must confirm with WAIT.
  const auto grant = ParseGrant(text);
  if (grant && backend_.options_.wait_replicas == 0 && refusal.refused_at > 0 &&
      grant->second >= refusal.refused_at) {
    handed_over_ = HandedOver{grant->first, refusal.sent};
  }
}

void RedisAcquisition::Abandon() {
  if (std::exchange(abandoned_, true)) return;
  StopNotify();
  refusal_.reset();
  handed_over_.reset();
  // Release drops this owner's place, and ends a holding it got unseen (a
  // lost reply, or a grant on release nobody took). A single attempt that
  // was answered took neither.
  if (maybe_granted_ || Waiting()) (void)backend_.Release(request_.key, request_.owner);
}

Status RedisBackend::Ping() {
  // On a cluster: the primary of slot 0's key, as any call of one key.
  DLOCK_ASSIGN_OR_RETURN(auto answer,
                         EvalFor("ping", scripts::Ping(), {}, {}, {},
                                 ClusterRouter::Within(options_.timeout), "ping"));
  const redisReply* r = answer.replies[0].get();
  if (r->type == REDIS_REPLY_ERROR) return ReplyError(r, answer.server, "ping");
  return Status::Ok();
}

Result<bool> RedisBackend::IsDone(std::string_view key) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  const std::string what = "read the run-once record of " + Quoted(key);
  const Command exists{"EXISTS", DoneName(key)};
  ClusterRouter::Routed answer;
  if (cluster_) {
    DLOCK_ASSIGN_OR_RETURN(answer,
                           cluster_->Run(KeySlot(key), {&exists, 1},
                                         ClusterRouter::Within(options_.timeout), what));
  } else {
    DLOCK_ASSIGN_OR_RETURN(Handle conn, Take(what));
    DLOCK_ASSIGN_OR_RETURN(ReplyPtr reply, conn->Call(exists, options_.timeout, what));
    answer.replies.push_back(std::move(reply));
    answer.server = conn->server();
  }
  const redisReply* reply = answer.replies[0].get();
  if (reply->type == REDIS_REPLY_ERROR) return ReplyError(reply, answer.server, what);
  if (reply->type != REDIS_REPLY_INTEGER) return OddReply("an EXISTS count", answer.server, what);
  return reply->integer > 0;
}

Status RedisBackend::MarkDone(std::string_view key, const OwnerId& owner,
                              std::chrono::milliseconds keep) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  const std::string what = "mark " + Quoted(key) + " done";
  const std::vector<std::string> keys =
      Declared({LockName(key), DoneName(key)}, key, {HoldersName, HoldInfoName, CounterName});
  const std::string args[] = {owner.ToString(),
                              keep == kKeepDoneForever ? "" : std::to_string(keep.count())};
  DLOCK_ASSIGN_OR_RETURN(auto answer, EvalFor(key, scripts::MarkDone(), keys, args, ReplicaWait(),
                                              ClusterRouter::Within(WriteTimeout()), what));
  const auto& replies = answer.replies;
  const redisReply* r = replies[0].get();
  if (r->type == REDIS_REPLY_ERROR) return ReplyError(r, answer.server, what);
  long long marked = 0;
  if (!ReplyInt(r, &marked)) return OddReply("the mark-done script's result", answer.server, what);
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

Status RedisBackend::RecordBreak(const BreakRecord& record, std::chrono::milliseconds keep) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(record.key));
  const std::string what = "record the break of " + Quoted(record.key);
  const std::string keys[] = {BreaksName(record.key)};
  // Labels hold no control characters (ValidateLabel): a tab ends a field.
  const std::string args[] = {record.owner.ToString() + '\t' + std::to_string(record.token) +
                                  '\t' + std::to_string(record.break_token) + '\t' +
                                  record.by + '\t' + record.label,
                              keep == kKeepDoneForever ? "" : std::to_string(keep.count())};
  DLOCK_ASSIGN_OR_RETURN(auto answer, EvalFor(record.key, scripts::RecordBreak(), keys, args,
                                              ReplicaWait(), ClusterRouter::Within(WriteTimeout()), what));
  const auto& replies = answer.replies;
  const redisReply* r = replies[0].get();
  if (r->type == REDIS_REPLY_ERROR) return ReplyError(r, answer.server, what);
  if (options_.wait_replicas > 0) {
    long long confirmed = 0;
    if (!ReplyInt(replies[1].get(), &confirmed) || confirmed < options_.wait_replicas) {
      return UnavailableError(what + ": fewer than " + std::to_string(options_.wait_replicas) +
                              " replicas confirmed the record (wait_replicas)");
    }
  }
  return Status::Ok();
}

namespace {

// One record as scripts::RecordBreak wrote it; false when it is not one.
bool ParseBreakRecord(std::string_view text, BreakRecord* out) {
  std::string_view fields[7];
  for (int i = 0; i < 6; ++i) {
    const std::size_t tab = text.find('\t');
    if (tab == std::string_view::npos) return false;
    fields[i] = text.substr(0, tab);
    text.remove_prefix(tab + 1);
  }
  fields[6] = text;  // the label, last: it may hold anything printable
  auto number = [](std::string_view f, auto* v) {
    return std::from_chars(f.data(), f.data() + f.size(), *v).ec == std::errc() && !f.empty();
  };
  auto owner = OwnerId::Parse(fields[2]);
  if (!owner.ok() || !number(fields[0], &out->at_unix_ms) || !number(fields[3], &out->token) ||
      !number(fields[4], &out->break_token)) {
    return false;
  }
  out->owner = *owner;
  out->by = std::string(fields[5]);
  out->label = std::string(fields[6]);
  return true;
}

}  // namespace

Result<std::vector<BreakRecord>> RedisBackend::Breaks(std::string_view prefix) {
  const std::string what = "list the breaks of " + Quoted(prefix);
  std::vector<BreakRecord> records;
  const RowQuery q{prefix, BreaksPattern(prefix), &KeyFromBreaksName, &BreaksName, {},
                   &scripts::Breaks(), 2, "break records", "list", what};
  Status s = ForEachRow(
      q, [&](const std::string& key, const redisReply* const* f, const std::string& server) {
        BreakRecord b;
        if (!ParseBreakRecord(ReplyString(f[1]), &b)) {
          return InternalError(what + ": a break record of " + Quoted(key) + " on " + server +
                               " is malformed (not written by dlock?)");
        }
        b.key = key;
        records.push_back(std::move(b));
        return Status::Ok();
      });
  if (!s.ok()) return s;
  // By key; each list is oldest first already.
  std::stable_sort(records.begin(), records.end(),
                   [](const BreakRecord& a, const BreakRecord& b) { return a.key < b.key; });
  return records;
}

Status RedisBackend::Release(std::string_view key, const OwnerId& owner) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  const std::string what = "release " + Quoted(key);
  const ScriptCall call = ReleaseCall(key, owner);
  DLOCK_ASSIGN_OR_RETURN(auto answer, EvalFor(key, scripts::Release(Sharded()), call.keys,
                                              call.args, {}, ClusterRouter::Within(options_.timeout),
                                              what));
  return ReadReleaseReply(answer.replies[0].get(), answer.server, what);
}

RedisBackend::ScriptCall RedisBackend::ReleaseCall(std::string_view key,
                                                   const OwnerId& owner) const {
  const std::string escaped = EscapeKey(key);
  ScriptCall call;
  call.keys = Declared({NameOfEscaped(escaped, "lock"), NameOfEscaped(escaped, "queue"),
                        SlotCounterNameOfEscaped(escaped)},
                       key, {QueueExpiryName, QueueInfoName, HoldersName, HoldInfoName, CounterName});
  call.args = {owner.ToString(), WakeChannelOfEscaped(options_.connect.db, escaped)};
  return call;
}

Status RedisBackend::ReadReleaseReply(const redisReply* r, const std::string& server,
                                      const std::string& what) {
  if (r->type == REDIS_REPLY_ERROR) return ReplyError(r, server, what);
  long long result = 0;
  if (!ReplyInt(r, &result)) return OddReply("the release script's result", server, what);
  if (result < 0) return NotOwnerError(what + ": the lock is held by another owner");
  return Status::Ok();
}

ClusterRouter::SlotCall RedisBackend::SlotCallFor(std::string_view key, ScriptCall call) const {
  ClusterRouter::SlotCall out;
  out.slot = cluster_ ? KeySlot(key) : 0;
  out.keys = std::move(call.keys);
  out.args = std::move(call.args);
  return out;
}

std::vector<Result<Attempt>> RedisBackend::TryAcquireMany(std::span<const LeaseRequest> requests) {
  if (!BatchesCalls()) return Backend::TryAcquireMany(requests);
  std::vector<Result<Attempt>> out(requests.size(), UnavailableError("not sent"));
  std::vector<ClusterRouter::SlotCall> calls;
  std::vector<std::size_t> sent;  // calls[j] is requests[sent[j]]
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (Status ok = CheckAcquire(requests[i]); !ok.ok()) {
      out[i] = ok;
      continue;
    }
    calls.push_back(SlotCallFor(requests[i].key, AcquireCall(requests[i], milliseconds(0))));
    sent.push_back(i);
  }
  RunEach(scripts::Acquire(Sharded()), calls, WriteTimeout(),
          "acquire " + std::to_string(calls.size()) + " keys");
  for (std::size_t j = 0; j < sent.size(); ++j) {
    ClusterRouter::SlotCall& call = calls[j];
    if (!call.reply.ok()) {
      out[sent[j]] = call.reply.status();
      continue;
    }
    auto reply = ReadAcquireReply(std::span<const ReplyPtr>(&*call.reply, 1), call.server,
                                  requests[sent[j]].key);
    out[sent[j]] = reply.ok() ? Result<Attempt>(reply->attempt) : Result<Attempt>(reply.status());
  }
  return out;
}

std::vector<Status> RedisBackend::ReleaseMany(std::span<const LeaseRequest> holdings) {
  if (!BatchesCalls()) return Backend::ReleaseMany(holdings);
  std::vector<Status> out(holdings.size());
  std::vector<ClusterRouter::SlotCall> calls;
  std::vector<std::size_t> sent;
  for (std::size_t i = 0; i < holdings.size(); ++i) {
    if (out[i] = ValidateKey(holdings[i].key); !out[i].ok()) continue;
    calls.push_back(SlotCallFor(holdings[i].key, ReleaseCall(holdings[i].key, holdings[i].owner)));
    sent.push_back(i);
  }
  RunEach(scripts::Release(Sharded()), calls, options_.timeout,
          "release " + std::to_string(calls.size()) + " keys");
  for (std::size_t j = 0; j < sent.size(); ++j) {
    const ClusterRouter::SlotCall& call = calls[j];
    if (!call.reply.ok()) {
      out[sent[j]] = call.reply.status();
      continue;
    }
    const redisReply* r = call.reply->get();
    long long result = 0;
    // The common answer read here; an error or a refusal says which key.
    out[sent[j]] = r->type == REDIS_REPLY_INTEGER && ReplyInt(r, &result) && result >= 0
                       ? Status::Ok()
                       : ReadReleaseReply(r, call.server, "release " + Quoted(holdings[sent[j]].key));
  }
  return out;
}

std::vector<Status> RedisBackend::KeepPlaces(std::span<const LeaseRequest> waiters) {
  std::vector<Status> out(waiters.size());
  // The places of one script call: up to kListBatch of one slot (of the one
  // server elsewhere), so that no call holds the server up for long.
  std::map<std::uint16_t, std::vector<std::size_t>> by_slot;
  for (std::size_t i = 0; i < waiters.size(); ++i) {
    out[i] = ValidateKey(waiters[i].key);
    if (out[i].ok() && waiters[i].owner.empty()) {
      out[i] = InvalidArgumentError("keep a place: the owner id is empty");
    }
    if (out[i].ok() && waiters[i].queue_ttl <= milliseconds(0)) {
      out[i] = InvalidArgumentError("keep a place: queue_ttl is not positive");
    }
    if (out[i].ok()) by_slot[cluster_ ? KeySlot(waiters[i].key) : 0].push_back(i);
  }
  std::vector<ClusterRouter::SlotCall> calls;
  std::vector<std::vector<std::size_t>> members;  // calls[c] keeps members[c]
  for (const auto& [slot, group] : by_slot) {
    for (std::size_t start = 0; start < group.size(); start += kListBatch) {
      const std::size_t end = std::min(group.size(), start + kListBatch);
      ClusterRouter::SlotCall& call = calls.emplace_back();
      std::vector<std::size_t>& member = members.emplace_back(group.begin() + start,
                                                               group.begin() + end);
      call.slot = slot;
      for (std::size_t i : member) {
        call.keys.push_back(QueueName(waiters[i].key));
        call.args.push_back(waiters[i].owner.ToString());
        call.args.push_back(std::to_string(KeptPlaceTtl(waiters[i].queue_ttl).count()));
      }
      for (std::size_t i : member) {
        call.keys = Declared(std::move(call.keys), waiters[i].key, {QueueExpiryName, QueueInfoName});
      }
    }
  }
  RunEach(scripts::KeepPlaces(), calls, options_.timeout,
          "keep " + std::to_string(by_slot.empty() ? 0 : waiters.size()) + " queue places");
  for (std::size_t c = 0; c < calls.size(); ++c) ApplyKeeps(calls[c], waiters, members[c], &out);
  return out;
}

void RedisBackend::ApplyKeeps(const ClusterRouter::SlotCall& call,
                              std::span<const LeaseRequest> waiters,
                              const std::vector<std::size_t>& group, std::vector<Status>* out) {
  const std::string what = "keep queue places";
  auto fail_all = [&](const Status& error) {
    for (std::size_t i : group) (*out)[i] = error;
  };
  if (!call.reply.ok()) return fail_all(call.reply.status());
  const redisReply* r = call.reply->get();
  if (r->type == REDIS_REPLY_ERROR) return fail_all(ReplyError(r, call.server, what));
  if (r->type != REDIS_REPLY_ARRAY || r->elements != group.size()) {
    return fail_all(OddReply("one result per place", call.server, what));
  }
  for (std::size_t j = 0; j < group.size(); ++j) {
    long long kept = 0;
    ReplyInt(r->element[j], &kept);
    if (kept != 1) {
      (*out)[group[j]] = NotFoundError("no place in the queue of key " +
                                       Quoted(waiters[group[j]].key) +
                                       " for this owner (it lapsed, or was granted)");
    }
  }
}

std::vector<Status> RedisBackend::Renew(std::span<const LeaseRequest> leases) {
  std::vector<Status> result(leases.size());
  // The leases of one script call (one per hash slot on a cluster, one in
  // all elsewhere): leases[group[i]] is the script's KEYS[i+1].
  std::map<std::uint16_t, std::vector<std::size_t>> groups;
  milliseconds shortest = options_.timeout * 3;
  for (std::size_t i = 0; i < leases.size(); ++i) {
    result[i] = ValidateKey(leases[i].key);
    if (result[i].ok()) result[i] = ValidateTtl(leases[i].ttl);
    if (!result[i].ok()) continue;
    groups[cluster_ ? KeySlot(leases[i].key) : 0].push_back(i);
    shortest = std::min(shortest, leases[i].ttl);
  }
  if (groups.empty()) return result;
  // A renewal answered after a third of the TTL is of little use, and a
  // renewal thread stuck longer would delay loss detection.
  const milliseconds timeout = std::clamp(shortest / 3, milliseconds(1), options_.timeout);
  // With wait_replicas a renewal counts only once replicated: one the
  // promoted replica lacks would leave the lease ending there before the
  // holder believes (the campaigns' leader-lag-kill shows it). On a
  // cluster, once per node, after that node's calls.
  std::vector<Command> wait;
  if (options_.wait_replicas > 0) {
    wait.push_back(
        {"WAIT", std::to_string(options_.wait_replicas), std::to_string(timeout.count())});
  }
  const auto check_wait = [&](std::span<const ReplyPtr> tail, const std::string& server) {
    return tail.empty() ? Status::Ok() : CheckReplicated(tail[0].get(), server, "renew", timeout);
  };
  std::vector<ClusterRouter::SlotCall> calls;
  std::vector<const std::vector<std::size_t>*> members;
  for (const auto& [slot, group] : groups) {
    ClusterRouter::SlotCall call;
    call.slot = slot;
    for (std::size_t i : group) {
      call.keys.push_back(LockName(leases[i].key));
      call.args.push_back(leases[i].owner.ToString());
      call.args.push_back(std::to_string(leases[i].ttl.count()));
    }
    for (std::size_t i : group) {
      call.keys = Declared(std::move(call.keys), leases[i].key, {HoldersName, HoldInfoName});
    }
    calls.push_back(std::move(call));
    members.push_back(&group);
  }
  const milliseconds budget = timeout * (wait.empty() ? 1 : 2);
  if (cluster_) {
    cluster_->EvalEach(scripts::Renew(), calls, wait, check_wait, ClusterRouter::Within(budget),
                       "renew");
  } else {
    RenewOnServer(calls[0], wait, check_wait, budget);
  }
  for (std::size_t c = 0; c < calls.size(); ++c) {
    ApplyRenewals(calls[c], leases, *members[c], &result);
  }
  return result;
}

void RedisBackend::RenewOnServer(ClusterRouter::SlotCall& call, std::span<const Command> wait,
                                 const ClusterRouter::TailCheck& check_wait,
                                 milliseconds timeout) {
  auto conn = Take("renew");
  if (!conn.ok()) {
    call.reply = conn.status();
    return;
  }
  call.server = (*conn)->server();
  auto replies = (*conn)->Eval(scripts::Renew(), call.keys, call.args, wait, timeout, "renew");
  if (!replies.ok()) {
    call.reply = replies.status();
    return;
  }
  Status waited = check_wait(std::span<const ReplyPtr>(*replies).subspan(1), call.server);
  if (!waited.ok() && (*replies)[0]->type != REDIS_REPLY_ERROR) {
    call.reply = waited;
    return;
  }
  call.reply = std::move((*replies)[0]);
}

void RedisBackend::ApplyRenewals(const ClusterRouter::SlotCall& call,
                                 std::span<const LeaseRequest> leases,
                                 const std::vector<std::size_t>& group,
                                 std::vector<Status>* result) {
  auto fail_all = [&](const Status& error) {
    for (std::size_t i : group) (*result)[i] = error;
  };
  if (!call.reply.ok()) return fail_all(call.reply.status());
  const redisReply* r = call.reply->get();
  if (r->type == REDIS_REPLY_ERROR) return fail_all(ReplyError(r, call.server, "renew"));
  if (r->type != REDIS_REPLY_ARRAY || r->elements != group.size()) {
    return fail_all(OddReply("one renewal result per lease", call.server, "renew"));
  }
  for (std::size_t j = 0; j < group.size(); ++j) {
    long long ok = 0;
    ReplyInt(r->element[j], &ok);
    if (ok != 1) {
      (*result)[group[j]] = NotOwnerError("lease on key " + Quoted(leases[group[j]].key) +
                                          " is no longer held by this owner");
    }
  }
}

Result<std::uint64_t> RedisBackend::StoredObjects(std::string_view prefix) {
  const std::string what = "count the keys for " + Quoted(prefix);
  DLOCK_ASSIGN_OR_RETURN(const auto servers, Servers(what));
  std::uint64_t count = 0;
  for (const auto& server : servers) {
    DLOCK_ASSIGN_OR_RETURN(const std::vector<std::string> names,
                           Scan(server, NamesPattern(prefix), what));
    count += static_cast<std::uint64_t>(std::count_if(names.begin(), names.end(), &IsPerKeyName));
  }
  return count;
}

Result<std::vector<std::optional<Endpoint>>> RedisBackend::Servers(const std::string& what) {
  std::vector<std::optional<Endpoint>> servers;
  if (!cluster_) {
    servers.emplace_back();
    return servers;
  }
  DLOCK_ASSIGN_OR_RETURN(const std::vector<Endpoint> primaries, cluster_->Primaries(what, ClusterRouter::Within(options_.timeout)));
  servers.assign(primaries.begin(), primaries.end());
  return servers;
}

Result<std::vector<std::string>> RedisBackend::Scan(const std::optional<Endpoint>& node,
                                                    const std::string& pattern,
                                                    const std::string& what) {
  std::optional<Handle> conn;
  if (!node) {
    DLOCK_ASSIGN_OR_RETURN(Handle taken, Take(what));
    conn.emplace(std::move(taken));
  }
  const std::string server = node ? node->Text() : (*conn)->server();
  auto call = [&](const Command& command) -> Result<ReplyPtr> {
    if (conn) return (*conn)->Call(command, options_.timeout, what);
    ClusterRouter::NodeBatch batch{*node, {command}};
    cluster_->RunOnNodes({&batch, 1}, ClusterRouter::Within(options_.timeout), what);
    if (!batch.replies.ok()) return batch.replies.status();
    return std::move((*batch.replies)[0]);
  };
  std::vector<std::string> names;
  std::string cursor = "0";
  do {
    DLOCK_ASSIGN_OR_RETURN(ReplyPtr reply,
                           call({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}));
    const redisReply* r = reply.get();
    if (r->type == REDIS_REPLY_ERROR) return ReplyError(r, server, what);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[1]->type != REDIS_REPLY_ARRAY) {
      return OddReply("a SCAN reply", server, what);
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

Status RedisBackend::ForEachRow(const RowQuery& q, const RowFn& row) {
  DLOCK_ASSIGN_OR_RETURN(const auto servers, Servers(q.what));
  for (const auto& server : servers) {
    DLOCK_ASSIGN_OR_RETURN(const std::vector<std::string> names, Scan(server, q.pattern, q.what));
    // The script over the names in batches: one batch per slot on a
    // cluster (a script's keys share a slot there), a node's batches in one
    // pipeline; each batch's dlock keys, for the rows.
    std::map<std::uint16_t, std::vector<std::string>> by_slot;
    for (const std::string& name : names) {
      const std::optional<std::string> key = q.key_of(name);
      if (!key || !key->starts_with(q.prefix)) continue;  // not dlock's, or a longer prefix's
      by_slot[cluster_ ? HashSlot(name) : 0].push_back(*key);
    }
    std::vector<ClusterRouter::SlotCall> calls;
    std::vector<std::vector<std::string>> call_keys;
    for (const auto& [slot, keys] : by_slot) {
      for (std::size_t start = 0; start < keys.size(); start += kListBatch) {
        ClusterRouter::SlotCall call;
        call.slot = slot;
        const std::vector<std::string> batch(
            keys.begin() + static_cast<std::ptrdiff_t>(start),
            keys.begin() + static_cast<std::ptrdiff_t>(std::min(keys.size(), start + kListBatch)));
        for (const std::string& key : batch) call.keys.push_back(q.name_of(key));
        for (const std::string& key : batch) {
          call.keys = Declared(std::move(call.keys), key, q.others);
        }
        if (cluster_) call.args.push_back(std::to_string(batch.size()));
        calls.push_back(std::move(call));
        call_keys.push_back(batch);
      }
    }
    RunEach(*q.script, calls, options_.timeout, q.what);
    for (std::size_t c = 0; c < calls.size(); ++c) {
      DLOCK_RETURN_IF_ERROR(ParseRows(q, calls[c], call_keys[c], row));
    }
  }
  return Status::Ok();
}

void RedisBackend::RunEach(const Script& script, std::span<ClusterRouter::SlotCall> calls,
                           milliseconds timeout, const std::string& what) {
  if (calls.empty()) return;
  if (cluster_) {
    return cluster_->EvalEach(script, calls, {}, {}, ClusterRouter::Within(timeout), what);
  }
  RunOnServer(script, calls, timeout, what);
}

void RedisBackend::RunOnServer(const Script& script, std::span<ClusterRouter::SlotCall> calls,
                               milliseconds timeout, const std::string& what) {
  auto fail_all = [&](const Status& error) {
    for (ClusterRouter::SlotCall& call : calls) call.reply = error;
  };
  std::vector<Command> commands;
  commands.reserve(calls.size());
  // The calls' keys and arguments are moved: nothing reads them after.
  for (ClusterRouter::SlotCall& call : calls) {
    Command& c = commands.emplace_back();
    c.reserve(3 + call.keys.size() + call.args.size());
    c.insert(c.end(), {"EVALSHA", script.sha1, std::to_string(call.keys.size())});
    std::move(call.keys.begin(), call.keys.end(), std::back_inserter(c));
    std::move(call.args.begin(), call.args.end(), std::back_inserter(c));
  }
  auto conn = Take(what);
  if (!conn.ok()) return fail_all(conn.status());
  auto replies = (*conn)->Pipeline(commands, timeout, what);
  // A server that lacks the script (restarted, flushed) refused every call
  // the same way; none of them ran. Sent again with the first call by
  // EVAL, which caches the script for the others behind it: SCRIPT LOAD is
  // not among the commands of the minimal ACL (docs/backend-redis.md).
  if (replies.ok() && !replies->empty() && IsNoScript((*replies)[0].get())) {
    commands[0][0] = "EVAL";
    commands[0][1] = script.text;
    replies = (*conn)->Pipeline(commands, timeout, what);
  }
  if (!replies.ok()) return fail_all(replies.status());
  if (replies->size() != calls.size()) {
    return fail_all(UnavailableError(what + ": " + (*conn)->server() + " answered " +
                                     std::to_string(replies->size()) + " of " +
                                     std::to_string(calls.size()) + " calls"));
  }
  for (std::size_t i = 0; i < calls.size(); ++i) {
    calls[i].server = (*conn)->server();
    calls[i].reply = std::move((*replies)[i]);
  }
}

Status RedisBackend::ParseRows(const RowQuery& q, const ClusterRouter::SlotCall& call,
                               const std::vector<std::string>& keys, const RowFn& row) {
  if (!call.reply.ok()) return call.reply.status();
  const redisReply* r = call.reply->get();
  if (r->type == REDIS_REPLY_ERROR) return ReplyError(r, call.server, q.what);
  if (r->type != REDIS_REPLY_ARRAY || r->elements % q.fields != 0) {
    return OddReply(q.rows_noun + " of " + std::to_string(q.fields) + " fields", call.server,
                    q.what);
  }
  for (std::size_t i = 0; i < r->elements; i += q.fields) {
    const redisReply* const* f = r->element + i;
    const long long index = ReplyNumber(f[0], 0);
    if (index < 1 || static_cast<std::size_t>(index) > keys.size()) {
      return OddReply("a " + q.name_noun + " index", call.server, q.what);
    }
    DLOCK_RETURN_IF_ERROR(row(keys[index - 1], f, call.server));
  }
  return Status::Ok();
}

Result<std::vector<HolderInfo>> RedisBackend::List(std::string_view prefix) {
  const std::string what = "list " + Quoted(prefix);
  std::vector<HolderInfo> holders;
  // Fields: see scripts::List.
  const RowQuery q{prefix, LockPattern(prefix), &KeyFromLockName, &LockName,
                   {HoldersName, HoldInfoName, CounterName}, &scripts::List(), 8, "holdings",
                   "lock", what};
  Status s = ForEachRow(
      q, [&](const std::string& key, const redisReply* const* f, const std::string& server) {
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
  const RowQuery q{prefix, QueuePattern(prefix), &KeyFromQueueName, &QueueName,
                   {QueueExpiryName, QueueInfoName}, &scripts::Waiters(), 5, "waiters", "queue",
                   what};
  Status s = ForEachRow(
      q, [&](const std::string& key, const redisReply* const* f, const std::string&) {
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

Result<std::unique_ptr<Backend>> OpenCluster(const internal::Uri& uri,
                                             const internal::BackendParams& params) {
  return OpenWith(uri, params, ClusterOptionsFromUri);
}

}  // namespace dlock::redis
