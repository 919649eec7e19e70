// The keeper thread: the session's heartbeat, the deletion ("reaping") of
// nodes whose lease or queue place ran out while the session lives on, or
// whose delete could not be confirmed, and the wake-ups (Notify) no watch
// will give: a lapsed place, a head, the end of a lock-delay.
#include <algorithm>
#include <map>
#include <utility>

#include "backends/zookeeper/zk_backend_impl.h"

namespace dlock::zookeeper {

using std::chrono::milliseconds;

std::optional<Reap> NodeToReap(const Contender& c, TimePoint due) {
  Reap r{c.key, c.owner, c.lock_path, "", c.gen, due};
  if (std::holds_alternative<Contender::Creating>(c.standing)) return r;
  const OwnNode* node = c.Node();
  if (node == nullptr) return std::nullopt;
  r.node = node->name;
  return r;
}

void ZooKeeperBackendImpl::AddContender(const std::shared_ptr<Contender>& c) {
  std::lock_guard lock(mu);
  if (holdings.empty() && contenders.empty()) WakeKeeperForHeartbeatLocked();
  contenders.insert(c);
}

void ZooKeeperBackendImpl::WakeKeeperForHeartbeatLocked() {
  // Wake the keeper only if it would sleep past the next beat (a short
  // session); otherwise its own wake-up (at least once a second) is soon
  // enough, and a wake-up per acquisition would be a thread switch on every
  // uncontended cycle.
  const milliseconds period =
      session ? session->timeout() / kHeartbeatsPerTimeout : milliseconds(0);
  if (keeper_next > last_heartbeat + period) {
    heartbeat_now = true;  // what the keeper's wait looks for
    keeper_cv.notify_all();
  }
}

// The heartbeat is a write, a version check of the root that changes
// nothing: only the leader answers it, after a quorum logged it, so its
// answer proves the ensemble still keeps the session. A read would not: a
// member cut off from the leader answers reads on its own until it gives
// up on the leader (syncLimit x tickTime), while the quorum may already
// have ended the session and handed its locks on.
MultiOp ZooKeeperBackendImpl::Heartbeat() const {
  return MultiOp{MultiOp::Kind::kCheck, root, "", 0, -1};
}

void ZooKeeperBackendImpl::ReapLaterLocked(Reap reap) {
  to_reap.push_back(std::move(reap));
  keeper_cv.notify_all();
}

void ZooKeeperBackendImpl::ReapLater(Reap reap) {
  std::lock_guard lock(mu);
  ReapLaterLocked(std::move(reap));
}

void ZooKeeperBackendImpl::KeeperLoop(std::stop_token stop) {
  std::unique_lock lock(mu);
  while (!stop.stop_requested()) {
    const TimePoint now = Now();
    CollectFinishedDeletesLocked(now);
    CollectExpiredLocked(now);
    Wakes wakes = TakeDueWakesLocked(now);
    std::vector<Reap> due = TakeDueReapsLocked(now);
    std::shared_ptr<Session> s = session;
    const std::uint64_t g = gen;
    const bool connected = s && s->state() == Session::State::kConnected;
    const milliseconds period = s ? s->timeout() / kHeartbeatsPerTimeout : milliseconds(1000);
    const bool active = !holdings.empty() || !contenders.empty();
    bool beat = false;
    if (connected && active && (heartbeat_now || now >= last_heartbeat + period)) {
      beat = true;
      heartbeat_now = false;
      last_heartbeat = now;
    }
    lock.unlock();

    RunWakes(wakes);
    if (beat) (void)s->Multi({Heartbeat()});  // its answer moves heard_at
    RunReaps(s, g, connected, std::move(due));
    s.reset();

    lock.lock();
    SleepLocked(lock, stop, connected, period);
  }
}

// Keeping a place is local: a waiter's node lives as long as the session,
// which the ensemble keeps only while the client's I/O thread is heard from
// (its pings, our heartbeat), and the queue_ttl on top of that is this
// backend's own, enforced by the reaping below. So a place is kept by
// moving its expiry, with no request. A dead or paused process still loses
// its places: its session ends (the ensemble deletes its ephemeral nodes),
// and a live one that stops keeping a place (a core whose timer is stuck,
// an acquisition dropped without Abandon) has it reaped at expires_at.
std::vector<Status> ZooKeeperBackendImpl::KeepPlaces(std::span<const LeaseRequest> waiters) {
  std::vector<Status> out;
  out.reserve(waiters.size());
  std::lock_guard lock(mu);
  const TimePoint now = Now();
  // The contenders with a place on the live session, by key and owner.
  std::map<std::pair<std::string_view, OwnerId>, Contender*> placed;
  if (session && !session->dead()) {
    for (const auto& c : contenders) {
      if (c->gen == gen && HasPlace(c->standing)) placed[{c->key, c->owner}] = c.get();
    }
  }
  for (const LeaseRequest& w : waiters) {
    const auto it = placed.find({w.key, w.owner});
    if (it == placed.end()) {
      out.push_back(NotFoundError("owner " + w.owner.ToString() + " has no place in the queue of key " +
                                  Quoted(w.key) + " (it lapsed, its session ended, or it holds)"));
      continue;
    }
    // Never shortened: an attempt in progress may have set a later one.
    it->second->expires_at = std::max(it->second->expires_at, now + w.queue_ttl);
    out.push_back(Status::Ok());
  }
  return out;
}

// A finished delete whose outcome is unknown is sent again, by the same
// name, the node still marked being reaped; an answered one unmarks it.
void ZooKeeperBackendImpl::CollectFinishedDeletesLocked(TimePoint now) {
  for (auto it = reaping.begin(); it != reaping.end();) {
    if (!it->first->done()) {
      ++it;
      continue;
    }
    if (OutcomeUnknown(it->first->Wait(std::chrono::nanoseconds(0))->rc)) {
      Reap again = std::move(it->second);
      again.due = now + kReapRetry;
      to_reap.push_back(std::move(again));
    } else {
      being_reaped.erase(it->second.NodePath());
    }
    it = reaping.erase(it);
  }
}

// Leases not renewed for their ttl, and queue places not refreshed by an
// attempt within their queue_ttl: their nodes go. An acquisition whose
// place lapsed starts over if it tries again.
void ZooKeeperBackendImpl::CollectExpiredLocked(TimePoint now) {
  for (auto it = holdings.begin(); it != holdings.end();) {
    const Holding& h = *it->second;
    if (now < h.expires_at) {
      ++it;
      continue;
    }
    to_reap.push_back(Reap{h.key, h.owner, h.lock_path, h.node, h.gen, now});
    it = holdings.erase(it);
  }
  for (const auto& c : contenders) {
    if (c->expires_at == TimePoint{} || now < c->expires_at) continue;
    c->expires_at = TimePoint{};
    if (std::optional<Reap> r = NodeToReap(*c, now)) {
      to_reap.push_back(std::move(*r));
      c->standing = Contender::NoNode{};
      cv.notify_all();  // a Wait on it returns: there is nothing left to watch
    }
  }
}

ZooKeeperBackendImpl::Wakes ZooKeeperBackendImpl::TakeDueWakesLocked(TimePoint now) {
  wake_soon = false;
  Wakes wakes;
  for (const auto& c : contenders) TakeWakeLocked(*c, now, wakes);
  return wakes;
}

// A node is marked being reaped in the same hold of mu that finds its
// owner away, so that no attempt of the owner adopts it from then on (it
// takes a node of its own instead, behind this one until it goes). A node
// marked already is nobody's since: its delete goes on.
std::vector<Reap> ZooKeeperBackendImpl::TakeDueReapsLocked(TimePoint now) {
  std::vector<Reap> due;
  for (auto it = to_reap.begin(); it != to_reap.end();) {
    if (now < it->due) {
      ++it;
      continue;
    }
    const bool named = !it->node.empty();
    if ((named && being_reaped.contains(it->NodePath())) || !OwnerStillThereLocked(*it)) {
      if (named) being_reaped.insert(it->NodePath());
      due.push_back(std::move(*it));
    }
    it = to_reap.erase(it);
  }
  return due;
}

// Whether the owner of `r` holds or contends for its key again. The node
// to reap may be the one it holds now (adopted by its guid after a lost
// reply), so it is left alone: the owner's own looks delete duplicates.
bool ZooKeeperBackendImpl::OwnerStillThereLocked(const Reap& r) const {
  const auto h = holdings.find({r.key, r.owner});
  if (h != holdings.end() && h->second->gen == r.gen) return true;
  for (const auto& c : contenders) {
    if (c->owner != r.owner || c->lock_path != r.lock_path || c->gen != r.gen) continue;
    if (HasPlace(c->standing)) return true;
  }
  return false;
}

void ZooKeeperBackendImpl::RunReaps(const std::shared_ptr<Session>& s, std::uint64_t g,
                                    bool connected, std::vector<Reap> due) {
  for (Reap& r : due) {
    if (!s || r.gen != g || s->dead()) {  // gone with its session
      std::lock_guard lock(mu);
      being_reaped.erase(r.NodePath());
      continue;
    }
    if (!connected) {
      r.due = Now() + kReapRetry;
      ReapLater(std::move(r));
    } else if (!r.node.empty()) {
      SendReap(s, std::move(r));
    } else {
      ReapByGuid(s, std::move(r));
    }
  }
}

void ZooKeeperBackendImpl::SendReap(const std::shared_ptr<Session>& s, Reap r) {
  if (options.before_reap) options.before_reap(r.NodePath());
  auto op = s->Delete(r.NodePath());
  std::lock_guard lock(mu);
  reaping.emplace_back(std::move(op), std::move(r));
}

// A node whose name is not known (a create or a delete whose answer was
// lost): the owner's nodes under the lock path, found by its guid (blocking
// is fine here). The listing decides nothing, as the owner may have come
// back since: its nodes are marked only if it is still away, under mu, as
// in TakeDueReapsLocked, and then deleted by name.
void ZooKeeperBackendImpl::ReapByGuid(const std::shared_ptr<Session>& s, Reap r) {
  auto op = s->Children(r.lock_path);
  const Reply* kids = op->Wait(attempt_timeout);
  if (kids != nullptr && kids->rc == ZNONODE) return;  // no lock path, no node
  if (kids == nullptr || kids->rc != ZOK) {
    r.due = Now() + kReapRetry;
    ReapLater(std::move(r));
    return;
  }
  const std::string guid = GuidOf(r.owner);
  std::vector<Reap> named;
  {
    std::lock_guard lock(mu);
    if (OwnerStillThereLocked(r)) return;
    for (const LockNode& n : SortedContenders(kids->children)) {
      if (n.guid != guid) continue;
      named.push_back(r);
      named.back().node = n.name;
      being_reaped.insert(named.back().NodePath());
    }
  }
  for (Reap& one : named) SendReap(s, std::move(one));
}

void ZooKeeperBackendImpl::SleepLocked(std::unique_lock<std::mutex>& lock, std::stop_token stop,
                                       bool connected, milliseconds period) {
  const bool active = !holdings.empty() || !contenders.empty();
  TimePoint next = Now() + std::chrono::seconds(1);
  if (!reaping.empty()) next = std::min(next, Now() + milliseconds(20));
  if (connected && active) next = std::min(next, last_heartbeat + period);
  for (const auto& [k, h] : holdings) next = std::min(next, h->expires_at);
  for (const auto& c : contenders) {
    if (c->expires_at != TimePoint{}) next = std::min(next, c->expires_at);
    const auto* head = std::get_if<Contender::AtHead>(&c->standing);
    if (c->wake && head != nullptr) next = std::min(next, head->delay_until);
  }
  for (const Reap& r : to_reap) next = std::min(next, r.due);
  auto due_now = [&] {  // a heartbeat, or wake-ups to look at
    if (wake_soon) return true;
    return heartbeat_now && (!holdings.empty() || !contenders.empty()) && session &&
           session->state() == Session::State::kConnected;
  };
  keeper_next = next;
  keeper_cv.wait_for(lock, stop, Left(next), due_now);
  keeper_next = TimePoint{};
}

}  // namespace dlock::zookeeper
