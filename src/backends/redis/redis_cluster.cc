#include "backends/redis/redis_cluster.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <thread>
#include <utility>

#include "core/duration.h"

namespace dlock::redis {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;
using SteadyTime = ClusterRouter::SteadyTime;

// More hops than a slot being migrated while its map is reloaded needs.
constexpr int kMaxRedirects = 5;
// The map is reloaded at most this often, however many calls find it stale.
constexpr milliseconds kRefreshInterval{100};
// After reloads that failed: no other before this backoff, doubled per
// failure up to kMaxReloadBackoff (the calls use the map in hand meanwhile).
constexpr milliseconds kMaxReloadBackoff{1000};
constexpr std::size_t kMaxIdlePerNode = 4;
// A node that failed (refused, timed out) is asked for the map after the
// others for this long: one paused node must not cost every reload.
constexpr milliseconds kFailedMemory{10'000};
// A reload asks each node within half of what is left of its deadline (the
// last node asked: all of it), but at least this long.
constexpr milliseconds kMinShare{50};
// TRYAGAIN (a slot being migrated): the pause before the call is tried
// again, doubled each time up to the second.
constexpr milliseconds kFirstTryAgainPause{10};
constexpr milliseconds kMaxTryAgainPause{200};

// What is left of `deadline` in whole milliseconds (rounded up), 0 once it
// has passed.
milliseconds Left(SteadyTime deadline) {
  if (deadline == SteadyTime::max()) return milliseconds::max();
  return std::max(milliseconds(0), std::chrono::ceil<milliseconds>(deadline - SteadyClock::now()));
}

Status NoTimeLeft(std::string_view what, const std::string& server) {
  return UnavailableError(std::string(what) + ": Redis at " + server +
                          " was not asked: the call's deadline had passed");
}

bool Same(const Endpoint& a, const Endpoint& b) { return a.host == b.host && a.port == b.port; }

// `failed`, a connect to `node`, which the cluster named (CLUSTER SLOTS,
// MOVED, ASK) rather than the URI: when the node's certificate did not
// verify for that address (redis_transport.cc's words), says where the
// address came from, since the URI does not show it.
Status ExplainAnnounced(const Status& failed, const Endpoint& node) {
  if (failed.code() != StatusCode::kPermissionDenied ||
      failed.message().find("certificate for " + node.host + " did not verify") ==
          std::string::npos) {
    return failed;
  }
  return Status(failed.code(),
                failed.message() +
                    " (the cluster announces this node as " + node.Text() +
                    ", and its certificate must name that address: have each node announce a "
                    "name its certificate carries, with cluster-announce-hostname and "
                    "cluster-preferred-endpoint-type hostname, or put the address in the "
                    "certificate)");
}

}  // namespace

// A pooled connection, given back on scope exit (dropped if broken).
class ClusterRouter::Pooled {
 public:
  Pooled(ClusterRouter* router, Endpoint node, std::unique_ptr<Connection> c, std::uint64_t gen)
      : router_(router), node_(std::move(node)), c_(std::move(c)), gen_(gen) {}
  Pooled(Pooled&&) = default;
  ~Pooled() {
    if (c_) router_->Give(node_, std::move(c_), gen_);
  }
  Connection* operator->() { return c_.get(); }
  // Closes the connection without a word to its pool: our own deadline
  // ended the exchange, which says nothing of the node's other connections.
  void Drop() { c_.reset(); }

 private:
  ClusterRouter* router_;
  Endpoint node_;
  std::unique_ptr<Connection> c_;
  std::uint64_t gen_;
};

struct ClusterRouter::Exchange {
  Pooled* conn = nullptr;
  std::size_t want = 0;
  Result<std::vector<ReplyPtr>> replies = std::vector<ReplyPtr>();
};

ClusterRouter::ClusterRouter(std::vector<Endpoint> seeds, ConnectOptions options)
    : seeds_(std::move(seeds)), options_(std::move(options)) {}

ClusterRouter::~ClusterRouter() = default;

void ClusterRouter::MarkStale() {
  std::lock_guard lock(mu_);
  stale_ = true;
}

Result<std::unique_ptr<Connection>> ClusterRouter::Open(const Endpoint& node,
                                                        std::string_view what) {
  return Connection::Open(node, options_, false, false, what);
}

std::optional<ClusterRouter::Pooled> ClusterRouter::TakeIdle(const Endpoint& node) {
  std::lock_guard lock(mu_);
  Pool& pool = pools_[node.Text()];
  while (!pool.idle.empty()) {
    std::unique_ptr<Connection> c = std::move(pool.idle.back());
    pool.idle.pop_back();
    // Closed while idle (restart, failover): the others likely are too.
    if (c->PeerClosed(milliseconds(20))) {
      pool.idle.clear();
      ++pool.generation;
      stale_ = true;
      break;
    }
    return Pooled(this, node, std::move(c), pool.generation);
  }
  return std::nullopt;
}

Result<ClusterRouter::Pooled> ClusterRouter::Take(const Endpoint& node, SteadyTime deadline,
                                                  std::string_view what) {
  if (std::optional<Pooled> idle = TakeIdle(node)) return std::move(*idle);
  std::uint64_t gen;
  {
    std::lock_guard lock(mu_);
    gen = pools_[node.Text()].generation;
  }
  const milliseconds left = Left(deadline);
  if (left == milliseconds(0)) return NoTimeLeft(what, node.Text());
  ConnectOptions options = options_;
  options.connect_timeout = std::min(options.connect_timeout, left);
  auto c = Connection::Open(node, options, false, false, what);
  if (!c.ok()) {
    // Dead, or not there yet: the map may name a primary that is gone
    // (read before the failover ended), so it is read again, lest every
    // later call be refused by the same dead node.
    NoteFailedWithin(node, options.connect_timeout, deadline);
    const bool seed = std::any_of(seeds_.begin(), seeds_.end(),
                                  [&](const Endpoint& e) { return Same(e, node); });
    return seed ? c.status() : ExplainAnnounced(c.status(), node);
  }
  return Pooled(this, node, std::move(*c), gen);
}

void ClusterRouter::NoteFailed(const Endpoint& node) {
  std::lock_guard lock(mu_);
  stale_ = true;
  failed_at_[node.Text()] = SteadyClock::now();
}

bool ClusterRouter::NoteFailedWithin(const Endpoint& node, milliseconds given,
                                     SteadyTime deadline) {
  if (given < kMinShare && Left(deadline) == milliseconds(0)) return false;
  NoteFailed(node);
  return true;
}

void ClusterRouter::Give(const Endpoint& node, std::unique_ptr<Connection> c,
                         std::uint64_t generation) {
  std::lock_guard lock(mu_);
  Pool& pool = pools_[node.Text()];
  if (c->broken()) {
    // The node may be dead or demoted: the map is reloaded before the next
    // call, and the node's idle connections are not trusted either.
    stale_ = true;
    if (generation == pool.generation) {
      ++pool.generation;
      pool.idle.clear();
    }
    return;
  }
  if (generation == pool.generation && pool.idle.size() < kMaxIdlePerNode) {
    pool.idle.push_back(std::move(c));
  }
}

std::vector<Endpoint> ClusterRouter::RefreshCandidates() {
  std::vector<Endpoint> out;
  auto add = [&](const Endpoint& e) {
    if (std::none_of(out.begin(), out.end(), [&](const Endpoint& o) { return Same(o, e); })) {
      out.push_back(e);
    }
  };
  std::lock_guard lock(mu_);
  if (have_map_) {
    for (const Endpoint& e : map_.primaries) add(e);
    for (const Endpoint& e : map_.nodes) add(e);
  }
  for (const Endpoint& e : seeds_) add(e);
  // Nodes that failed lately go last, in the order they failed.
  const SteadyTime now = SteadyClock::now();
  std::erase_if(failed_at_, [&](const auto& item) { return now - item.second > kFailedMemory; });
  auto failed_at = [&](const Endpoint& e) {
    auto it = failed_at_.find(e.Text());
    return it == failed_at_.end() ? SteadyTime::min() : it->second;
  };
  std::stable_sort(out.begin(), out.end(), [&](const Endpoint& x, const Endpoint& y) {
    return failed_at(x) < failed_at(y);
  });
  return out;
}

Result<SlotMap> ClusterRouter::AskForMap(const Endpoint& node, SteadyTime deadline,
                                         std::string_view doing) {
  const Command slots{"CLUSTER", "SLOTS"};
  bool sent = false;
  DLOCK_ASSIGN_OR_RETURN(auto replies, RunAt(node, false, {&slots, 1}, deadline, doing, &sent));
  return ParseClusterSlots(replies[0].get(), node, node.Text());
}

void ClusterRouter::Install(SlotMap map) {
  std::lock_guard lock(mu_);
  map_ = std::move(map);
  have_map_ = true;
  stale_ = false;
  // Connections to nodes that are no longer primaries go.
  std::erase_if(pools_, [&](const auto& item) {
    return std::none_of(map_.primaries.begin(), map_.primaries.end(),
                        [&](const Endpoint& e) { return e.Text() == item.first; });
  });
}

Status ClusterRouter::Reload(std::string_view what, SteadyTime deadline, int* blamed) {
  const std::string doing = std::string(what) + ": read the cluster's slot map";
  std::string errors;
  // A refusal that is the same on every node (a password, an ACL user, not
  // a cluster node) is reported as such if no node answers; one node
  // lacking the user must not stop the others from being asked.
  std::optional<Status> final_error;
  const std::vector<Endpoint> candidates = RefreshCandidates();
  for (std::size_t k = 0; k < candidates.size(); ++k) {
    const Endpoint& node = candidates[k];
    const milliseconds left = Left(deadline);
    // The first node is asked whatever is left (RefreshIfStale starts no
    // reload with less than kMinShare); the others need that much.
    if (left == milliseconds(0) || (k > 0 && left < kMinShare)) {
      errors += "; no time left to ask " + node.Text();
      break;
    }
    // A share of what is left, so that a node that takes the command and
    // never answers (paused) leaves time to ask the others.
    milliseconds share = std::min(left, options_.connect_timeout);
    if (deadline != kNoDeadline && k + 1 < candidates.size()) {
      share = std::min(share, std::max(left / 2, std::min(left, kMinShare)));
    }
    const SteadyTime share_end = std::min(deadline, SteadyClock::now() + share);
    auto map = AskForMap(node, share_end, doing);
    if (map.ok()) {
      Install(std::move(*map));
      std::lock_guard lock(mu_);
      failed_at_.erase(node.Text());
      return Status::Ok();
    }
    if (NoteFailedWithin(node, share, share_end) && blamed != nullptr) ++*blamed;
    if (IsFinal(map.status()) && !final_error) final_error = map.status();
    errors += "; " + map.status().message();
  }
  if (final_error) return *final_error;
  return UnavailableError(doing + ": no node of the cluster answered" + errors);
}

Status ClusterRouter::Refresh(std::string_view what, SteadyTime deadline) {
  return Reload(what, deadline);
}

void ClusterRouter::RefreshIfStale(std::string_view what, SteadyTime deadline) {
  std::unique_lock lock(mu_);
  if (have_map_ && !stale_) return;
  // Another call reloads: with a map in hand this one goes on with it (a
  // MOVED corrects what it got wrong) rather than wait on a reload that
  // may be stuck on a paused node; without one it waits.
  if (reloading_ && have_map_) return;
  while (reloading_) {
    const SteadyTime until = std::min(deadline, SteadyClock::now() + options_.connect_timeout);
    if (reloaded_.wait_until(lock, until) == std::cv_status::timeout) return;
  }
  if (have_map_ && !stale_) return;
  if (SteadyClock::now() < next_reload_) return;  // the map in hand, if any, is used
  // A call with less than a node's share left could not tell a healthy
  // node from a dead one: it would mark them failed and back off the
  // reloads of calls that have time.
  if (Left(deadline) < kMinShare) return;
  reloading_ = true;
  lock.unlock();
  int blamed = 0;
  const Status reloaded = Reload(what, deadline, &blamed);
  lock.lock();
  reloading_ = false;
  // Failures count too: a cluster that cannot be reached is not asked again
  // by every call, each spending its budget on it. A reload that ran out of
  // its own time before any node was given its share does not count.
  if (reloaded.ok()) {
    failed_reloads_ = 0;
    next_reload_ = SteadyClock::now() + kRefreshInterval;
  } else if (blamed > 0) {
    ++failed_reloads_;
    next_reload_ = SteadyClock::now() + std::min(kMaxReloadBackoff,
                                                 kRefreshInterval *
                                                     (1 << std::min(failed_reloads_, 4)));
  }
  reloaded_.notify_all();
}

Result<Endpoint> ClusterRouter::PrimaryOf(std::uint16_t slot, std::string_view what,
                                          SteadyTime deadline) {
  RefreshIfStale(what, deadline);
  std::lock_guard lock(mu_);
  if (!have_map_) {
    return UnavailableError(std::string(what) + ": no node of the cluster gave its slot map");
  }
  std::optional<Endpoint> primary = map_.PrimaryOf(slot);
  if (!primary) {
    // Left out of the map (its node's address was unknown, '?') or unserved
    // when it was read: no command goes to the slot, so no MOVED can come
    // to correct it; only a reload can (the next call's, after the backoff).
    stale_ = true;
    return UnavailableError(std::string(what) + ": no primary of the cluster serves hash slot " +
                            std::to_string(slot) + " now (a failover may be under way)");
  }
  return *primary;
}

Result<std::vector<Endpoint>> ClusterRouter::Primaries(std::string_view what,
                                                       SteadyTime deadline) {
  RefreshIfStale(what, deadline);
  std::lock_guard lock(mu_);
  if (!have_map_) {
    return UnavailableError(std::string(what) + ": no node of the cluster gave its slot map");
  }
  return map_.primaries;
}

void ClusterRouter::Collect(std::span<Exchange> exchanges, SteadyTime deadline,
                            std::string_view what) {
  auto pending = [](const Exchange& e) { return e.replies.ok() && e.replies->size() < e.want; };
  std::vector<pollfd> fds;
  std::vector<Exchange*> polled;
  for (;;) {
    fds.clear();
    polled.clear();
    for (Exchange& e : exchanges) {
      if (!pending(e)) continue;
      fds.push_back({(*e.conn)->fd(), POLLIN, 0});
      polled.push_back(&e);
    }
    if (fds.empty()) return;
    const milliseconds left = Left(deadline);
    const int n = left == milliseconds(0)
                      ? 0
                      : poll(fds.data(), fds.size(),
                             static_cast<int>(std::min<milliseconds::rep>(left.count(), 60'000)));
    if (n < 0 && errno == EINTR) continue;
    // poll() itself failing is as final as the deadline: no reply can come.
    if ((n == 0 && Left(deadline) == milliseconds(0)) || n < 0) {
      // Replies still owed past the deadline: the connections are dropped,
      // so that no later call reads them as its own.
      for (Exchange* e : polled) {
        e->replies = (*e->conn)->Abandon(what);
      }
      return;
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Exchange& e = *polled[i];
      auto got = (*e.conn)->ReceiveAvailable(what);
      if (!got.ok()) {
        e.replies = got.status();
        continue;
      }
      for (ReplyPtr& r : *got) e.replies->push_back(std::move(r));
    }
  }
}

Result<std::vector<ReplyPtr>> ClusterRouter::RunAt(const Endpoint& node, bool ask,
                                                   std::span<const Command> commands,
                                                   SteadyTime deadline, std::string_view what,
                                                   bool* sent) {
  *sent = false;
  DLOCK_ASSIGN_OR_RETURN(Pooled conn, Take(node, deadline, what));
  const milliseconds left = Left(deadline);
  if (left == milliseconds(0)) return NoTimeLeft(what, node.Text());
  std::vector<Command> asking;
  if (ask) {
    asking.push_back({"ASKING"});
    asking.insert(asking.end(), commands.begin(), commands.end());
    commands = asking;
  }
  *sent = true;
  DLOCK_RETURN_IF_ERROR(conn->Send(commands, left, what));
  Exchange exchange{&conn, commands.size()};
  Collect({&exchange, 1}, deadline, what);
  if (!exchange.replies.ok() && !NoteFailedWithin(node, left, deadline)) conn.Drop();
  DLOCK_ASSIGN_OR_RETURN(std::vector<ReplyPtr> replies, std::move(exchange.replies));
  if (ask) replies.erase(replies.begin());
  return replies;
}

Result<ClusterRouter::Routed> ClusterRouter::Run(std::uint16_t slot,
                                                 std::span<const Command> commands,
                                                 SteadyTime deadline, std::string_view what) {
  DLOCK_ASSIGN_OR_RETURN(Endpoint node, PrimaryOf(slot, what, deadline));
  bool ask = false;
  std::string last_redirect;
  milliseconds pause = kFirstTryAgainPause;
  for (int hop = 0; hop <= kMaxRedirects;) {
    bool sent = false;
    auto replies = RunAt(node, ask, commands, deadline, what, &sent);
    if (!replies.ok()) {
      // Broken mid-call: its outcome is unknown, and the caller decides.
      // Unreachable: if the slot has another primary by now, the call,
      // which never left, goes there.
      const Status failed = replies.status();
      if (sent || IsFinal(failed) || Left(deadline) == milliseconds(0)) return failed;
      MarkStale();
      auto now_serving = PrimaryOf(slot, what, deadline);
      if (!now_serving.ok() || Same(*now_serving, node)) return failed;
      node = *now_serving;
      ask = false;
      continue;
    }
    const redisReply* first = (*replies)[0].get();
    if (first->type != REDIS_REPLY_ERROR) return Routed{std::move(*replies), node.Text()};
    const std::string error = ReplyString(first);
    DLOCK_ASSIGN_OR_RETURN(std::optional<Redirect> redirect,
                           ParseRedirect(error, node, node.Text()));
    if (!redirect) {
      // Refused whole while its slot migrates (some of its keys on each
      // side): nothing ran. Tried again after a pause, from the slot's
      // owner, while the deadline leaves room; a slot migrates in
      // milliseconds to seconds.
      if (error.starts_with("TRYAGAIN") && Left(deadline) > pause) {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, kMaxTryAgainPause);
        DLOCK_ASSIGN_OR_RETURN(node, PrimaryOf(slot, what, deadline));
        ask = false;
        hop = 0;  // each try may be redirected (ASK) anew
        continue;
      }
      if (error.starts_with("CLUSTERDOWN")) MarkStale();
      return Routed{std::move(*replies), node.Text()};
    }
    if (!redirect->ask) {
      std::lock_guard lock(mu_);
      map_.Assign(redirect->slot, redirect->node);
      stale_ = true;
    }
    last_redirect = error;
    node = redirect->node;
    ask = redirect->ask;
    ++hop;
    if (Left(deadline) == milliseconds(0)) break;
  }
  return UnavailableError(std::string(what) + ": Redis Cluster kept redirecting the call (last: '" +
                          last_redirect +
                          "') until its deadline: its slots are moving; try again");
}

Result<ClusterRouter::Routed> ClusterRouter::Eval(std::uint16_t slot, const Script& script,
                                                  std::span<const std::string> keys,
                                                  std::span<const std::string> args,
                                                  std::span<const Command> extra,
                                                  SteadyTime deadline, std::string_view what) {
  std::string server;
  auto replies = EvalThrough(
      [&](std::span<const Command> commands) -> Result<std::vector<ReplyPtr>> {
        DLOCK_ASSIGN_OR_RETURN(Routed routed, Run(slot, commands, deadline, what));
        server = std::move(routed.server);
        return std::move(routed.replies);
      },
      script, keys, args, extra);
  if (!replies.ok()) return replies.status();
  return Routed{std::move(*replies), std::move(server)};
}

std::vector<std::optional<ClusterRouter::Pooled>> ClusterRouter::TakeAll(
    std::span<NodeBatch> batches, SteadyTime deadline, std::string_view what) {
  std::vector<std::optional<Pooled>> conns(batches.size());
  std::vector<std::size_t> to_connect;
  for (std::size_t i = 0; i < batches.size(); ++i) {
    if (std::optional<Pooled> idle = TakeIdle(batches[i].node)) {
      conns[i].emplace(std::move(*idle));
    } else {
      to_connect.push_back(i);
    }
  }
  // New connections are made at once, each on a thread of its own but the
  // last: one node that does not answer costs the call one connect timeout
  // (bounded by its deadline), not one per node.
  auto connect = [&](std::size_t i) {
    auto conn = Take(batches[i].node, deadline, what);
    if (conn.ok()) {
      conns[i].emplace(std::move(*conn));
    } else {
      batches[i].replies = conn.status();
    }
  };
  {
    std::vector<std::jthread> threads;
    for (std::size_t k = 0; k + 1 < to_connect.size(); ++k) {
      threads.emplace_back([&connect, i = to_connect[k]] { connect(i); });
    }
    if (!to_connect.empty()) connect(to_connect.back());
  }
  return conns;
}

void ClusterRouter::RunOnNodes(std::span<NodeBatch> batches, SteadyTime deadline,
                               std::string_view what) {
  std::vector<std::optional<Pooled>> conns = TakeAll(batches, deadline, what);
  std::vector<Exchange> exchanges;
  exchanges.reserve(batches.size());
  std::vector<std::size_t> of;      // exchanges[k] is batches[of[k]]'s
  std::vector<milliseconds> given;  // and was given given[k] to answer
  for (std::size_t i = 0; i < batches.size(); ++i) {
    if (!conns[i]) continue;
    const milliseconds left = Left(deadline);
    Status sent = left == milliseconds(0) ? NoTimeLeft(what, batches[i].node.Text())
                                          : (*conns[i])->Send(batches[i].commands, left, what);
    if (!sent.ok()) {
      batches[i].replies = sent;
      continue;
    }
    exchanges.push_back(Exchange{&*conns[i], batches[i].commands.size()});
    of.push_back(i);
    given.push_back(left);
  }
  Collect(exchanges, deadline, what);
  for (std::size_t k = 0; k < exchanges.size(); ++k) {
    if (!exchanges[k].replies.ok() && !NoteFailedWithin(batches[of[k]].node, given[k], deadline)) {
      conns[of[k]]->Drop();
    }
    batches[of[k]].replies = std::move(exchanges[k].replies);
  }
}

}  // namespace dlock::redis

namespace dlock::redis {
namespace {

// What to do with a call's reply `r` in a batch: keep it, send the call
// again with the script's text (the node did not know it), or run it alone
// (its node did not run it: a redirection, a slot being migrated).
enum class Next { kDone, kByText, kAlone };
Next NextFor(const redisReply* r) {
  if (r->type != REDIS_REPLY_ERROR) return Next::kDone;
  const std::string_view e(r->str, r->len);
  if (e.starts_with("NOSCRIPT")) return Next::kByText;
  if (e.starts_with("MOVED ") || e.starts_with("ASK ") || e.starts_with("TRYAGAIN")) {
    return Next::kAlone;
  }
  return Next::kDone;
}

Command EvalCommand(const Script& script, bool by_text, const ClusterRouter::SlotCall& call) {
  Command c{by_text ? "EVAL" : "EVALSHA", by_text ? script.text : script.sha1,
            std::to_string(call.keys.size())};
  c.insert(c.end(), call.keys.begin(), call.keys.end());
  c.insert(c.end(), call.args.begin(), call.args.end());
  return c;
}

}  // namespace

void ClusterRouter::EvalBatched(const Script& script, bool by_text, std::span<SlotCall> calls,
                                const std::vector<std::size_t>& which,
                                std::span<const Command> tail, const TailCheck& check_tail,
                                SteadyTime deadline, std::string_view what,
                                std::vector<std::size_t>* by_text_next,
                                std::vector<std::size_t>* alone) {
  std::vector<NodeBatch> batches;
  std::vector<std::vector<std::size_t>> members;  // batches[b] runs calls[members[b][i]]
  for (std::size_t i : which) {
    auto node = PrimaryOf(calls[i].slot, what, deadline);
    if (!node.ok()) {
      calls[i].reply = node.status();
      continue;
    }
    std::size_t b = 0;
    while (b < batches.size() && !Same(batches[b].node, *node)) ++b;
    if (b == batches.size()) {
      batches.push_back(NodeBatch{*node, {}});
      members.emplace_back();
    }
    batches[b].commands.push_back(EvalCommand(script, by_text, calls[i]));
    members[b].push_back(i);
  }
  for (NodeBatch& batch : batches)
    batch.commands.insert(batch.commands.end(), tail.begin(), tail.end());
  RunOnNodes(batches, deadline, what);
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const std::string server = batches[b].node.Text();
    Status failed = batches[b].replies.status();
    if (failed.ok() && check_tail) {
      failed = check_tail(std::span<const ReplyPtr>(*batches[b].replies).subspan(members[b].size()),
                          server);
    }
    for (std::size_t m = 0; m < members[b].size(); ++m) {
      SlotCall& call = calls[members[b][m]];
      call.server = server;
      if (!failed.ok()) {
        call.reply = failed;
        continue;
      }
      ReplyPtr& reply = (*batches[b].replies)[m];
      const Next next = NextFor(reply.get());
      if (next == Next::kByText && !by_text) {
        by_text_next->push_back(members[b][m]);
      } else if (next == Next::kAlone) {
        alone->push_back(members[b][m]);
      } else {
        call.reply = std::move(reply);
      }
    }
  }
}

void ClusterRouter::EvalEach(const Script& script, std::span<SlotCall> calls,
                             std::span<const Command> tail, const TailCheck& check_tail,
                             SteadyTime deadline, std::string_view what) {
  std::vector<std::size_t> all(calls.size()), by_text, alone;
  for (std::size_t i = 0; i < calls.size(); ++i) all[i] = i;
  EvalBatched(script, false, calls, all, tail, check_tail, deadline, what, &by_text, &alone);
  // A node that did not know the script (restarted, promoted, flushed):
  // its calls again, batched, with the text, which caches it there.
  if (!by_text.empty()) {
    std::vector<std::size_t> none;  // a pass by text sends nothing by text again
    EvalBatched(script, true, calls, by_text, tail, check_tail, deadline, what, &none, &alone);
  }
  for (std::size_t i : alone) {
    SlotCall& call = calls[i];
    auto routed = Eval(call.slot, script, call.keys, call.args, tail, deadline, what);
    if (!routed.ok()) {
      call.reply = routed.status();
      continue;
    }
    call.server = routed->server;
    Status tail_ok = check_tail ? check_tail(std::span<const ReplyPtr>(routed->replies).subspan(1),
                                             routed->server)
                                : Status::Ok();
    if (tail_ok.ok()) {
      call.reply = std::move(routed->replies[0]);
    } else {
      call.reply = tail_ok;
    }
  }
}

}  // namespace dlock::redis
