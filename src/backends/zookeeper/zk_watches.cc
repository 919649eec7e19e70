// The watches of queued contenders, and the Notify wake-ups they call: what
// runs on the C client's completion thread when a node a waiter watches
// goes (zk_contender.h has the standings these events move).
#include <utility>

#include "backends/zookeeper/zk_backend_impl.h"

namespace dlock::zookeeper {

bool ZooKeeperBackendImpl::ContenderEventLocked(Contender& c, int type, const std::string& path,
                                                bool* look) {
  auto* q = std::get_if<Contender::Queued>(&c.standing);
  if (q == nullptr) return false;
  if (type == ZOO_CHILD_EVENT) {
    if (!std::holds_alternative<WatchChildren>(q->watch) || c.lock_path != path) return false;
    q->armed = false;  // one-shot: the next wait sets it again
    *look = true;
    return true;
  }
  if (!Watches(*q, path)) return false;
  if (type != ZOO_DELETED_EVENT) {
    q->armed = false;  // a data change used the watch up: set it again
    return true;
  }
  *look = AheadGone(c, path);
  // The waiting thread only cares once we are at the head or must look; one
  // of several nodes ahead going is not worth a wake-up.
  return ReadyToTry(c);
}

void ZooKeeperBackendImpl::LookOnEvent(const std::shared_ptr<Session>& s,
                                       const std::shared_ptr<Contender>& c) {
  std::weak_ptr<Contender> weak = c;
  (void)s->Children(c->lock_path, [this, weak](const Reply& r) {
    auto c = weak.lock();
    if (!c || r.rc != ZOK) return;
    const std::vector<LockNode> sorted = SortedContenders(r.children);
    Wakes wakes;
    {
      std::lock_guard lock(mu);
      if (!std::holds_alternative<Contender::Queued>(c->standing)) return;
      (void)ApplyLook(*c, sorted, r.stat);  // our node gone: the waiter's next look sees it
      cv.notify_all();
      TakeWakeLocked(*c, Now(), wakes);
    }
    RunWakes(wakes);
  });
}

bool ZooKeeperBackendImpl::WakeDueLocked(const Contender& c, TimePoint now) const {
  if (!c.wake) return false;
  if (c.gen != gen || !session || session->dead()) return true;  // it starts over
  if (const auto* head = std::get_if<Contender::AtHead>(&c.standing)) {
    return head->delay_until <= now;
  }
  return ReadyToTry(c);
}

void ZooKeeperBackendImpl::TakeWakeLocked(Contender& c, TimePoint now, Wakes& out) {
  if (WakeDueLocked(c, now)) out.push_back(std::exchange(c.wake, nullptr));
}

void ZooKeeperBackendImpl::RunWakes(Wakes& wakes) {
  for (auto& wake : wakes) wake();
  wakes.clear();
}

void ZooKeeperBackendImpl::ArmWatches(const std::shared_ptr<Session>& s,
                                      const std::shared_ptr<Contender>& c, const Watch& watch) {
  std::weak_ptr<Contender> weak = c;
  if (std::holds_alternative<WatchChildren>(watch)) {
    (void)s->WatchChildren(c->lock_path, [this, weak](const Reply& r) {
      auto c = weak.lock();
      if (!c) return;
      const std::vector<LockNode> sorted = SortedContenders(r.children);
      Wakes wakes;
      {
        std::lock_guard lock(mu);
        auto* q = std::get_if<Contender::Queued>(&c->standing);
        if (q == nullptr || !std::holds_alternative<WatchChildren>(q->watch)) return;
        // Not set, or our node is gone: the waiter's next attempt looks.
        if (r.rc != ZOK || ApplyLook(*c, sorted, r.stat) == LookResult::kNodeGone) q->armed = false;
        cv.notify_all();
        TakeWakeLocked(*c, Now(), wakes);
      }
      RunWakes(wakes);
    });
    return;
  }
  const std::vector<std::string> paths = std::holds_alternative<WatchAhead>(watch)
                                             ? std::get<WatchAhead>(watch).left
                                             : std::vector{std::get<WatchOne>(watch).path};
  for (const std::string& path : paths) {
    (void)s->Exists(path, true, [this, weak, path](const Reply& r) {
      auto c = weak.lock();
      if (!c) return;
      Wakes wakes;
      {
        std::lock_guard lock(mu);
        auto* q = std::get_if<Contender::Queued>(&c->standing);
        if (q == nullptr || !Watches(*q, path)) return;  // no longer ahead of us
        if (r.rc == ZNONODE) {
          (void)AheadGone(*c, path);  // gone before the watch was set
        } else if (r.rc != ZOK) {
          q->armed = false;  // not set: the next wait tries again
        }
        cv.notify_all();
        TakeWakeLocked(*c, Now(), wakes);
      }
      RunWakes(wakes);
    });
  }
}

}  // namespace dlock::zookeeper
