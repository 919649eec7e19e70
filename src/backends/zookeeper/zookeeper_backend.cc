#include "backends/zookeeper/zookeeper_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <atomic>
#include <cstdio>
#include <optional>
#include <utility>

#include "backends/zookeeper/zk_backend_impl.h"
#include "core/duration.h"

namespace dlock::zookeeper {
namespace {

using internal::FormatDuration;
using internal::ParseDuration;
using std::chrono::milliseconds;
using Live = ZooKeeperBackendImpl::Live;

// List visits at most this many znodes.
constexpr std::size_t kMaxListNodes = 100'000;

// The "label" NodeData wrote; "" for nodes without one (Curator's, older
// dlock's).
std::string LabelOf(std::string_view data) {
  constexpr std::string_view kField = "\"label\":\"";
  const std::size_t at = data.find(kField);
  if (at == std::string_view::npos) return "";
  std::string out;
  for (std::size_t i = at + kField.size(); i < data.size(); ++i) {
    const char ch = data[i];
    if (ch == '"') return out;
    if (ch != '\\') {
      out += ch;
      continue;
    }
    if (++i >= data.size()) break;
    if (data[i] == 'u' && i + 4 < data.size()) {
      unsigned v = 0;
      if (std::sscanf(std::string(data.substr(i + 1, 4)).c_str(), "%4x", &v) == 1 && v < 0x80) {
        out += static_cast<char>(v);
      }
      i += 4;
    } else {
      out += data[i];
    }
  }
  return "";
}

// Whether `path` is the node `h` holds, without building its path.
bool IsNodeOf(const Holding& h, std::string_view path) {
  return path.size() == h.lock_path.size() + 1 + h.node.size() && path.starts_with(h.lock_path) &&
         path[h.lock_path.size()] == '/' && path.ends_with(h.node);
}

}  // namespace

Status ReplyError(const Reply* r, std::string_view what, milliseconds timeout) {
  if (r == nullptr) {
    return UnavailableError("ZooKeeper did not answer " + std::string(what) + " within " +
                            FormatDuration(timeout));
  }
  return ZkError(r->rc, what);
}

ZooKeeperBackendImpl::ZooKeeperBackendImpl(ZkOptions o)
    : options(std::move(o)),
      clock(options.clock ? options.clock : DefaultClock()),
      attempt_timeout(std::min(kAttemptTimeout, options.connect_timeout)),
      root(options.chroot.empty() ? "/" : options.chroot) {
  keeper = std::jthread([this](std::stop_token stop) { KeeperLoop(stop); });
}

ZooKeeperBackendImpl::~ZooKeeperBackendImpl() {
  keeper.request_stop();
  {
    std::lock_guard lock(mu);
    keeper_cv.notify_all();
  }
  if (keeper.joinable()) keeper.join();
  std::shared_ptr<Session> s;
  {
    std::lock_guard lock(mu);
    s = std::move(session);
    holdings.clear();
    contenders.clear();
    reaping.clear();
    being_reaped.clear();
    to_reap.clear();
  }
  s.reset();  // closes the handle, outside the lock its handlers take
}

// ---------------------------------------------------------------------------
// Sessions

Result<Live> ZooKeeperBackendImpl::EnsureSession(milliseconds ttl_hint, bool provisional) {
  std::shared_ptr<Session> old;
  Live live;
  {
    std::lock_guard lock(mu);
    const bool replace = !provisional && session && session_provisional &&
                         !SessionInUseLocked() && !options.session_timeout.has_value() &&
                         session->timeout() != ttl_hint;
    if (!provisional) session_provisional = false;
    if (!session || session->dead() || replace) {
      session_provisional = provisional;
      old = std::move(session);
      const milliseconds timeout = options.session_timeout.value_or(ttl_hint);
      const std::uint64_t g = gen + 1;
      // With credentials Start may wait (≤ attempt_timeout) for a member to
      // take a connection; under the lock, as every caller would wait for
      // that connection anyway.
      DLOCK_ASSIGN_OR_RETURN(
          session, Session::Start(
                       options.hosts, timeout, clock,
                       [this, g](Session::State st) { OnSessionState(g, st); },
                       [this, g](int type, const std::string& path) { OnNodeEvent(g, type, path); },
                       options.identity, attempt_timeout));
      gen = g;
      // Leases of an expired session are gone with it.
      std::erase_if(holdings, [&](const auto& kv) { return kv.second->gen != g; });
      heartbeat_now = true;
    }
    live = Live{session, gen};
  }
  old.reset();  // closes an expired handle outside the lock
  const Session::State st = live.session->WaitConnected(attempt_timeout);
  if (st == Session::State::kConnected) return live;
  if (st == Session::State::kAuthFailed) {
    return PermissionDeniedError("ZooKeeper at " + options.hosts + " refused the credentials of user '" +
                                 options.identity.user + "'");
  }
  if (st == Session::State::kExpired) {
    return UnavailableError("the ZooKeeper session at " + options.hosts +
                            " expired; a new one is opened on retry");
  }
  return NoServerAnswered(options.hosts, attempt_timeout);
}

bool ZooKeeperBackendImpl::SessionInUseLocked() const {
  if (!holdings.empty()) return true;
  return std::any_of(contenders.begin(), contenders.end(), [&](const auto& c) {
    return c->gen == gen && HasPlace(c->standing);
  });
}

std::optional<Live> ZooKeeperBackendImpl::Current() {
  std::lock_guard lock(mu);
  if (!session || session->dead()) return std::nullopt;
  return Live{session, gen};
}

void ZooKeeperBackendImpl::OnSessionState(std::uint64_t g, Session::State st) {
  Wakes wakes;
  {
    std::lock_guard lock(mu);
    if (g != gen) return;
    if (st == Session::State::kExpired || st == Session::State::kAuthFailed) {
      // Every node of the session is gone: Renew reports each lease lost, a
      // waiter starts over on a new session (its next attempt sees the gen).
      std::erase_if(holdings, [&](const auto& kv) { return kv.second->gen == g; });
    } else if (st == Session::State::kConnected) {
      heartbeat_now = true;  // (re)connected: prove the session alive at once
    }
    cv.notify_all();
    keeper_cv.notify_all();
    // A session's end wakes every asynchronous waiter on it, as it ends
    // every Wait (rare: a scan is fine); a new one wakes those on an old one.
    const TimePoint now = Now();
    for (const auto& c : contenders) TakeWakeLocked(*c, now, wakes);
  }
  RunWakes(wakes);
}

void ZooKeeperBackendImpl::OnNodeEvent(std::uint64_t g, int type, const std::string& path) {
  std::vector<std::shared_ptr<Contender>> look;
  std::shared_ptr<Session> s;
  std::unique_lock lock(mu);
  if (g != gen) return;
  s = session;
  bool woke = false;
  Wakes wakes;  // only the waiters this event lets try: a hand-off wakes one
  const TimePoint now = Now();
  for (const auto& c : contenders) {
    bool must_look = false;
    if (c->gen == g && ContenderEventLocked(*c, type, path, &must_look)) {
      woke = true;
      TakeWakeLocked(*c, now, wakes);
    }
    if (must_look) look.push_back(c);
  }
  for (auto& [k, h] : holdings) {
    if (h->gen != g || !IsNodeOf(*h, path)) continue;
    if (type == ZOO_DELETED_EVENT) {
      h->deleted = true;  // someone deleted our node: the lease is lost
    } else {
      h->node_watch_armed = false;
    }
  }
  if (woke) cv.notify_all();
  lock.unlock();
  RunWakes(wakes);
  for (auto& c : look) LookOnEvent(s, c);
}

Status ZooKeeperBackendImpl::CreateParents(const Live& live, const std::string& lock_path,
                                           std::string_view leaf_data) {
  // Every ancestor below the chroot is a container node (ZooKeeper deletes
  // it once empty), as Curator makes them; the chroot itself is persistent.
  std::vector<std::shared_ptr<Op>> ops;
  for (std::size_t i = 1; i <= lock_path.size(); ++i) {
    if (i != lock_path.size() && lock_path[i] != '/') continue;
    const std::string p = lock_path.substr(0, i);
    const bool in_chroot = p.size() <= options.chroot.size();
    const std::string_view data = i == lock_path.size() ? leaf_data : std::string_view();
    ops.push_back(live.session->Create(p, std::string(data), in_chroot ? 0 : ZOO_CONTAINER));
  }
  for (auto& op : ops) {
    const Reply* r = op->Wait(attempt_timeout);
    if (r == nullptr) return UnavailableError("ZooKeeper did not answer within the attempt");
    if (r->rc != ZOK && r->rc != ZNODEEXISTS) return ZkError(r->rc, "creating " + lock_path);
  }
  return Status::Ok();
}

Status ZooKeeperBackendImpl::DeleteOwn(const Live& live, const std::string& lock_path,
                                       const OwnerId& owner, bool* found,
                                       std::vector<LockNode>* others) {
  *found = false;
  auto op = live.session->Children(lock_path);
  const Reply* r = op->Wait(attempt_timeout);
  if (r == nullptr) return UnavailableError("ZooKeeper did not list " + lock_path + " in time");
  if (r->rc == ZNONODE) return Status::Ok();
  if (r->rc != ZOK) return ZkError(r->rc, "listing " + lock_path);
  const std::string guid = GuidOf(owner);
  std::vector<std::shared_ptr<Op>> deletes;
  for (auto& n : SortedContenders(r->children)) {
    if (n.guid == guid) {
      deletes.push_back(live.session->Delete(lock_path + "/" + n.name));
    } else if (others != nullptr) {
      others->push_back(std::move(n));
    }
  }
  for (auto& d : deletes) {
    const Reply* dr = d->Wait(attempt_timeout);
    if (dr == nullptr) return UnavailableError("ZooKeeper did not answer a delete in time");
    if (dr->rc != ZOK && dr->rc != ZNONODE) return ZkError(dr->rc, "deleting a lock node");
    *found = true;
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Held leases

std::shared_ptr<Holding> ZooKeeperBackendImpl::TakeHolding(std::string_view key,
                                                           const OwnerId& owner) {
  std::lock_guard lock(mu);
  auto it = holdings.find({std::string(key), owner});
  if (it == holdings.end()) return nullptr;
  std::shared_ptr<Holding> h = std::move(it->second);
  holdings.erase(it);
  return h;
}

namespace {

// A holding whose node was gone when its owner released it was lost first
// (deleted by a break, say): not a release to report as done. A repeated
// release finds no holding and answers OK.
Status GoneBefore(const Holding& h) {
  return NotOwnerError("the node of key " + Quoted(h.key) +
                       " was gone before the release: the holding was lost (deleted)");
}

}  // namespace

Status ZooKeeperBackendImpl::ReleaseHolding(const Live& live, const Holding& h) {
  if (h.marker_made) {
    // A clean release ends the lock-delay with the holding: node and marker
    // go together. A node already gone was lost, not released: its marker
    // stays and the delay runs.
    std::vector<MultiOp> ops(2);
    ops[0].kind = ops[1].kind = MultiOp::Kind::kDelete;
    ops[0].path = h.NodePath();
    ops[1].path = h.delay_path + "/" + h.node;
    auto op = live.session->Multi(std::move(ops));
    const Reply* r = op->Wait(attempt_timeout);  // points into `op`
    if (r != nullptr && r->rc == ZOK) return Status::Ok();
    if (r != nullptr && r->results.size() == 2 && r->results[0] == ZNONODE) return GoneBefore(h);
    // Otherwise (our marker gone, or no answer) the node alone, below.
  }
  const std::string path = h.NodePath();
  auto op = live.session->Delete(path);
  const Reply* r = op->Wait(attempt_timeout);
  if (r != nullptr && r->rc == ZOK) {
    // Sent after the node's delete on the same session, so answered after
    // it; not waited for. A waiter that came meanwhile makes it fail
    // (ZNOTEMPTY), and so does a lock-delay flag set since the grant (a
    // sharer's: ZBADVERSION), which must outlive the sharer's holding; one
    // that creates its node just after finds no path and makes it again,
    // as after any reaping.
    if (DeletesPathAtRelease(h)) (void)live.session->Delete(h.lock_path, {}, h.lock_path_version);
    return Status::Ok();
  }
  if (r != nullptr && r->rc == ZNONODE) return GoneBefore(h);
  // Unknown: the keeper finds the node by the owner's guid and deletes it.
  ReapLater(Reap{h.key, h.owner, h.lock_path, "", h.gen, Now() + kReapRetry});
  return r == nullptr ? UnavailableError("ZooKeeper did not answer the delete of " + path +
                                         " in time; it is retried")
                      : ZkError(r->rc, "deleting " + path);
}

bool ZooKeeperBackendImpl::PathKnownLocked(const std::string& lock_path) const {
  return known_paths.contains(lock_path);
}

void ZooKeeperBackendImpl::NotePathLocked(const std::string& lock_path, bool exists) {
  constexpr std::size_t kKnownPaths = 65'536;  // beyond, the oldest look again
  if (!exists) {
    known_paths.erase(lock_path);
    return;
  }
  if (known_paths.contains(lock_path)) return;
  known_paths.emplace(lock_path, known_next);
  known_order.emplace_back(known_next++, lock_path);
  while (known_order.size() > kKnownPaths) {
    auto it = known_paths.find(known_order.front().second);
    if (it != known_paths.end() && it->second == known_order.front().first) known_paths.erase(it);
    known_order.pop_front();
  }
}

// ZooKeeper deletes an emptied container at most znode.container.
// maxPerMinute (10,000 by default) a minute: keys used once at a higher rate
// would pile up, so the release of a key held alone deletes its path. But
// a key used again and again would pay for making its path each time:
// releases within kReuseWindow of one that deleted it leave it alone.
bool ZooKeeperBackendImpl::DeletesPathAtRelease(const Holding& h) {
  constexpr std::chrono::seconds kReuseWindow{10};
  constexpr std::size_t kRemembered = 65'536;  // ~6,500 keys a second; beyond, the reaper's
  if (!h.delete_path) return false;
  std::lock_guard lock(mu);
  const TimePoint now = Now();
  while (!emptied_order.empty() && now - emptied_order.front().first >= kReuseWindow) {
    auto it = emptied_paths.find(emptied_order.front().second);
    if (it != emptied_paths.end() && it->second == emptied_order.front().first) {
      emptied_paths.erase(it);
    }
    emptied_order.pop_front();
  }
  // Released again within the window: a key in use (a hot key pays for
  // its path once a window, not once a release).
  if (emptied_paths.contains(h.lock_path)) return false;
  if (emptied_paths.size() >= kRemembered) return false;
  emptied_paths.emplace(h.lock_path, now);
  emptied_order.emplace_back(now, h.lock_path);
  NotePathLocked(h.lock_path, false);
  return true;
}

void ZooKeeperBackendImpl::ArmNodeWatch(const Live& live, const std::shared_ptr<Holding>& h) {
  std::string path;
  {
    std::lock_guard lock(mu);
    if (h->node_watch_armed) return;
    h->node_watch_armed = true;
    path = h->NodePath();
  }
  std::weak_ptr<Holding> weak = h;
  (void)live.session->Exists(path, true, [this, weak](const Reply& r) {
    auto h = weak.lock();
    if (!h) return;
    std::lock_guard lock(mu);
    if (r.rc == ZNONODE) h->deleted = true;
    if (r.rc != ZOK && r.rc != ZNONODE) h->node_watch_armed = false;
  });
}

// ---------------------------------------------------------------------------
// Backend

ZooKeeperBackend::ZooKeeperBackend(ZkOptions options)
    : impl_(std::make_shared<ZooKeeperBackendImpl>(std::move(options))) {}

ZooKeeperBackend::~ZooKeeperBackend() = default;

Result<Attempt> ZooKeeperBackend::TryAcquire(const LeaseRequest& request) {
  LeaseRequest single = request;
  single.queue_ttl = milliseconds(0);  // a single attempt takes no place in the queue
  return NewZkAcquisition(impl_, single)->Try();
}

std::unique_ptr<Acquisition> ZooKeeperBackend::Begin(const LeaseRequest& request) {
  return NewZkAcquisition(impl_, request);
}

Status ZooKeeperBackend::Release(std::string_view key, const OwnerId& owner) {
  ZooKeeperBackendImpl& m = *impl_;
  DLOCK_ASSIGN_OR_RETURN(const std::string path, LockPath(m.options.chroot, key));
  if (std::shared_ptr<Holding> h = m.TakeHolding(key, owner)) {
    std::optional<Live> live = m.Current();
    if (!live || live->gen != h->gen) return Status::Ok();  // gone with its session
    return m.ReleaseHolding(*live, *h);
  }
  // Not held here (a waiter's owner, a lost reply, a repeated release): look
  // for nodes with the owner's guid, if connected. Without a connection
  // there is nothing this backend made that an acquisition or the keeper
  // does not already track, so do not wait for one.
  std::optional<Live> any = m.Current();
  if (!any || any->session->state() != Session::State::kConnected) {
    return UnavailableError("not connected to ZooKeeper at " + m.options.hosts +
                            ": cannot look for this owner's node of key " + Quoted(key));
  }
  bool found = false;
  std::vector<LockNode> others;
  DLOCK_RETURN_IF_ERROR(m.DeleteOwn(*any, path, owner, &found, &others));
  if (!found && !others.empty()) {
    const OwnerId holder = OwnerOfGuid(others.front().guid);
    return NotOwnerError("key " + Quoted(key) + " is held by " +
                         (holder.empty() ? "node " + others.front().name
                                         : "owner " + holder.ToString()));
  }
  return Status::Ok();
}

std::vector<Status> ZooKeeperBackend::KeepPlaces(std::span<const LeaseRequest> waiters) {
  return impl_->KeepPlaces(waiters);
}

std::vector<Status> ZooKeeperBackend::Renew(std::span<const LeaseRequest> leases) {
  ZooKeeperBackendImpl& m = *impl_;
  std::vector<Status> out;
  out.reserve(leases.size());
  std::vector<std::shared_ptr<Holding>> unwatched;
  std::unique_lock lock(m.mu);
  const TimePoint now = m.Now();
  const Session::State state = m.session ? m.session->state() : Session::State::kExpired;
  for (const LeaseRequest& r : leases) {
    auto it = m.holdings.find({r.key, r.owner});
    if (it == m.holdings.end() || it->second->gen != m.gen) {
      out.push_back(NotOwnerError("this owner's lock node for key " + Quoted(r.key) +
                                  " is gone (session expired, or the node was reaped)"));
      continue;
    }
    Holding& h = *it->second;
    if (h.deleted) {
      out.push_back(NotOwnerError("lock node " + h.NodePath() + " was deleted by someone else"));
    } else if (state == Session::State::kExpired || state == Session::State::kAuthFailed) {
      out.push_back(NotOwnerError("the ZooKeeper session expired, and its nodes with it"));
    } else if (state == Session::State::kConnected) {
      // The node exists as long as the session does, and nobody deleted it
      // (its watch would have said): no round trip needed. How long the
      // session is good for is Liveness()'s answer.
      h.expires_at = now + r.ttl;
      out.push_back(Status::Ok());
      if (!h.node_watch_armed) unwatched.push_back(it->second);
    } else {
      out.push_back(UnavailableError("disconnected from ZooKeeper; the session may still live, "
                                     "so the lease holds until its valid_until"));
    }
  }
  const Live live{m.session, m.gen};
  lock.unlock();
  // A lease that lives to its first renewal gets a watch on its own node, so
  // that a deletion by someone else (an operator, a bug) is noticed. Short
  // leases never pay for it.
  for (auto& h : unwatched) m.ArmNodeWatch(live, h);
  return out;
}

// The lock paths under `prefix` (a key prefix) that have contenders, with
// their contenders in grant order.
Result<std::vector<std::pair<std::string, std::vector<LockNode>>>> ZooKeeperBackendImpl::Walk(
    const Live& live, std::string_view prefix) {
  std::string_view p = prefix;
  if (p.starts_with('/')) p.remove_prefix(1);
  const auto slash = p.rfind('/');
  const std::string_view dir = slash == std::string_view::npos ? "" : p.substr(0, slash);
  const std::string partial(slash == std::string_view::npos ? p : p.substr(slash + 1));
  std::string start = root;
  if (!dir.empty()) {
    DLOCK_ASSIGN_OR_RETURN(start, LockPath(options.chroot, dir));
  }
  auto join = [](const std::string& parent, const std::string& child) {
    return parent == "/" ? "/" + child : parent + "/" + child;
  };

  std::vector<std::pair<std::string, std::vector<LockNode>>> out;
  std::vector<std::string> level = {start};
  std::size_t visited = 0;
  bool first = true;
  while (!level.empty()) {
    std::vector<std::shared_ptr<Op>> ops;
    for (const auto& path : level) ops.push_back(live.session->Children(path));
    std::vector<std::string> next;
    for (std::size_t i = 0; i < level.size(); ++i) {
      const Reply* r = ops[i]->Wait(attempt_timeout);
      if (r == nullptr) return UnavailableError("ZooKeeper did not list " + level[i] + " in time");
      if (r->rc == ZNONODE) continue;
      if (r->rc != ZOK) return ZkError(r->rc, "listing " + level[i]);
      visited += r->children.size();
      if (visited > kMaxListNodes) {
        return FailedPreconditionError("more than " + std::to_string(kMaxListNodes) +
                                       " znodes under " + start + "; list a narrower prefix");
      }
      if (!first) {
        auto sorted = SortedContenders(r->children);
        if (!sorted.empty() && KeyOfPath(options.chroot, level[i])) {
          out.emplace_back(level[i], std::move(sorted));
        }
      }
      for (const auto& child : r->children) {
        if (ParseLockNode(child)) continue;
        if (level[i] == "/" && child == "zookeeper") continue;
        if (level[i] == root &&
            (child == kDoneDirName || child == kDelayDirName || child == kBreaksDirName)) {
          continue;  // run-once records, lock-delay markers, break records
        }
        if (first && !partial.empty()) {
          auto decoded = DecodeSegment(child);
          if (!decoded || !decoded->starts_with(partial)) continue;
        }
        next.push_back(join(level[i], child));
      }
    }
    level = std::move(next);
    first = false;
  }
  return out;
}

Status ZooKeeperBackendImpl::ForEachNode(std::string_view prefix, bool holders, const NodeFn& fn) {
  DLOCK_ASSIGN_OR_RETURN(const Live live,
                         EnsureSession(options.session_timeout.value_or(kDefaultSessionTimeout)));
  DLOCK_ASSIGN_OR_RETURN(const auto queues, Walk(live, prefix));
  // One pipelined read per node, then the answers in order.
  struct Want {
    std::string key;
    LockNode node;
    std::shared_ptr<Op> get;
  };
  std::vector<Want> wants;
  for (const auto& [path, sorted] : queues) {
    const std::string key = *KeyOfPath(options.chroot, path);
    const std::size_t held = HolderCount(sorted);
    for (std::size_t i = holders ? 0 : held; i < (holders ? held : sorted.size()); ++i) {
      wants.push_back({key, sorted[i], live.session->Get(path + "/" + sorted[i].name)});
    }
  }
  for (auto& w : wants) {
    const Reply* r = w.get->Wait(attempt_timeout);
    if (r == nullptr) return UnavailableError("ZooKeeper did not answer in time");
    if (r->rc != ZOK) continue;  // gone meanwhile
    fn(w.key, w.node, *r, live);
  }
  return Status::Ok();
}

Result<std::vector<HolderInfo>> ZooKeeperBackend::List(std::string_view prefix) {
  std::vector<HolderInfo> out;
  Status s = impl_->ForEachNode(
      prefix, /*holders=*/true,
      [&](const std::string& key, const LockNode& node, const Reply& r, const Live& live) {
        HolderInfo h;
        h.key = key;
        h.owner = OwnerOfGuid(node.guid);
        h.token = static_cast<FencingToken>(r.stat.czxid);
        h.limit = node.limit;
        h.label = LabelOf(r.data);
        // A session-based lease has no time left of its own: the holder
        // keeps it while its session lives. Our own session's timeout is
        // what we know. held_for stays empty: the node's ctime is the
        // server's wall clock when it queued (not when it was granted), and
        // no server "now" is at hand.
        if (r.stat.ephemeral_owner == live.session->id()) {
          h.ttl_remaining = live.session->timeout();
          h.ttl = live.session->timeout();
        }
        out.push_back(std::move(h));
      });
  if (!s.ok()) return s;
  std::stable_sort(out.begin(), out.end(),
                   [](const HolderInfo& a, const HolderInfo& b) { return a.key < b.key; });
  return out;
}

Result<std::vector<WaiterInfo>> ZooKeeperBackend::Waiters(std::string_view prefix) {
  std::vector<WaiterInfo> out;
  Status s = impl_->ForEachNode(
      prefix, /*holders=*/false,
      [&](const std::string& key, const LockNode& node, const Reply& r, const Live&) {
        WaiterInfo info;
        info.key = key;
        info.owner = OwnerOfGuid(node.guid);
        info.limit = node.limit;
        info.label = LabelOf(r.data);
        out.push_back(std::move(info));  // waited_for: no server "now" to count from
      });
  if (!s.ok()) return s;
  std::stable_sort(out.begin(), out.end(),
                   [](const WaiterInfo& a, const WaiterInfo& b) { return a.key < b.key; });
  return out;
}

// ---------------------------------------------------------------------------
// Run-once records

Status ZooKeeperBackendImpl::CreateRecordDir(const Live& live, const std::string& dir) {
  // Persistent, the chroot's ancestors too: the directory is never deleted,
  // so a container would only add a way to lose it.
  if (!options.chroot.empty()) DLOCK_RETURN_IF_ERROR(CreateParents(live, options.chroot));
  auto op = live.session->Create(dir, "", 0);
  const Reply* r = op->Wait(attempt_timeout);
  if (r == nullptr) return UnavailableError("ZooKeeper did not answer the create of " + dir);
  if (r->rc != ZOK && r->rc != ZNODEEXISTS) return ZkError(r->rc, "creating " + dir);
  return Status::Ok();
}

std::string ZooKeeperBackend::Describe() const {
  std::string d = impl_->Describe();
  std::lock_guard lock(impl_->mu);
  if (impl_->session && impl_->session->state() == Session::State::kConnected) {
    char id[32];
    std::snprintf(id, sizeof id, "0x%llx", static_cast<unsigned long long>(impl_->session->id()));
    d += " (session " + std::string(id) + ", timeout " +
         FormatDuration(impl_->session->timeout()) + " negotiated)";
  }
  return d;
}

std::optional<SessionLiveness> ZooKeeperBackend::Liveness() {
  std::lock_guard lock(impl_->mu);
  if (!impl_->session) return SessionLiveness{milliseconds(1), TimePoint{}};
  return SessionLiveness{impl_->session->timeout(), impl_->session->heard_at()};
}

Status ZooKeeperBackend::Ping() {
  ZooKeeperBackendImpl& m = *impl_;
  DLOCK_ASSIGN_OR_RETURN(const Live live,
                         m.EnsureSession(m.options.session_timeout.value_or(kDefaultSessionTimeout)));
  static std::atomic<std::uint64_t> n{0};
  const std::string path = (m.root == "/" ? "" : m.root) + "/dlock-ping-" +
                           std::to_string(getpid()) + "-" + std::to_string(++n);
  for (int round = 0; round < 2; ++round) {
    auto create = live.session->Create(path, "", ZOO_EPHEMERAL);
    const Reply* r = create->Wait(m.attempt_timeout);
    if (r == nullptr) return UnavailableError("ZooKeeper did not answer a create in time");
    if (r->rc == ZNONODE && round == 0) {
      DLOCK_RETURN_IF_ERROR(m.CreateParents(live, m.root));
      continue;
    }
    if (r->rc != ZOK) return ZkError(r->rc, "creating " + path);
    auto del = live.session->Delete(path);
    const Reply* d = del->Wait(m.attempt_timeout);
    if (d == nullptr) return UnavailableError("ZooKeeper did not answer a delete in time");
    if (d->rc != ZOK) return ZkError(d->rc, "deleting " + path);
    return Status::Ok();
  }
  return UnavailableError("could not create " + path);
}

std::chrono::milliseconds ZooKeeperBackend::SessionTimeout() const {
  std::lock_guard lock(impl_->mu);
  return impl_->session ? impl_->session->timeout() : milliseconds(0);
}

std::int64_t ZooKeeperBackend::SessionId() const {
  std::lock_guard lock(impl_->mu);
  return impl_->session ? impl_->session->id() : 0;
}

// ---------------------------------------------------------------------------
// Construction

namespace {

Status CheckHosts(const internal::Uri& uri) {
  if (uri.hosts.empty()) {
    return InvalidArgumentError("zk:// URI " + uri.Redacted() +
                                " names no server: want zk://host:2181[,host:2181...][/chroot]");
  }
  std::size_t start = 0;
  while (start <= uri.hosts.size()) {
    std::size_t end = uri.hosts.find(',', start);
    if (end == std::string::npos) end = uri.hosts.size();
    const std::string hp = uri.hosts.substr(start, end - start);
    const auto colon = hp.rfind(':');
    const std::string port = colon == std::string::npos ? "" : hp.substr(colon + 1);
    const bool port_ok = !port.empty() && port.size() <= 5 &&
                         std::all_of(port.begin(), port.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) &&
                         std::stoi(port) > 0 && std::stoi(port) < 65536;
    if (hp.empty() || colon == 0 || !port_ok) {
      return InvalidArgumentError("server '" + hp + "' in " + uri.Redacted() +
                                  " is not host:port (e.g. 127.0.0.1:2181)");
    }
    start = end + 1;
  }
  return Status::Ok();
}

// A digest id as ZooKeeper keeps it: "name:" and the base64 of a SHA-1
// (28 characters ending in '=').
bool IsDigestId(std::string_view id) {
  const auto colon = id.find(':');
  if (colon == 0 || colon == std::string_view::npos) return false;
  const std::string_view hash = id.substr(colon + 1);
  return hash.size() == 28 && hash.back() == '=' &&
         std::all_of(hash.begin(), hash.end() - 1, [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/';
         });
}

Result<Identity> IdentityFromUri(const internal::Uri& uri) {
  Identity identity;
  if (!uri.user.empty() || uri.has_password) {
    if (uri.user.empty() || !uri.has_password) {
      return InvalidArgumentError("zk:// URI " + uri.Redacted() +
                                  " gives a user without a password or the other way round: "
                                  "digest authentication needs both (zk://user:password@...)");
    }
    identity.user = uri.user;
    identity.password = uri.password;
  }
  if (const std::string* admins = uri.Param("acl_admin")) {
    if (identity.user.empty()) {
      return InvalidArgumentError("acl_admin= needs credentials in the URI: an anonymous session's "
                                  "nodes are open to everyone");
    }
    for (std::size_t start = 0; start <= admins->size();) {
      const std::size_t end = std::min(admins->find(',', start), admins->size());
      const std::string id = admins->substr(start, end - start);
      if (!IsDigestId(id)) {
        return InvalidArgumentError("acl_admin '" + id + "' is not a digest id name:BASE64SHA1 "
                                    "(echo -n name:password | openssl dgst -binary -sha1 | base64)");
      }
      identity.admins.push_back(id);
      start = end + 1;
    }
  }
  return identity;
}

}  // namespace

Result<ZkOptions> OptionsFromUri(const internal::Uri& uri) {
  for (const char* tls : {"cacert", "cert", "key"}) {
    if (uri.Param(tls) != nullptr) {
      return InvalidArgumentError(std::string(tls) + "= asks for TLS, which the ZooKeeper store "
                                  "cannot do: Debian's ZooKeeper C client has no TLS "
                                  "(docs/backend-zookeeper.md, Secured)");
    }
  }
  DLOCK_RETURN_IF_ERROR(uri.CheckParams({"session_timeout", "acl_admin"}));
  DLOCK_RETURN_IF_ERROR(CheckHosts(uri));
  ZkOptions o;
  o.hosts = uri.hosts;
  DLOCK_ASSIGN_OR_RETURN(o.chroot, NormalizeChroot(uri.path));
  if (const std::string* t = uri.Param("session_timeout")) {
    auto d = ParseDuration(*t);
    if (!d.ok() || *d < milliseconds(1) || *d > std::chrono::hours(24)) {
      return InvalidArgumentError("session_timeout '" + *t +
                                  "' is not a duration between 1ms and 24h (e.g. 10s)");
    }
    o.session_timeout = *d;
  }
  DLOCK_ASSIGN_OR_RETURN(o.identity, IdentityFromUri(uri));
  return o;
}

std::unique_ptr<ZooKeeperBackend> OpenZooKeeper(ZkOptions options) {
  return std::make_unique<ZooKeeperBackend>(std::move(options));
}

Result<std::unique_ptr<Backend>> Open(const internal::Uri& uri,
                                      const internal::BackendParams& params) {
  DLOCK_ASSIGN_OR_RETURN(ZkOptions options, OptionsFromUri(uri));
  options.connect_timeout = params.connect_timeout;
  options.clock = params.clock;
  return std::unique_ptr<Backend>(OpenZooKeeper(std::move(options)));
}

}  // namespace dlock::zookeeper
