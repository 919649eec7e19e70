#include "backends/redis/redis_cluster.h"

#include <algorithm>
#include <utility>

#include "core/duration.h"

namespace dlock::redis {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

// More hops than a slot being migrated while its map is reloaded needs.
constexpr int kMaxRedirects = 5;
// The map is reloaded at most this often, however many calls find it stale.
constexpr milliseconds kRefreshInterval{100};
constexpr std::size_t kMaxIdlePerNode = 4;

milliseconds Left(SteadyClock::time_point deadline) {
  return std::max(milliseconds(1), std::chrono::ceil<milliseconds>(deadline - SteadyClock::now()));
}

bool Same(const Endpoint& a, const Endpoint& b) { return a.host == b.host && a.port == b.port; }

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

 private:
  ClusterRouter* router_;
  Endpoint node_;
  std::unique_ptr<Connection> c_;
  std::uint64_t gen_;
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

Result<ClusterRouter::Pooled> ClusterRouter::Take(const Endpoint& node, milliseconds connect_within,
                                                  std::string_view what) {
  std::uint64_t gen;
  {
    std::lock_guard lock(mu_);
    Pool& pool = pools_[node.Text()];
    gen = pool.generation;
    while (!pool.idle.empty()) {
      std::unique_ptr<Connection> c = std::move(pool.idle.back());
      pool.idle.pop_back();
      // Closed while idle (restart, failover): the others likely are too.
      if (c->PeerClosed(milliseconds(20))) {
        pool.idle.clear();
        gen = ++pool.generation;
        stale_ = true;
        break;
      }
      return Pooled(this, node, std::move(c), gen);
    }
  }
  ConnectOptions options = options_;
  options.connect_timeout = std::min(options.connect_timeout, connect_within);
  DLOCK_ASSIGN_OR_RETURN(auto c, Connection::Open(node, options, false, false, what));
  return Pooled(this, node, std::move(c), gen);
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
  return out;
}

Status ClusterRouter::Refresh(std::string_view what, SteadyClock::time_point deadline) {
  const std::string doing = std::string(what) + ": read the cluster's slot map";
  std::string errors;
  for (const Endpoint& node : RefreshCandidates()) {
    // Each node within the connect timeout, all within the caller's deadline.
    if (SteadyClock::now() >= deadline) {
      errors += "; no time left to ask " + node.Text();
      break;
    }
    const milliseconds limit = deadline == SteadyClock::time_point::max()
                                   ? options_.connect_timeout
                                   : std::min(options_.connect_timeout, Left(deadline));
    auto conn = Take(node, limit, doing);
    if (!conn.ok()) {
      if (IsFinal(conn.status())) return conn.status();
      errors += "; " + conn.status().message();
      continue;
    }
    auto reply = (*conn)->Call({"CLUSTER", "SLOTS"}, limit, doing);
    if (!reply.ok()) {
      errors += "; " + reply.status().message();
      continue;
    }
    auto map = ParseClusterSlots(reply->get(), node, node.Text());
    if (!map.ok()) {
      // A node that is not in cluster mode says so; that is the same everywhere.
      if (IsFinal(map.status())) return map.status();
      errors += "; " + map.status().message();
      continue;
    }
    std::lock_guard lock(mu_);
    map_ = std::move(*map);
    have_map_ = true;
    stale_ = false;
    refreshed_at_ = SteadyClock::now();
    // Connections to nodes that are no longer primaries go.
    std::erase_if(pools_, [&](const auto& item) {
      return std::none_of(map_.primaries.begin(), map_.primaries.end(),
                          [&](const Endpoint& e) { return e.Text() == item.first; });
    });
    return Status::Ok();
  }
  return UnavailableError(doing + ": no node of the cluster answered" + errors);
}

void ClusterRouter::RefreshIfStale(std::string_view what, SteadyClock::time_point deadline) {
  {
    std::lock_guard lock(mu_);
    if (have_map_ && (!stale_ || SteadyClock::now() - refreshed_at_ < kRefreshInterval)) return;
  }
  (void)Refresh(what, deadline);  // on failure the map in hand is used, if any
}

Result<Endpoint> ClusterRouter::PrimaryOf(std::uint16_t slot, std::string_view what,
                                          SteadyClock::time_point deadline) {
  RefreshIfStale(what, deadline);
  std::lock_guard lock(mu_);
  if (!have_map_) {
    return UnavailableError(std::string(what) + ": no node of the cluster gave its slot map");
  }
  std::optional<Endpoint> primary = map_.PrimaryOf(slot);
  if (!primary) {
    return UnavailableError(std::string(what) + ": no primary of the cluster serves hash slot " +
                            std::to_string(slot) + " now (a failover may be under way)");
  }
  return *primary;
}

Result<std::vector<Endpoint>> ClusterRouter::Primaries(std::string_view what) {
  RefreshIfStale(what);
  std::lock_guard lock(mu_);
  if (!have_map_) {
    return UnavailableError(std::string(what) + ": no node of the cluster gave its slot map");
  }
  return map_.primaries;
}

Result<std::vector<ReplyPtr>> ClusterRouter::RunAt(const Endpoint& node, bool ask,
                                                   std::span<const Command> commands,
                                                   milliseconds timeout, std::string_view what,
                                                   bool* sent) {
  *sent = false;
  DLOCK_ASSIGN_OR_RETURN(Pooled conn, Take(node, timeout, what));
  *sent = true;
  if (!ask) return conn->Pipeline(commands, timeout, what);
  std::vector<Command> asking{{"ASKING"}};
  asking.insert(asking.end(), commands.begin(), commands.end());
  DLOCK_ASSIGN_OR_RETURN(auto replies, conn->Pipeline(asking, timeout, what));
  replies.erase(replies.begin());
  return replies;
}

Result<ClusterRouter::Routed> ClusterRouter::Run(std::uint16_t slot,
                                                 std::span<const Command> commands,
                                                 milliseconds timeout, std::string_view what) {
  const auto deadline = SteadyClock::now() + timeout;
  DLOCK_ASSIGN_OR_RETURN(Endpoint node, PrimaryOf(slot, what, deadline));
  bool ask = false;
  std::string last_redirect;
  for (int hop = 0; hop <= kMaxRedirects; ++hop) {
    bool sent = false;
    auto replies = RunAt(node, ask, commands, Left(deadline), what, &sent);
    if (!replies.ok()) {
      // Broken mid-call: its outcome is unknown, and the caller decides.
      // Unreachable: if the slot has another primary by now, the call,
      // which never left, goes there.
      const Status failed = replies.status();
      if (sent || IsFinal(failed) || SteadyClock::now() >= deadline) return failed;
      (void)Refresh(what, deadline);
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
      if (error.starts_with("CLUSTERDOWN") || error.starts_with("TRYAGAIN")) MarkStale();
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
    if (SteadyClock::now() >= deadline) break;
  }
  return UnavailableError(std::string(what) + ": Redis Cluster kept redirecting the call (last: '" +
                          last_redirect + "') until its " + internal::FormatDuration(timeout) +
                          " ran out: its slots are moving; try again");
}

Result<ClusterRouter::Routed> ClusterRouter::Eval(std::uint16_t slot, const Script& script,
                                                  std::span<const std::string> keys,
                                                  std::span<const std::string> args,
                                                  std::span<const Command> extra,
                                                  milliseconds timeout, std::string_view what) {
  std::string server;
  auto replies = EvalThrough(
      [&](std::span<const Command> commands) -> Result<std::vector<ReplyPtr>> {
        DLOCK_ASSIGN_OR_RETURN(Routed routed, Run(slot, commands, timeout, what));
        server = std::move(routed.server);
        return std::move(routed.replies);
      },
      script, keys, args, extra);
  if (!replies.ok()) return replies.status();
  return Routed{std::move(*replies), std::move(server)};
}

void ClusterRouter::RunOnNodes(std::span<NodeBatch> batches, milliseconds timeout,
                               std::string_view what) {
  const auto deadline = SteadyClock::now() + timeout;
  std::vector<std::optional<Pooled>> conns(batches.size());
  for (std::size_t i = 0; i < batches.size(); ++i) {
    auto conn = Take(batches[i].node, Left(deadline), what);
    if (!conn.ok()) {
      batches[i].replies = conn.status();
      continue;
    }
    conns[i].emplace(std::move(*conn));
    if (Status s = (*conns[i])->Send(batches[i].commands, Left(deadline), what); !s.ok()) {
      batches[i].replies = s;
      conns[i].reset();
    }
  }
  for (std::size_t i = 0; i < batches.size(); ++i) {
    if (!conns[i]) continue;
    std::vector<ReplyPtr> replies;
    Status failed;
    for (std::size_t n = 0; n < batches[i].commands.size() && failed.ok(); ++n) {
      auto reply = (*conns[i])->Receive(what);
      if (reply.ok()) {
        replies.push_back(std::move(*reply));
      } else {
        failed = reply.status();
      }
    }
    if (failed.ok()) {
      batches[i].replies = std::move(replies);
    } else {
      batches[i].replies = failed;
    }
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
                                milliseconds timeout, std::string_view what,
                                std::vector<std::size_t>* by_text_next,
                                std::vector<std::size_t>* alone) {
  std::vector<NodeBatch> batches;
  std::vector<std::vector<std::size_t>> members;  // batches[b] runs calls[members[b][i]]
  for (std::size_t i : which) {
    auto node = PrimaryOf(calls[i].slot, what, SteadyClock::now() + timeout);
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
  RunOnNodes(batches, timeout, what);
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
                             milliseconds timeout, std::string_view what) {
  const auto deadline = SteadyClock::now() + timeout;
  std::vector<std::size_t> all(calls.size()), by_text, alone;
  for (std::size_t i = 0; i < calls.size(); ++i) all[i] = i;
  EvalBatched(script, false, calls, all, tail, check_tail, timeout, what, &by_text, &alone);
  // A node that did not know the script (restarted, promoted, flushed):
  // its calls again, batched, with the text, which caches it there.
  if (!by_text.empty()) {
    std::vector<std::size_t> none;  // a pass by text sends nothing by text again
    EvalBatched(script, true, calls, by_text, tail, check_tail, Left(deadline), what, &none,
                &alone);
  }
  for (std::size_t i : alone) {
    SlotCall& call = calls[i];
    auto routed = Eval(call.slot, script, call.keys, call.args, tail, Left(deadline), what);
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
