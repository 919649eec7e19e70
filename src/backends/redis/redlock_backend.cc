// Redlock (opt-in, contested): the majority algorithm over N independent
// Redis nodes, as described at redis.io/docs/manual/patterns/distributed-locks.
//
//  1. Send SET-if-absent-or-ours with PX ttl to every node at once (each
//     node's reply bounded by node_timeout).
//  2. Granted when a majority (N/2 + 1) said yes and the validity
//     ttl - elapsed - (ttl * drift_factor + 2 ms) is still positive.
//  3. Otherwise release on every node (a lost reply may have granted).
//
// The core's valid_until (send time + ttl - drift margin, ttl/100 + 2 ms by
// default) is the same validity measured the same way. There is no token
// that orders grants across nodes: each node could keep a counter, but a
// majority of counters does not give "strictly larger than every earlier
// grant" once nodes restart or a minority drops out. Grants therefore carry
// token 0, which is never a real token (types.h) and which dlock's fences
// refuse. No queue and no pub/sub either: waiters poll (core backoff).
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "backends/redis/redis_backend.h"
#include "backends/redis/redis_conn.h"
#include "backends/redis/redis_keys.h"
#include "backends/redis/redis_scripts.h"
#include "backends/redis/redis_uri.h"

namespace dlock::redis {
namespace {

using std::chrono::milliseconds;

constexpr const char* kRedlockForm =
    "redlock://[user:password@]h1:6379,h2:6379,h3:6379[/db][?node_timeout=100ms]"
    "[&drift_factor=0.01]";

std::string Quoted(std::string_view key) { return "'" + std::string(key) + "'"; }

struct Node {
  Endpoint endpoint;
  std::unique_ptr<Connection> conn;  // null until connected, or after a failure
};

class RedlockBackend final : public Backend {
 public:
  RedlockBackend(std::vector<Endpoint> endpoints, ConnectOptions connect, milliseconds node_timeout,
                 double drift_factor, std::string describe, std::shared_ptr<Clock> clock)
      : connect_(std::move(connect)),
        node_timeout_(node_timeout),
        drift_factor_(drift_factor),
        describe_(std::move(describe)),
        clock_(clock ? std::move(clock) : DefaultClock()) {
    for (Endpoint& e : endpoints) nodes_.push_back(Node{std::move(e), nullptr});
  }

  std::size_t Majority() const { return nodes_.size() / 2 + 1; }
  bool OrdersTokens() const override { return false; }

  // kInvalidArgument or kPermissionDenied (a wrong password, ...) from any node, or kUnavailable
  // unless a majority can be reached.
  Status Verify() {
    std::lock_guard lock(mu_);
    std::size_t up = 0;
    std::string errors;
    for (Node& n : nodes_) {
      auto c = Connection::Open(n.endpoint, connect_, false, true, "connect");
      if (c.ok()) {
        n.conn = std::move(*c);
        ++up;
      } else if (IsFinal(c.status())) {
        return c.status();
      } else {
        errors += "; " + c.status().message();
      }
    }
    if (up < Majority()) {
      return UnavailableError("redlock: only " + std::to_string(up) + " of " +
                              std::to_string(nodes_.size()) + " nodes reachable, " +
                              std::to_string(Majority()) + " needed" + errors);
    }
    return Status::Ok();
  }

  Result<Attempt> TryAcquire(const LeaseRequest& request) override;
  Status Release(std::string_view key, const OwnerId& owner) override;
  std::vector<Status> Renew(std::span<const LeaseRequest> leases) override;
  Result<std::vector<HolderInfo>> List(std::string_view prefix) override;
  std::string Describe() const override { return describe_ + kRedlockLabel; }
  // One trivial script on every node at once: a Redlock round's floor.
  Status Ping() override {
    std::lock_guard lock(mu_);
    std::size_t ok = 0;
    Status last = UnavailableError("redlock ping: no node answered");
    for (const NodeResult& r : EvalAll(scripts::Ping(), {}, {}, "redlock ping")) {
      if (r.status.ok()) {
        ++ok;
      } else {
        last = r.status;
      }
    }
    return ok >= Majority() ? Status::Ok() : last;
  }

 private:
  struct NodeResult {
    Status status;  // OK: `replies` holds the script's reply (and extras)
    std::vector<ReplyPtr> replies;
  };
  // For List: the owners each node names for a key, with their votes.
  struct Seen {
    std::string owner;
    std::size_t votes = 0;
    long long ttl = 0;
  };
  using SeenByKey = std::map<std::string, std::vector<Seen>>;

  // One script on every node, all in flight at once; each node's reply is
  // read within node_timeout of the send. Under mu_.
  std::vector<NodeResult> EvalAll(const Script& script, std::span<const std::string> keys,
                                  std::span<const std::string> args, std::string_view what);
  // EvalAll's halves for one node: send `command` (connecting first if
  // needed), then read its reply, sending `script`'s text on NOSCRIPT.
  Status Send(Node& n, const Command& command, std::string_view what);
  NodeResult Receive(Node& n, const Script& script, const Command& command, std::string_view what);
  // For List: the lock names on node `n` matching `pattern`, and adds what
  // the node says of those whose key starts with `prefix` to `seen`. False
  // when the node did not answer.
  bool ListNode(Node& n, std::string_view prefix, std::string_view what, SeenByKey& seen);
  Status ReleaseLocked(std::string_view key, const OwnerId& owner);

  const ConnectOptions connect_;
  const milliseconds node_timeout_;
  const double drift_factor_;
  const std::string describe_;
  const std::shared_ptr<Clock> clock_;

  // One connection per node, used by one call at a time: a Redlock round is
  // short (node_timeout bounds it), so calls simply take turns.
  std::mutex mu_;
  std::vector<Node> nodes_;
};

std::vector<RedlockBackend::NodeResult> RedlockBackend::EvalAll(const Script& script,
                                                                std::span<const std::string> keys,
                                                                std::span<const std::string> args,
                                                                std::string_view what) {
  std::vector<NodeResult> results(nodes_.size());
  Command evalsha{"EVALSHA", script.sha1, std::to_string(keys.size())};
  evalsha.insert(evalsha.end(), keys.begin(), keys.end());
  evalsha.insert(evalsha.end(), args.begin(), args.end());
  // Send to every node first, then read: the requests travel in parallel.
  std::vector<bool> sent(nodes_.size(), false);
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    results[i].status = Send(nodes_[i], evalsha, what);
    sent[i] = results[i].status.ok();
  }
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (sent[i]) results[i] = Receive(nodes_[i], script, evalsha, what);
  }
  return results;
}

Status RedlockBackend::Send(Node& n, const Command& command, std::string_view what) {
  if (!n.conn || n.conn->broken()) {
    ConnectOptions quick = connect_;
    quick.connect_timeout = std::min(connect_.connect_timeout, node_timeout_);
    auto c = Connection::Open(n.endpoint, quick, false, false, what);
    if (!c.ok()) {
      n.conn.reset();
      return c.status();
    }
    n.conn = std::move(*c);
  }
  Status sent = n.conn->Send(std::span<const Command>(&command, 1), node_timeout_, what);
  if (!sent.ok()) n.conn.reset();
  return sent;
}

RedlockBackend::NodeResult RedlockBackend::Receive(Node& n, const Script& script,
                                                   const Command& command, std::string_view what) {
  NodeResult result;
  auto received = n.conn->Receive(what);
  if (!received.ok()) {
    result.status = received.status();
    n.conn.reset();
    return result;
  }
  ReplyPtr reply = std::move(*received);
  if (IsNoScript(reply.get())) {
    // Not cached on this node yet (restarted): once more with the text.
    Command eval = command;
    eval[0] = "EVAL";
    eval[1] = script.text;
    auto again = n.conn->Call(eval, node_timeout_, what);
    if (!again.ok()) {
      result.status = again.status();
      n.conn.reset();
      return result;
    }
    reply = std::move(*again);
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    result.status = ReplyError(reply.get(), n.endpoint.Text(), what);
    return result;
  }
  result.replies.push_back(std::move(reply));
  return result;
}

Result<Attempt> RedlockBackend::TryAcquire(const LeaseRequest& request) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(request.key));
  DLOCK_RETURN_IF_ERROR(ValidateTtl(request.ttl));
  if (request.owner.empty()) return InvalidArgumentError("acquire: the owner id is empty");
  const std::string what = "redlock acquire " + Quoted(request.key);
  const std::string keys[] = {LockName(request.key)};
  const std::string args[] = {request.owner.ToString(), std::to_string(request.ttl.count())};

  std::lock_guard lock(mu_);
  const TimePoint start = clock_->Now();
  std::vector<NodeResult> results = EvalAll(scripts::RedlockAcquire(), keys, args, what);
  const Duration elapsed = clock_->Now() - start;
  std::size_t granted = 0, refused = 0;
  milliseconds holder_left = milliseconds::max();
  Status last_error, invalid;
  for (const NodeResult& r : results) {
    if (!r.status.ok()) {
      if (IsFinal(r.status)) invalid = r.status;
      last_error = r.status;
      continue;
    }
    const redisReply* reply = r.replies[0].get();
    long long ok = 0, ms = 0;
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
        !ReplyInt(reply->element[0], &ok) || !ReplyInt(reply->element[1], &ms)) {
      last_error = UnavailableError(what + ": a node answered oddly");
      continue;
    }
    if (ok == 1) {
      ++granted;
    } else {
      ++refused;
      holder_left = std::min(holder_left, milliseconds(ms));
    }
  }
  const Duration drift = std::chrono::duration_cast<Duration>(
      std::chrono::duration<double, std::milli>(static_cast<double>(request.ttl.count()) *
                                                drift_factor_)) +
                         milliseconds(2);
  const Duration validity = Duration(request.ttl) - elapsed - drift;
  if (granted >= Majority() && validity > Duration::zero()) {
    return Attempt{true, 0, milliseconds(0)};
  }
  // Not granted: undo the minority (and any grant whose reply was lost).
  (void)ReleaseLocked(request.key, request.owner);
  if (!invalid.ok()) return invalid;
  if (refused + granted < Majority()) {
    return UnavailableError(what + ": only " + std::to_string(refused + granted) + " of " +
                            std::to_string(nodes_.size()) + " nodes answered, " +
                            std::to_string(Majority()) + " needed for a majority: " +
                            last_error.message());
  }
  if (granted >= Majority()) {
    return UnavailableError(what + ": a majority granted, but only after " +
                            std::to_string(std::chrono::duration_cast<milliseconds>(elapsed).count()) +
                            " ms, too late for a ttl of " + std::to_string(request.ttl.count()) +
                            " ms");
  }
  return Attempt{false, 0, holder_left == milliseconds::max() ? milliseconds(0) : holder_left};
}

Status RedlockBackend::ReleaseLocked(std::string_view key, const OwnerId& owner) {
  const std::string what = "redlock release " + Quoted(key);
  const std::string keys[] = {LockName(key)};
  const std::string args[] = {owner.ToString()};
  std::vector<NodeResult> results = EvalAll(scripts::RedlockRelease(), keys, args, what);
  std::size_t other = 0, failed = 0;
  Status last_error;
  for (const NodeResult& r : results) {
    long long v = 0;
    if (!r.status.ok() || !ReplyInt(r.replies[0].get(), &v)) {
      ++failed;
      last_error = r.status.ok() ? UnavailableError(what + ": a node answered oddly") : r.status;
    } else if (v < 0) {
      ++other;
    }
  }
  if (other >= Majority()) return NotOwnerError(what + ": a majority of nodes name another owner");
  if (failed >= Majority()) return last_error;
  return Status::Ok();
}

Status RedlockBackend::Release(std::string_view key, const OwnerId& owner) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  std::lock_guard lock(mu_);
  return ReleaseLocked(key, owner);
}

std::vector<Status> RedlockBackend::Renew(std::span<const LeaseRequest> leases) {
  std::vector<Status> result(leases.size());
  std::vector<std::size_t> index;
  std::vector<std::string> keys, args;
  for (std::size_t i = 0; i < leases.size(); ++i) {
    result[i] = ValidateKey(leases[i].key);
    if (result[i].ok()) result[i] = ValidateTtl(leases[i].ttl);
    if (!result[i].ok()) continue;
    index.push_back(i);
    keys.push_back(LockName(leases[i].key));
    args.push_back(leases[i].owner.ToString());
    args.push_back(std::to_string(leases[i].ttl.count()));
  }
  if (index.empty()) return result;
  std::lock_guard lock(mu_);
  std::vector<NodeResult> results = EvalAll(scripts::RedlockRenew(), keys, args, "redlock renew");
  for (std::size_t j = 0; j < index.size(); ++j) {
    std::size_t renewed = 0, lost = 0;
    Status last_error = UnavailableError("redlock renew: no node answered");
    for (const NodeResult& r : results) {
      const redisReply* reply = r.status.ok() ? r.replies[0].get() : nullptr;
      long long v = -1;
      if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY || reply->elements != index.size() ||
          !ReplyInt(reply->element[j], &v)) {
        if (!r.status.ok()) last_error = r.status;
        continue;
      }
      (v == 1 ? renewed : lost)++;
    }
    const LeaseRequest& lease = leases[index[j]];
    if (renewed >= Majority()) continue;
    if (lost > nodes_.size() - Majority()) {
      result[index[j]] = NotOwnerError("lease on key " + Quoted(lease.key) +
                                       " is held by this owner on fewer than a majority of nodes");
    } else {
      result[index[j]] = last_error;
    }
  }
  return result;
}

bool RedlockBackend::ListNode(Node& n, std::string_view prefix, std::string_view what,
                              SeenByKey& seen) {
  if (!n.conn || n.conn->broken()) {
    auto c = Connection::Open(n.endpoint, connect_, false, false, what);
    if (!c.ok()) return false;
    n.conn = std::move(*c);
  }
  std::vector<std::string> names;
  std::string cursor = "0";
  do {
    auto reply = n.conn->Call({"SCAN", cursor, "MATCH", LockPattern(prefix), "COUNT", "1000"},
                              node_timeout_ * 10, what);
    if (!reply.ok() || (*reply)->type != REDIS_REPLY_ARRAY || (*reply)->elements != 2) {
      return false;
    }
    cursor = ReplyString((*reply)->element[0]);
    for (std::size_t i = 0; i < (*reply)->element[1]->elements; ++i) {
      names.push_back(ReplyString((*reply)->element[1]->element[i]));
    }
  } while (cursor != "0");
  if (names.empty()) return true;
  std::vector<std::string> pairs;
  for (const std::string& name : names) {
    pairs.push_back(name);
    pairs.push_back(CounterNameOfLock(name));
  }
  auto replies = n.conn->Eval(scripts::RedlockList(), pairs, {}, {}, node_timeout_ * 10, what);
  if (!replies.ok() || (*replies)[0]->type != REDIS_REPLY_ARRAY) return true;
  const redisReply* r = (*replies)[0].get();
  for (std::size_t i = 0; i + 3 < r->elements; i += 4) {
    auto key = KeyFromLockName(ReplyString(r->element[i]));
    const std::string owner = ReplyString(r->element[i + 1]);
    long long ttl = 0;
    ReplyInt(r->element[i + 2], &ttl);
    if (!key || !key->starts_with(prefix) || ttl <= 0) continue;
    auto& list = seen[*key];
    auto it =
        std::find_if(list.begin(), list.end(), [&](const Seen& s) { return s.owner == owner; });
    if (it == list.end()) {
      list.push_back(Seen{owner, 1, ttl});
    } else {
      it->votes++;
      it->ttl = std::min(it->ttl, ttl);
    }
  }
  return true;
}

Result<std::vector<HolderInfo>> RedlockBackend::List(std::string_view prefix) {
  // Listing per node and voting would need a SCAN on every node; `dlock
  // status` on Redlock shows what a majority agrees on, key by key.
  const std::string what = "redlock list " + Quoted(prefix);
  std::lock_guard lock(mu_);
  SeenByKey seen;
  std::size_t answered = 0;
  for (Node& n : nodes_) {
    if (ListNode(n, prefix, what, seen)) ++answered;
  }
  if (answered < Majority()) {
    return UnavailableError(what + ": only " + std::to_string(answered) + " of " +
                            std::to_string(nodes_.size()) + " nodes answered");
  }
  std::vector<HolderInfo> holders;
  for (auto& [key, list] : seen) {
    for (const Seen& s : list) {
      auto owner = OwnerId::Parse(s.owner);
      if (s.votes >= Majority() && owner.ok()) {
        holders.push_back(HolderInfo{key, *owner, 0, milliseconds(s.ttl)});
      }
    }
  }
  return holders;
}

}  // namespace

Result<std::unique_ptr<Backend>> OpenRedlock(const internal::Uri& uri,
                                             const internal::BackendParams& params) {
  DLOCK_RETURN_IF_ERROR(uri.CheckParams({"node_timeout", "drift_factor"}));
  DLOCK_ASSIGN_OR_RETURN(std::vector<Endpoint> endpoints,
                         ParseEndpoints(uri.hosts, 6379, "redlock URI " + uri.Redacted()));
  if (endpoints.size() < 3) {
    return BadUri(uri, "Redlock needs at least 3 independent nodes (5 are usual)", kRedlockForm);
  }
  ConnectOptions connect = BaseConnectOptions(uri, params);
  std::string_view path = uri.path;
  if (path.starts_with('/')) path.remove_prefix(1);
  if (!path.empty()) {
    DLOCK_ASSIGN_OR_RETURN(connect.db, ParseDb(path, uri));
  }
  DLOCK_ASSIGN_OR_RETURN(const milliseconds node_timeout,
                         DurationParam(uri, "node_timeout", milliseconds(100), milliseconds(1),
                                       std::chrono::minutes(1)));
  double drift_factor = 0.01;
  if (const std::string* d = uri.Param("drift_factor")) {
    char* end = nullptr;
    drift_factor = std::strtod(d->c_str(), &end);
    if (d->empty() || end != d->c_str() + d->size() || !(drift_factor >= 0) || drift_factor >= 0.5) {
      return BadUri(uri, "drift_factor '" + *d + "' must be a number from 0 to 0.5", kRedlockForm);
    }
  }
  auto backend =
      std::make_unique<RedlockBackend>(std::move(endpoints), std::move(connect), node_timeout,
                                       drift_factor, uri.Redacted(), params.clock);
  DLOCK_RETURN_IF_ERROR(backend->Verify());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace dlock::redis
