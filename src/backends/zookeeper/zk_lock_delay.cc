// Lock-delay (docs/backend-zookeeper.md): a holding with lock-delay D keeps
// a persistent marker (DelayPath/<its node>, data "<D ms> <limit>") while it
// holds; a clean release deletes node and marker in one multi, so a marker
// whose node is gone is a lost holding. The first head of the queue to see
// it records the loss by writing "lost" into it; that write's mtime, the
// leader's clock, starts the delay, and the key is granted to nobody the
// marker excludes until the leader's clock has passed it by D. Counting from
// when the loss was seen, not from the session's end, only lengthens it.
#include <cstdio>
#include <optional>
#include <set>

#include "backends/zookeeper/zk_backend_impl.h"
#include "core/duration.h"
#include "dlock/sharing.h"

namespace dlock::zookeeper {
namespace {

using std::chrono::milliseconds;
using Live = ZooKeeperBackendImpl::Live;

struct MarkerData {
  std::int64_t delay_ms = 0;
  std::uint32_t limit = 1;
  bool lost = false;
};

std::optional<MarkerData> ParseMarker(std::string_view data) {
  MarkerData m;
  unsigned long long delay = 0, limit = 0;
  char lost[8] = {0};
  const std::string text(data);
  const int n = std::sscanf(text.c_str(), "%llu %llu %7s", &delay, &limit, lost);
  if (n < 2 || limit == 0 || limit > 0xFFFFFFFFull || delay > 0xFFFFFFFFull) return std::nullopt;
  m.delay_ms = static_cast<std::int64_t>(delay);
  m.limit = static_cast<std::uint32_t>(limit);
  m.lost = n == 3 && std::string_view(lost) == "lost";
  return m;
}

// What one marker without its node says.
struct Verdict {
  enum class Kind {
    kNone,     // no lock-delay (served, cleared meanwhile, or not dlock's)
    kRaced,    // another head recorded the loss first: read it again
    kInDelay,  // a lost holding that still counts, for `left`
  };
  Kind kind = Kind::kNone;
  std::uint32_t limit = 1;
  milliseconds left{0};
};

// Judges the marker at `path` and records a loss not yet recorded.
// `store_now`: the leader's clock (ms), read once per pass with the write of
// a loss or of our own node's data (`own` at `own_path`).
Result<Verdict> JudgeMarker(const Live& live, milliseconds timeout, const std::string& path,
                            const std::string& own_path, const std::string& own,
                            std::optional<std::int64_t>& store_now) {
  auto get = live.session->Get(path);
  const Reply* g = get->Wait(timeout);
  if (g != nullptr && g->rc == ZNONODE) return Verdict{};  // cleared meanwhile
  if (g == nullptr || g->rc != ZOK) return ReplyError(g, "reading " + path, timeout);
  const std::optional<MarkerData> md = ParseMarker(g->data);
  if (!md) return Verdict{};  // not ours to judge; written by no dlock
  std::int64_t since = g->stat.mtime;
  if (!md->lost) {
    const std::string lost =
        std::to_string(md->delay_ms) + " " + std::to_string(md->limit) + " lost";
    auto set = live.session->Set(path, lost, g->stat.version);
    const Reply* sr = set->Wait(timeout);
    if (sr != nullptr && (sr->rc == ZNONODE || sr->rc == ZBADVERSION)) {
      return Verdict{Verdict::Kind::kRaced};  // cleared, or recorded by someone else
    }
    if (sr == nullptr || sr->rc != ZOK) return ReplyError(sr, "recording the loss in " + path, timeout);
    since = sr->stat.mtime;
    store_now = since;
  }
  if (!store_now) {
    // The ensemble's "now": the mtime of a write of our own node's data.
    auto probe = live.session->Set(own_path, own, -1);
    const Reply* pr = probe->Wait(timeout);
    if (pr == nullptr || pr->rc != ZOK) return ReplyError(pr, "writing " + own_path, timeout);
    store_now = pr->stat.mtime;
  }
  const std::int64_t left = since + md->delay_ms - *store_now;
  if (left <= 0) {
    (void)live.session->Delete(path)->Wait(timeout);  // served its delay
    return Verdict{};
  }
  return Verdict{Verdict::Kind::kInDelay, md->limit, milliseconds(left)};
}

}  // namespace

Result<milliseconds> ZooKeeperBackendImpl::ClearLockDelays(const Live& live, Contender& c) {
  OwnNode node;
  DelayHints hints;
  {
    std::lock_guard lock(mu);
    const auto* head = std::get_if<Contender::AtHead>(&c.standing);
    if (head == nullptr) return milliseconds(0);  // moved on meanwhile: the caller sees it
    if (head->delay_until != TimePoint{} && Now() < head->delay_until) {
      return std::chrono::ceil<milliseconds>(head->delay_until - Now());
    }
    node = head->node;
    hints = head->hints;
  }
  if (c.delay_path.empty()) return milliseconds(0);
  // A lost holding with a lock-delay is either one we saw ahead of us (named
  // with its delay) or one gone before we queued, whose marker was made with
  // the flag on the lock path that our look read.
  if (hints.any()) {
    DLOCK_ASSIGN_OR_RETURN(const milliseconds wait, WaitForLostHoldings(live, c, node));
    if (wait > milliseconds(0)) {
      std::lock_guard lock(mu);
      if (auto* head = std::get_if<Contender::AtHead>(&c.standing)) {
        head->delay_until = Now() + wait;
      }
      return wait;
    }
  }
  if (c.delay_ms > 0) DLOCK_RETURN_IF_ERROR(MakeMarker(live, c, node.name));
  return milliseconds(0);
}

// A lock path is a container: ZooKeeper deletes it once empty, and its
// kKeyHadDelays flag with it, while a lost holding's lock-delay may still
// run (its marker lives elsewhere, in the delay path). A contender that
// finds the path missing makes it again with the flag when such markers
// remain, in the create itself, so that nobody sees the path without it.
// No marker can appear meanwhile: markers are made by holders, and a
// missing path has none.
Result<std::string_view> LockPathData(const Contender& c, const Reply* marks,
                                      milliseconds timeout) {
  if (c.delay_path.empty()) return std::string_view();
  if (marks == nullptr || (marks->rc != ZOK && marks->rc != ZNONODE)) {
    return ReplyError(marks, "listing the lock-delays of " + c.lock_path, timeout);
  }
  return marks->rc == ZOK && !marks->children.empty() ? kKeyHadDelays : std::string_view();
}

// How long the lost holdings whose markers remain still keep the key from
// `node` (zero: they do not).
Result<milliseconds> ZooKeeperBackendImpl::WaitForLostHoldings(const Live& live, Contender& c,
                                                                const OwnNode& node) {
  auto kids_op = live.session->Children(c.lock_path);
  auto marks_op = live.session->Children(c.delay_path);
  const Reply* kids = kids_op->Wait(attempt_timeout);
  if (kids == nullptr || kids->rc != ZOK) {
    return ReplyError(kids, "listing " + c.lock_path, attempt_timeout);
  }
  const Reply* marks = marks_op->Wait(attempt_timeout);
  if (marks == nullptr || (marks->rc != ZOK && marks->rc != ZNONODE)) {
    return ReplyError(marks, "listing the lock-delays of " + c.lock_path, attempt_timeout);
  }
  const std::vector<LockNode> sorted = SortedContenders(kids->children);
  std::vector<std::uint32_t> ahead;
  std::set<std::string> alive;
  bool found = false;
  for (const LockNode& n : sorted) {
    alive.insert(n.name);
    if (n.name == node.name) found = true;
    if (!found) ahead.push_back(n.limit);
  }
  if (!found) {
    std::lock_guard lock(mu);
    c.standing = Contender::NoNode{};  // the next attempt starts over
    return UnavailableError("this owner's lock node " + c.PathOf(node.name) + " is gone; retrying");
  }
  std::vector<std::uint32_t> delayed;
  milliseconds wait{0};
  std::optional<std::int64_t> store_now;  // ms, the leader's clock
  for (const std::string& name : marks->rc == ZOK ? marks->children : std::vector<std::string>{}) {
    if (alive.count(name) != 0) continue;  // a live holding's (or ours)
    DLOCK_ASSIGN_OR_RETURN(const Verdict v,
                           JudgeMarker(live, attempt_timeout, c.delay_path + "/" + name,
                                       c.PathOf(node.name), c.data, store_now));
    if (v.kind == Verdict::Kind::kRaced) return milliseconds(1);  // read it again next pass
    if (v.kind == Verdict::Kind::kNone) continue;
    delayed.push_back(v.limit);
    wait = std::max(wait, v.left);
  }
  // The sharing rule with each lost holding in its delay as one more holder.
  const QueueDecision decision = DecideQueue(ahead, delayed, c.limit);
  if (decision.outcome == QueueDecision::Outcome::kGranted) return milliseconds(0);
  // Only lock-delays can stand in the way here (the nodes ahead of the head
  // only go): wait them out.
  return std::max(wait, milliseconds(1));
}

// First the flag on the lock path that tells every later look at it that
// markers may exist, then our marker (pipelined: the session's requests are
// applied in order). The flag is never cleared.
Status ZooKeeperBackendImpl::MakeMarker(const Live& live, const Contender& c,
                                        const std::string& node) {
  const std::string marker = c.delay_path + "/" + node;
  const std::string data = std::to_string(c.delay_ms) + " " + std::to_string(c.limit);
  for (int round = 0;; ++round) {
    auto flag = live.session->Set(c.lock_path, kKeyHadDelays, -1);
    auto op = live.session->Create(marker, data, 0);
    const Reply* f = flag->Wait(attempt_timeout);
    if (f == nullptr || f->rc != ZOK) {
      return ReplyError(f, "flagging " + c.lock_path, attempt_timeout);
    }
    const Reply* r = op->Wait(attempt_timeout);
    if (r != nullptr && r->rc == ZNONODE && round == 0) {
      DLOCK_RETURN_IF_ERROR(CreateParents(live, c.delay_path));
      continue;
    }
    if (r == nullptr || (r->rc != ZOK && r->rc != ZNODEEXISTS)) {
      return ReplyError(r, "creating the lock-delay marker of " + c.PathOf(node), attempt_timeout);
    }
    return Status::Ok();
  }
}

}  // namespace dlock::zookeeper
