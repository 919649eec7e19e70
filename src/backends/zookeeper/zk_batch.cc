// The asynchronous API's batches (Backend::TryAcquireMany, ReleaseMany):
// every request of a batch in flight on the session at once, each answered
// as the one-at-a-time call would be. Attempts go in rounds
// (zk_acquisition.cc, TryEach); the holdings a batch releases are deleted
// by one multi, which ZooKeeper applies as one write, and the lock paths
// their releases empty by another.
#include <utility>

#include "backends/zookeeper/zk_backend_impl.h"

namespace dlock::zookeeper {
namespace {

using Live = ZooKeeperBackendImpl::Live;

// A multi of at most this many operations: far below ZooKeeper's request
// limit (jute.maxbuffer, 1 MB) with paths of a few hundred bytes.
constexpr std::size_t kMaxMultiOps = 500;

// The deletes one holding's release makes: its node, and with it its
// lock-delay marker if it made one (as ReleaseHolding does).
void AddDeletes(const Holding& h, std::vector<MultiOp>& ops) {
  ops.push_back(MultiOp{MultiOp::Kind::kDelete, h.NodePath(), "", 0, -1});
  if (h.marker_made) ops.push_back(MultiOp{MultiOp::Kind::kDelete, h.delay_path + "/" + h.node, "", 0, -1});
}

}  // namespace

std::vector<Status> ZooKeeperBackendImpl::ReleaseHoldings(
    const Live& live, const std::vector<std::shared_ptr<Holding>>& held) {
  std::vector<Status> out(held.size());
  // One multi per chunk, all sent before any answer is awaited.
  std::vector<std::pair<std::size_t, std::shared_ptr<Op>>> multis;  // first holding, its multi
  std::vector<MultiOp> ops;
  std::size_t first = 0;
  for (std::size_t i = 0; i <= held.size(); ++i) {
    if (i == held.size() || (!ops.empty() && ops.size() + 2 > kMaxMultiOps)) {
      multis.emplace_back(first, live.session->Multi(std::move(ops)));
      ops.clear();
      first = i;
    }
    if (i < held.size()) AddDeletes(*held[i], ops);
  }
  std::vector<const Holding*> emptied;  // released, and their paths are to go
  for (std::size_t m = 0; m < multis.size(); ++m) {
    const std::size_t end = m + 1 < multis.size() ? multis[m + 1].first : held.size();
    const Reply* r = multis[m].second->Wait(attempt_timeout);
    for (std::size_t i = multis[m].first; i < end; ++i) {
      const Holding& h = *held[i];
      if (r != nullptr && r->rc == ZOK) {
        if (DeletesPathAtRelease(h)) emptied.push_back(&h);
      } else if (r != nullptr && !OutcomeUnknown(r->rc)) {
        // Answered, and refused whole: a node (or marker) of the chunk was
        // gone. Each on its own, as alone, for its own answer.
        out[i] = ReleaseHolding(live, h);
      } else {
        // Unknown: the keeper finds each node by its owner's guid.
        ReapLater(Reap{h.key, h.owner, h.lock_path, "", h.gen, Now() + kReapRetry});
        out[i] = ReplyError(r, "the release of " + h.NodePath(), attempt_timeout);
      }
    }
  }
  DeleteEmptiedPaths(live, emptied);
  return out;
}

// The lock paths whose holders were alone, in one multi, each at the
// version it had at the grant (ReleaseHolding says why). Not waited for: if
// one has a waiter now (or a lock-delay flag), the multi fails whole, and
// each is deleted on its own then, which fails for that one only.
void ZooKeeperBackendImpl::DeleteEmptiedPaths(const Live& live,
                                              const std::vector<const Holding*>& emptied) {
  if (emptied.empty()) return;
  if (emptied.size() == 1) {
    (void)live.session->Delete(emptied[0]->lock_path, {}, emptied[0]->lock_path_version);
    return;
  }
  std::vector<MultiOp> ops;
  for (const Holding* h : emptied) {
    ops.push_back(MultiOp{MultiOp::Kind::kDelete, h->lock_path, "", 0, h->lock_path_version});
  }
  std::vector<MultiOp> each = ops;
  std::shared_ptr<Session> s = live.session;
  (void)s->Multi(std::move(ops), [weak = std::weak_ptr<Session>(s), each](const Reply& r) {
    if (r.rc == ZOK || !Answered(r.rc)) return;
    auto session = weak.lock();
    if (!session) return;
    for (const MultiOp& op : each) (void)session->Delete(op.path, {}, op.version);
  });
}

std::vector<Result<Attempt>> ZooKeeperBackend::TryAcquireMany(
    std::span<const LeaseRequest> requests) {
  return TryEach(impl_, requests);
}

std::vector<Status> ZooKeeperBackend::ReleaseMany(std::span<const LeaseRequest> holdings) {
  ZooKeeperBackendImpl& m = *impl_;
  std::vector<Status> out(holdings.size());
  const std::optional<Live> live = m.Current();
  std::vector<std::shared_ptr<Holding>> held;
  std::vector<std::size_t> held_at;  // held[j] answers holdings[held_at[j]]
  for (std::size_t i = 0; i < holdings.size(); ++i) {
    const LeaseRequest& r = holdings[i];
    std::shared_ptr<Holding> h = LockPath(m.options.chroot, r.key).ok() ? m.TakeHolding(r.key, r.owner)
                                                                       : nullptr;
    if (h == nullptr) {
      out[i] = Release(r.key, r.owner);  // not held here: looked for by guid, as alone
    } else if (live && live->gen == h->gen) {
      held.push_back(std::move(h));
      held_at.push_back(i);
    }  // else gone with its session: OK
  }
  if (held.empty()) return out;
  std::vector<Status> released = held.size() == 1
                                     ? std::vector<Status>{m.ReleaseHolding(*live, *held[0])}
                                     : m.ReleaseHoldings(*live, held);
  for (std::size_t j = 0; j < held.size(); ++j) out[held_at[j]] = std::move(released[j]);
  return out;
}

}  // namespace dlock::zookeeper
