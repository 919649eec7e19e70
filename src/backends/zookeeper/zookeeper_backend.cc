#include "backends/zookeeper/zookeeper_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "backends/zookeeper/zk_path.h"
#include "backends/zookeeper/zk_session.h"
#include "core/duration.h"

namespace dlock::zookeeper {
namespace {

using internal::FormatDuration;
using internal::ParseDuration;
using std::chrono::milliseconds;

// One attempt waits at most this long for the ensemble (connecting, or one
// reply); the core retries an kUnavailable attempt until its own deadline,
// so a short bound keeps "store unreachable" within the caller's wait.
constexpr milliseconds kAttemptTimeout{1000};
// The session timeout for a session opened by List or Ping, before any
// acquisition said what ttl it wants.
constexpr milliseconds kDefaultSessionTimeout{30000};
// How often, within a session timeout, the backend's own heartbeat goes out.
constexpr int kHeartbeatsPerTimeout = 4;
// A node the reaper could not delete is tried again this much later.
constexpr milliseconds kReapRetry{200};
// List visits at most this many znodes.
constexpr std::size_t kMaxListNodes = 100'000;
// An exclusive waiter with at most this many nodes ahead watches every one
// of them, and holds the lock when the last goes, without another look (a
// node created later sorts after ours). A release so wakes at most this many
// waiters, however long the queue; farther back a waiter watches only the
// node just ahead and looks again when it goes.
constexpr std::size_t kWatchAhead = 4;
// The data of a lock path once a holding with a lock-delay was made there.
constexpr std::string_view kKeyHadDelays = "dlock:lock-delay";

std::string Basename(std::string_view path) {
  const auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string Quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string JsonEscaped(std::string_view s) {
  std::string out;
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += ch;  // UTF-8 passes as is
    }
  }
  return out;
}

// The node's data: who made it, for people and for `dlock status`. The limit
// is also in the node's name (what the lock recipe reads); the label only here.
std::string NodeData(const OwnerId& owner, std::uint32_t limit, std::string_view label) {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::string h;
  for (const char* p = host; *p; ++p) {
    if (*p != '"' && *p != '\\' && static_cast<unsigned char>(*p) >= 0x20) h += *p;
  }
  return "{\"dlock\":1,\"owner\":\"" + owner.ToString() + "\",\"host\":\"" + h +
         "\",\"pid\":" + std::to_string(getpid()) + ",\"limit\":" + std::to_string(limit) +
         ",\"label\":\"" + JsonEscaped(label) + "\"}";
}

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

}  // namespace

// What the backend knows about one acquisition's node.
struct Contender {
  enum class Phase {
    kFresh,     // no node yet
    kCreating,  // a create in flight, outcome not yet known
    kUnknown,   // a create (or delete) whose outcome was lost: look by guid
    kWaiting,   // node exists, not the lowest
    kHeld,      // node exists and is the lowest
  };
  std::string key;
  OwnerId owner;
  std::string lock_path;
  std::string prefix;  // "_c_<guid>-[n<limit>-][d<ms>-]lock-"
  std::uint32_t limit = 1;
  std::uint32_t delay_ms = 0;  // this holding's own lock-delay
  std::string delay_path;      // the key's lock-delay markers (DelayPath)
  std::string label;
  std::uint64_t gen = 0;
  Phase phase = Phase::kFresh;
  std::shared_ptr<Op> create;    // kCreating
  std::shared_ptr<Op> children;  // pipelined behind `create`
  std::string node;              // our node's name once known
  FencingToken token = 0;        // its czxid
  // kWaiting: the node whose deletion this waiter watches: one without
  // whose going it cannot be granted (the node just ahead for a limit-1
  // contender, the nearest limit-1 node ahead for a sharing one).
  std::string predecessor;  // full path
  // An exclusive waiter with at most kWatchAhead ahead: every node ahead not
  // yet seen to go (full paths, in queue order; back() is `predecessor`),
  // each watched. Empty otherwise.
  std::vector<std::string> ahead_left;
  // No such node (a semaphore waiter behind sharing nodes only): a watch on
  // the lock path's children instead, and a look at every change.
  bool watch_children = false;
  bool pred_gone = false;
  bool watch_armed = false;
  // The parent's cversion at the last look applied: looks answered out of
  // order (an event-driven one racing the caller's) never undo a newer one.
  std::int64_t looked_at_cversion = -1;
  // Lock-delays left by holdings before ours: the markers must be looked
  // at before a grant if a node ahead carried one (its name says so), or the
  // key ever had one (its lock path's data says so; see ClearLockDelays).
  bool ahead_had_delay = false;
  bool key_had_delays = false;
  // kHeld is a grant only once no lock-delay is in the way (the markers were
  // looked at, and our own is made): until then the head of the queue waits
  // for delay_until (our clock), past which it looks again.
  bool delay_checked = false;
  bool marker_made = false;
  TimePoint delay_until{};
  // kHeld: a watch on our own node tells us if someone deletes it.
  bool node_watch_armed = false;
  bool deleted = false;
  // The keeper deletes the node after this: ttl after the last renewal for
  // a holder, queue_ttl after the last attempt for a waiter.
  TimePoint expires_at{};

  std::string NodePath() const { return lock_path + "/" + node; }
  // Whether this waiter watches the node at `path`.
  bool Watches(const std::string& path) const {
    return path == predecessor ||
           std::find(ahead_left.begin(), ahead_left.end(), path) != ahead_left.end();
  }
  std::string MarkerPath() const { return delay_path + "/" + node; }
};

struct ZooKeeperBackend::Impl {
  explicit Impl(ZkOptions o)
      : options(std::move(o)),
        clock(options.clock ? options.clock : DefaultClock()),
        attempt_timeout(std::min(kAttemptTimeout, options.connect_timeout)),
        root(options.chroot.empty() ? "/" : options.chroot) {
    keeper = std::jthread([this](std::stop_token stop) { KeeperLoop(stop); });
  }
  ~Impl() {
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
      contenders.clear();
      reaping.clear();
    }
    s.reset();  // closes the handle, outside the lock its handlers take
  }

  struct Live {
    std::shared_ptr<Session> session;
    std::uint64_t gen = 0;
  };

  // --- sessions ---------------------------------------------------------

  // `provisional`: the caller (a read before any acquisition, such as
  // IsDone) has no ttl to ask for; the session it opens is replaced by the
  // first acquisition's, while nothing is locked on it, so that the
  // session's timeout follows the lease's ttl as without the read.
  Result<Live> EnsureSession(milliseconds ttl_hint, bool provisional = false);
  Status CreateDoneDir(const Live& live);
  void OnSessionState(std::uint64_t gen, Session::State state);
  void OnNodeEvent(std::uint64_t gen, int type, const std::string& path);
  std::optional<Live> Current() {
    std::lock_guard lock(mu);
    if (!session || session->dead()) return std::nullopt;
    return Live{session, gen};
  }

  // --- the lock recipe -----------------------------------------------------

  std::shared_ptr<Contender> FindOrAdd(const LeaseRequest& r, const std::string& path,
                                       std::uint64_t g);
  Status StartCreate(const Live& live, const std::shared_ptr<Contender>& c);
  Status FinishCreate(const Live& live, const std::shared_ptr<Contender>& c);
  Status Look(const Live& live, const std::shared_ptr<Contender>& c);
  Status Place(const Live& live, const std::shared_ptr<Contender>& c, const Reply& children);
  // Applies a look at the siblings to a contender whose node and token are
  // known; never blocks. Returns false when our node is not among them.
  bool ApplyLookLocked(Contender& c, const std::vector<LockNode>& sorted, const NodeStat& parent);
  // A node ahead of waiting `c` is gone (its watch fired, or it was gone when
  // the watch was set). Returns true when `c` must look at its siblings again.
  bool AheadGoneLocked(Contender& c, const std::string& path);
  // On the completion thread, when a waiter's predecessor goes: look again
  // at once, without waiting for the waiter's thread to wake.
  void LookOnEvent(const std::shared_ptr<Session>& s, const std::shared_ptr<Contender>& c);
  Status CreateParents(const Live& live, const std::string& lock_path);
  Status DeleteOwn(const Live& live, const std::string& lock_path, const OwnerId& owner,
                   bool* found, std::vector<LockNode>* others);
  void ArmNodeWatch(const Live& live, const std::shared_ptr<Contender>& c);
  // For a head of the queue: how long lock-delays left by lost holdings
  // still keep the key (zero: none; then our own marker, if we carry a
  // lock-delay, is made and the grant stands).
  Result<milliseconds> ClearLockDelays(const Live& live, const std::shared_ptr<Contender>& c);
  // The nodes of the queues under `prefix` that hold (`holders`) or wait,
  // each still there handed to `fn` with its data.
  using NodeFn = std::function<void(const std::string& key, const LockNode& node,
                                    const Reply& reply, const Live& live)>;
  Status ForEachNode(std::string_view prefix, bool holders, const NodeFn& fn);
  Result<std::vector<std::pair<std::string, std::vector<LockNode>>>> Walk(const Live& live,
                                                                          std::string_view prefix);

  // --- the keeper thread -----------------------------------------------------

  void KeeperLoop(std::stop_token stop);

  TimePoint Now() const { return clock->Now(); }
  std::chrono::nanoseconds Left(TimePoint until) const {
    return std::max<std::chrono::nanoseconds>(until - Now(), std::chrono::nanoseconds(0));
  }
  std::string Describe() const {
    return "zk://" + options.hosts + options.chroot;
  }

  const ZkOptions options;
  const std::shared_ptr<Clock> clock;
  const milliseconds attempt_timeout;
  const std::string root;  // the chroot, or "/"

  mutable std::mutex mu;
  std::condition_variable_any cv;          // waiters: watch fired, session changed
  std::condition_variable_any keeper_cv;   // the keeper: new work, reconnect
  std::shared_ptr<Session> session;
  std::uint64_t gen = 0;
  bool session_provisional = false;  // opened by EnsureSession(.., true)
  std::map<std::pair<std::string, OwnerId>, std::shared_ptr<Contender>> contenders;
  // Nodes the keeper is deleting (async), with what it deletes them for.
  std::vector<std::pair<std::shared_ptr<Op>, std::shared_ptr<Contender>>> reaping;
  std::vector<std::shared_ptr<Contender>> to_reap;  // needing a look first
  bool heartbeat_now = false;
  TimePoint last_heartbeat{};
  TimePoint keeper_next{};  // when the keeper, asleep, plans to wake
  std::jthread keeper;  // last: started in the constructor body
};

// ---------------------------------------------------------------------------
// Sessions

Result<ZooKeeperBackend::Impl::Live> ZooKeeperBackend::Impl::EnsureSession(milliseconds ttl_hint,
                                                                           bool provisional) {
  std::shared_ptr<Session> old;
  Live live;
  {
    std::lock_guard lock(mu);
    const bool replace = !provisional && session && session_provisional &&
                         contenders.empty() && !options.session_timeout.has_value() &&
                         session->timeout() != ttl_hint;
    if (!provisional) session_provisional = false;
    if (!session || session->dead() || replace) {
      session_provisional = provisional;
      old = std::move(session);
      const milliseconds timeout = options.session_timeout.value_or(ttl_hint);
      const std::uint64_t g = gen + 1;
      auto s = Session::Start(
          options.hosts, timeout, clock,
          [this, g](Session::State st) { OnSessionState(g, st); },
          [this, g](int type, const std::string& path) { OnNodeEvent(g, type, path); });
      if (!s.ok()) return s.status();
      session = std::move(*s);
      gen = g;
      // Nodes of an expired session are gone with it.
      std::erase_if(contenders, [&](const auto& kv) { return kv.second->gen != g; });
      heartbeat_now = true;
    }
    live = Live{session, gen};
  }
  old.reset();  // closes an expired handle outside the lock
  const Session::State st = live.session->WaitConnected(attempt_timeout);
  if (st == Session::State::kConnected) return live;
  if (st == Session::State::kAuthFailed) {
    return FailedPreconditionError("ZooKeeper at " + options.hosts + " refused authentication");
  }
  if (st == Session::State::kExpired) {
    return UnavailableError("the ZooKeeper session at " + options.hosts +
                            " expired; a new one is opened on retry");
  }
  return UnavailableError("no ZooKeeper server at " + options.hosts + " answered within " +
                          FormatDuration(attempt_timeout) +
                          " (is the ensemble running, and are these its client ports?)");
}

void ZooKeeperBackend::Impl::OnSessionState(std::uint64_t g, Session::State st) {
  std::lock_guard lock(mu);
  if (g != gen) return;
  if (st == Session::State::kExpired || st == Session::State::kAuthFailed) {
    // Every node of the session is gone: Renew reports each lease lost, a
    // waiter starts over in a new session.
    std::erase_if(contenders, [&](const auto& kv) { return kv.second->gen == g; });
  } else if (st == Session::State::kConnected) {
    heartbeat_now = true;  // (re)connected: prove the session alive at once
  }
  cv.notify_all();
  keeper_cv.notify_all();
}

void ZooKeeperBackend::Impl::OnNodeEvent(std::uint64_t g, int type, const std::string& path) {
  std::vector<std::shared_ptr<Contender>> look;
  std::shared_ptr<Session> s;
  std::unique_lock lock(mu);
  if (g != gen) return;
  s = session;
  bool woke = false;
  for (auto& [k, c] : contenders) {
    if (c->gen != g) continue;
    if (type == ZOO_CHILD_EVENT && c->phase == Contender::Phase::kWaiting &&
        c->watch_children && c->lock_path == path) {
      c->watch_armed = false;  // one-shot: the next wait arms it again
      look.push_back(c);
      woke = true;
    } else if (c->phase == Contender::Phase::kWaiting && !c->predecessor.empty() &&
               c->Watches(path)) {
      if (type == ZOO_DELETED_EVENT) {
        if (AheadGoneLocked(*c, path)) look.push_back(c);
        // The waiting thread only cares once the lock is ours or a look is
        // under way; one of several nodes ahead going is not worth a wake-up.
        if (c->phase != Contender::Phase::kWaiting || c->pred_gone) woke = true;
      } else {
        c->watch_armed = false;  // a data change used the watch up: re-arm
        woke = true;
      }
    } else if (c->phase == Contender::Phase::kHeld && !c->node.empty() &&
               c->NodePath() == path) {
      if (type == ZOO_DELETED_EVENT) {
        c->deleted = true;  // someone deleted our node: the lease is lost
      } else {
        c->node_watch_armed = false;
      }
    }
  }
  if (woke) cv.notify_all();
  lock.unlock();
  for (auto& c : look) LookOnEvent(s, c);
}

// ---------------------------------------------------------------------------
// The lock recipe

std::shared_ptr<Contender> ZooKeeperBackend::Impl::FindOrAdd(const LeaseRequest& r,
                                                              const std::string& path,
                                                              std::uint64_t g) {
  std::lock_guard lock(mu);
  if (contenders.empty()) {
    // The heartbeat starts: wake the keeper only if it would sleep past the
    // next beat (a short session); otherwise its own wake-up (at least once
    // a second) is soon enough, and a wake-up per acquisition would be a
    // thread switch on every uncontended cycle.
    const milliseconds period =
        session ? session->timeout() / kHeartbeatsPerTimeout : milliseconds(0);
    if (keeper_next > last_heartbeat + period) {
      heartbeat_now = true;  // what the keeper's wait looks for
      keeper_cv.notify_all();
    }
  }
  auto& slot = contenders[{r.key, r.owner}];
  if (!slot || slot->gen != g) {
    slot = std::make_shared<Contender>();
    slot->key = r.key;
    slot->owner = r.owner;
    slot->lock_path = path;
    slot->limit = std::max<std::uint32_t>(1, r.limit);
    slot->label = r.label;
    slot->delay_ms = static_cast<std::uint32_t>(
        std::clamp<std::int64_t>(r.lock_delay.count(), 0, 0xFFFFFFFFll));
    slot->prefix = LockNodePrefix(r.owner, slot->limit, slot->delay_ms);
    auto delay_path = DelayPath(options.chroot, r.key);
    slot->delay_path = delay_path.ok() ? *delay_path : std::string();
    slot->gen = g;
  }
  return slot;
}

Status ZooKeeperBackend::Impl::StartCreate(const Live& live, const std::shared_ptr<Contender>& c) {
  // The create and a look at the siblings go out back to back: the server
  // answers the read after applying the write, so one round trip tells both
  // our sequence and who is ahead.
  auto create = live.session->Create(c->lock_path + "/" + c->prefix,
                                     NodeData(c->owner, c->limit, c->label),
                                     ZOO_EPHEMERAL_SEQUENTIAL);
  auto children = live.session->Children(c->lock_path);
  std::lock_guard lock(mu);
  c->create = std::move(create);
  c->children = std::move(children);
  c->phase = Contender::Phase::kCreating;
  return Status::Ok();
}

Status ZooKeeperBackend::Impl::FinishCreate(const Live& live, const std::shared_ptr<Contender>& c) {
  std::shared_ptr<Op> create, children;
  {
    std::lock_guard lock(mu);
    create = c->create;
    children = c->children;
  }
  // The read's reply comes after the create's: waiting for it first wakes
  // this thread once, not twice.
  if (children) (void)children->Wait(attempt_timeout);
  const Reply* r = create->Wait(attempt_timeout);
  if (r == nullptr) {
    return UnavailableError("ZooKeeper did not answer the create of a lock node under " +
                            c->lock_path + " within " + FormatDuration(attempt_timeout) +
                            "; a retry finds the node by its guid");
  }
  if (r->rc == ZNONODE) {
    {
      std::lock_guard lock(mu);
      c->phase = Contender::Phase::kFresh;
    }
    return CreateParents(live, c->lock_path);
  }
  if (OutcomeUnknown(r->rc)) {
    std::lock_guard lock(mu);
    c->phase = Contender::Phase::kUnknown;
    return ZkError(r->rc, "creating a lock node under " + c->lock_path +
                              " (outcome unknown; a retry finds it by its guid)");
  }
  if (r->rc != ZOK) {
    std::lock_guard lock(mu);
    c->phase = Contender::Phase::kFresh;
    return ZkError(r->rc, "creating a lock node under " + c->lock_path);
  }
  {
    std::lock_guard lock(mu);
    c->node = Basename(r->path);
    c->token = static_cast<FencingToken>(r->stat.czxid);
    c->phase = Contender::Phase::kUnknown;  // until we know our place
  }
  const Reply* kids = children ? children->Wait(std::chrono::nanoseconds(0)) : nullptr;
  if (kids == nullptr || kids->rc != ZOK) return Look(live, c);
  return Place(live, c, *kids);
}

Status ZooKeeperBackend::Impl::Look(const Live& live, const std::shared_ptr<Contender>& c) {
  auto op = live.session->Children(c->lock_path);
  const Reply* r = op->Wait(attempt_timeout);
  if (r == nullptr) {
    return UnavailableError("ZooKeeper did not list " + c->lock_path + " within " +
                            FormatDuration(attempt_timeout));
  }
  if (r->rc == ZNONODE) {
    std::lock_guard lock(mu);
    c->phase = Contender::Phase::kFresh;  // no parent, so no node of ours
    c->node.clear();
    return Status::Ok();
  }
  if (r->rc != ZOK) return ZkError(r->rc, "listing " + c->lock_path);
  return Place(live, c, *r);
}

Status ZooKeeperBackend::Impl::Place(const Live& live, const std::shared_ptr<Contender>& c,
                                     const Reply& children) {
  const std::vector<LockNode> sorted = SortedContenders(children.children);
  std::string node;
  {
    std::lock_guard lock(mu);
    node = c->node;
  }
  const std::string guid = c->prefix.substr(3, 36);
  // Ours: the node we created, or (after a lost reply) the lowest with our
  // guid. Any other node with our guid is a duplicate from a retried create.
  std::size_t mine = sorted.size();
  for (std::size_t i = 0; i < sorted.size() && mine == sorted.size(); ++i) {
    if (node.empty() ? sorted[i].guid == guid : sorted[i].name == node) mine = i;
  }
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (i != mine && sorted[i].guid == guid) {
      (void)live.session->Delete(c->lock_path + "/" + sorted[i].name);  // no orphans
    }
  }
  if (mine == sorted.size()) {
    std::lock_guard lock(mu);
    c->phase = Contender::Phase::kFresh;  // gone (or never made): create anew
    c->node.clear();
    return Status::Ok();
  }
  FencingToken token;
  {
    std::lock_guard lock(mu);
    token = c->token;
  }
  if (node.empty() || token == 0) {
    // Adopting a node found by guid: its czxid is the token.
    auto op = live.session->Exists(c->lock_path + "/" + sorted[mine].name, false);
    const Reply* r = op->Wait(attempt_timeout);
    if (r == nullptr) return UnavailableError("ZooKeeper did not answer within the attempt");
    if (r->rc == ZNONODE) {
      std::lock_guard lock(mu);
      c->phase = Contender::Phase::kFresh;
      c->node.clear();
      return Status::Ok();
    }
    if (r->rc != ZOK) return ZkError(r->rc, "reading " + sorted[mine].name);
    token = static_cast<FencingToken>(r->stat.czxid);
  }
  std::lock_guard lock(mu);
  c->node = sorted[mine].name;
  c->token = token;
  if (!ApplyLookLocked(*c, sorted, children.stat)) {
    c->phase = Contender::Phase::kFresh;
    c->node.clear();
  }
  return Status::Ok();
}

bool ZooKeeperBackend::Impl::ApplyLookLocked(Contender& c, const std::vector<LockNode>& sorted,
                                             const NodeStat& parent) {
  const std::int64_t cversion = parent.cversion;
  if (c.phase == Contender::Phase::kHeld) return true;  // nothing can undo a grant
  if (cversion < c.looked_at_cversion) return true;     // an older look than ours
  std::size_t mine = sorted.size();
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i].name == c.node) mine = i;
  }
  if (mine == sorted.size()) return false;
  c.looked_at_cversion = cversion;
  if (parent.data_length > 0) c.key_had_delays = true;
  for (std::size_t i = 0; i < mine; ++i) {
    if (sorted[i].delay_ms != 0) c.ahead_had_delay = true;
  }
  // The sharing rule: granted iff mine + 1 <= the smallest limit among
  // ourselves and every node ahead (holders or waiters).
  std::uint32_t limit = std::max<std::uint32_t>(1, c.limit);
  for (std::size_t i = 0; i <= mine; ++i) limit = std::min(limit, sorted[i].limit);
  if (mine + 1 <= limit) {
    c.phase = Contender::Phase::kHeld;
    return true;
  }
  c.phase = Contender::Phase::kWaiting;
  if (c.limit == 1 && mine <= kWatchAhead) {
    std::vector<std::string> ahead;
    for (std::size_t i = 0; i < mine; ++i) ahead.push_back(c.lock_path + "/" + sorted[i].name);
    // A node not watched yet needs its watch; one that went since is found
    // gone when its watch is set.
    for (const auto& p : ahead) {
      if (std::find(c.ahead_left.begin(), c.ahead_left.end(), p) == c.ahead_left.end()) {
        c.watch_armed = false;
      }
    }
    c.ahead_left = std::move(ahead);
    c.predecessor = c.ahead_left.back();
    c.watch_children = false;
    c.pred_gone = false;
    return true;
  }
  c.ahead_left.clear();
  std::size_t target = mine;  // none
  if (c.limit == 1) {
    target = mine - 1;
  } else {
    for (std::size_t j = mine; j-- > 0;) {
      if (sorted[j].limit == 1) {
        target = j;
        break;
      }
    }
  }
  if (target != mine) {
    const std::string pred = c.lock_path + "/" + sorted[target].name;
    if (pred != c.predecessor || c.watch_children) {
      c.predecessor = pred;
      c.watch_children = false;
      c.watch_armed = false;
      c.pred_gone = false;
    }
  } else if (!c.watch_children) {
    c.predecessor.clear();
    c.watch_children = true;
    c.watch_armed = false;
    c.pred_gone = false;
  }
  return true;
}

bool ZooKeeperBackend::Impl::AheadGoneLocked(Contender& c, const std::string& path) {
  if (c.phase != Contender::Phase::kWaiting) return false;
  if (!c.ahead_left.empty()) {
    std::erase(c.ahead_left, path);
    if (c.ahead_left.empty()) {
      // Every node ahead at our last look is gone, and later nodes sort
      // after ours: we hold the lock now, no need to look.
      c.phase = Contender::Phase::kHeld;
      c.predecessor.clear();
    } else {
      c.predecessor = c.ahead_left.back();
    }
    return false;
  }
  if (path != c.predecessor) return false;
  c.pred_gone = true;
  return true;
}

void ZooKeeperBackend::Impl::LookOnEvent(const std::shared_ptr<Session>& s,
                                         const std::shared_ptr<Contender>& c) {
  std::weak_ptr<Contender> weak = c;
  (void)s->Children(c->lock_path, [this, weak](const Reply& r) {
    auto c = weak.lock();
    if (!c || r.rc != ZOK) return;
    const std::vector<LockNode> sorted = SortedContenders(r.children);
    std::lock_guard lock(mu);
    if (c->phase != Contender::Phase::kWaiting) return;
    (void)ApplyLookLocked(*c, sorted, r.stat);
    cv.notify_all();
  });
}

Status ZooKeeperBackend::Impl::CreateParents(const Live& live, const std::string& lock_path) {
  // Every ancestor below the chroot is a container node (ZooKeeper deletes
  // it once empty), as Curator makes them; the chroot itself is persistent.
  std::vector<std::shared_ptr<Op>> ops;
  for (std::size_t i = 1; i <= lock_path.size(); ++i) {
    if (i != lock_path.size() && lock_path[i] != '/') continue;
    const std::string p = lock_path.substr(0, i);
    const bool in_chroot = p.size() <= options.chroot.size();
    ops.push_back(live.session->Create(p, "", in_chroot ? 0 : ZOO_CONTAINER));
  }
  for (auto& op : ops) {
    const Reply* r = op->Wait(attempt_timeout);
    if (r == nullptr) return UnavailableError("ZooKeeper did not answer within the attempt");
    if (r->rc != ZOK && r->rc != ZNODEEXISTS) return ZkError(r->rc, "creating " + lock_path);
  }
  return Status::Ok();
}

void ZooKeeperBackend::Impl::ArmNodeWatch(const Live& live, const std::shared_ptr<Contender>& c) {
  std::string path;
  {
    std::lock_guard lock(mu);
    if (c->node_watch_armed || c->phase != Contender::Phase::kHeld) return;
    c->node_watch_armed = true;
    path = c->NodePath();
  }
  std::weak_ptr<Contender> weak = c;
  (void)live.session->Exists(path, true, [this, weak](const Reply& r) {
    auto c = weak.lock();
    if (!c) return;
    std::lock_guard lock(mu);
    if (r.rc == ZNONODE) c->deleted = true;
    if (r.rc != ZOK && r.rc != ZNONODE) c->node_watch_armed = false;
  });
}

Status ZooKeeperBackend::Impl::DeleteOwn(const Live& live, const std::string& lock_path,
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
// Lock-delay (docs/backend-zookeeper.md): a holding with lock-delay D keeps a
// persistent marker (DelayPath/<its node>, data "<D ms> <limit>") while it
// holds; a clean release deletes node and marker in one multi, so a marker
// whose node is gone is a lost holding. The first head of the queue to see
// it records the loss by writing "lost" into it; that write's mtime, the
// leader's clock, starts the delay, and the key is granted to nobody the
// marker excludes until the leader's clock has passed it by D. Counting from
// when the loss was seen, not from the session's end, only lengthens it.

namespace {

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

}  // namespace

Result<milliseconds> ZooKeeperBackend::Impl::ClearLockDelays(const Live& live,
                                                             const std::shared_ptr<Contender>& c) {
  bool look;
  std::string node, own_data;
  {
    std::lock_guard lock(mu);
    if (c->delay_until != TimePoint{} && Now() < c->delay_until) {
      return std::chrono::ceil<milliseconds>(c->delay_until - Now());
    }
    // A lost holding with a lock-delay is either one we saw ahead of us
    // (named with its delay) or one gone before we queued, whose marker
    // was made with the flag on the lock path that our look read.
    look = c->ahead_had_delay || c->key_had_delays;
    node = c->node;
    own_data = NodeData(c->owner, c->limit, c->label);
  }
  if (c->delay_path.empty() || node.empty()) return milliseconds(0);
  auto fail = [&](const Reply* r, const std::string& what) -> Status {
    if (r == nullptr) {
      return UnavailableError("ZooKeeper did not answer " + what + " within " +
                              FormatDuration(attempt_timeout));
    }
    return ZkError(r->rc, what);
  };
  milliseconds wait{0};
  if (look) {
    auto kids_op = live.session->Children(c->lock_path);
    auto marks_op = live.session->Children(c->delay_path);
    const Reply* kids = kids_op->Wait(attempt_timeout);
    if (kids == nullptr || kids->rc != ZOK) return fail(kids, "listing " + c->lock_path);
    const Reply* marks = marks_op->Wait(attempt_timeout);
    if (marks == nullptr || (marks->rc != ZOK && marks->rc != ZNONODE)) {
      return fail(marks, "listing the lock-delays of " + c->lock_path);
    }
    const std::vector<LockNode> sorted = SortedContenders(kids->children);
    std::size_t mine = sorted.size();
    std::uint32_t limit = c->limit;
    for (std::size_t i = 0; i < sorted.size() && mine == sorted.size(); ++i) {
      limit = std::min(limit, sorted[i].limit);
      if (sorted[i].name == node) mine = i;
    }
    if (mine == sorted.size()) {
      std::lock_guard lock(mu);
      c->deleted = true;  // the next pass starts over
      return UnavailableError("this owner's lock node " + c->NodePath() + " is gone; retrying");
    }
    std::set<std::string> alive;
    for (const auto& n : sorted) alive.insert(n.name);
    std::size_t ghosts = 0;
    std::optional<std::int64_t> store_now;  // ms, the leader's clock
    const std::vector<std::string> names =
        marks->rc == ZOK ? marks->children : std::vector<std::string>{};
    for (const std::string& name : names) {
      if (alive.count(name) != 0) continue;  // a live holding's (or ours)
      const std::string path = c->delay_path + "/" + name;
      auto get = live.session->Get(path);
      const Reply* g = get->Wait(attempt_timeout);
      if (g != nullptr && g->rc == ZNONODE) continue;  // cleared meanwhile
      if (g == nullptr || g->rc != ZOK) return fail(g, "reading " + path);
      std::optional<MarkerData> md = ParseMarker(g->data);
      if (!md) {  // not ours to judge; written by no dlock
        continue;
      }
      std::int64_t since = g->stat.mtime;
      if (!md->lost) {
        const std::string lost = std::to_string(md->delay_ms) + " " +
                                 std::to_string(md->limit) + " lost";
        auto set = live.session->Set(path, lost, g->stat.version);
        const Reply* sr = set->Wait(attempt_timeout);
        if (sr != nullptr && (sr->rc == ZNONODE || sr->rc == ZBADVERSION)) {
          // Cleared, or someone else recorded the loss first: read it again
          // on the next pass.
          return milliseconds(1);
        }
        if (sr == nullptr || sr->rc != ZOK) return fail(sr, "recording the loss in " + path);
        since = sr->stat.mtime;
        store_now = since;
      }
      if (!store_now) {
        // The ensemble's "now": the mtime of a write of our own node's data.
        auto probe = live.session->Set(c->NodePath(), own_data, -1);
        const Reply* pr = probe->Wait(attempt_timeout);
        if (pr == nullptr || pr->rc != ZOK) return fail(pr, "writing " + c->NodePath());
        store_now = pr->stat.mtime;
      }
      const std::int64_t left = since + md->delay_ms - *store_now;
      if (left <= 0) {
        (void)live.session->Delete(path)->Wait(attempt_timeout);  // served its delay
        continue;
      }
      ++ghosts;
      limit = std::min(limit, md->limit);
      wait = std::max(wait, milliseconds(left));
    }
    // The sharing rule with each lost holding in its delay as one more holder.
    if (mine + ghosts + 1 <= limit) wait = milliseconds(0);
  }
  if (wait > milliseconds(0)) {
    std::lock_guard lock(mu);
    c->delay_until = Now() + wait;
    return wait;
  }
  if (c->delay_ms > 0) {
    // First the flag on the lock path that tells every later look at it
    // that markers may exist, then the marker (pipelined: the session's
    // requests are applied in order). The flag is never cleared.
    for (int round = 0;; ++round) {
      auto flag = live.session->Set(c->lock_path, kKeyHadDelays, -1);
      auto op = live.session->Create(c->delay_path + "/" + node,
                                     std::to_string(c->delay_ms) + " " + std::to_string(c->limit),
                                     0);
      const Reply* f = flag->Wait(attempt_timeout);
      if (f == nullptr || f->rc != ZOK) return fail(f, "flagging " + c->lock_path);
      const Reply* r = op->Wait(attempt_timeout);
      if (r != nullptr && r->rc == ZNONODE && round == 0) {
        DLOCK_RETURN_IF_ERROR(CreateParents(live, c->delay_path));
        continue;
      }
      if (r == nullptr || (r->rc != ZOK && r->rc != ZNODEEXISTS)) {
        return fail(r, "creating the lock-delay marker of " + c->NodePath());
      }
      break;
    }
  }
  std::lock_guard lock(mu);
  c->delay_checked = true;
  c->marker_made = c->delay_ms > 0;
  c->delay_until = TimePoint{};
  return milliseconds(0);
}

// ---------------------------------------------------------------------------
// The keeper: the session's heartbeat, and deletion of nodes whose lease or
// queue place ran out while the session lives on.

void ZooKeeperBackend::Impl::KeeperLoop(std::stop_token stop) {
  std::unique_lock lock(mu);
  while (!stop.stop_requested()) {
    const TimePoint now = Now();
    // Finished deletions: a failed one goes back to be looked for.
    for (auto it = reaping.begin(); it != reaping.end();) {
      if (!it->first->done()) {
        ++it;
        continue;
      }
      const int rc = it->first->Wait(std::chrono::nanoseconds(0))->rc;
      if (OutcomeUnknown(rc)) {
        it->second->phase = Contender::Phase::kUnknown;
        it->second->node.clear();
        it->second->expires_at = now + kReapRetry;
        to_reap.push_back(it->second);
      }
      it = reaping.erase(it);
    }
    // Expired leases and queue places.
    for (auto it = contenders.begin(); it != contenders.end();) {
      if (it->second->expires_at != TimePoint{} && now >= it->second->expires_at) {
        to_reap.push_back(it->second);
        it = contenders.erase(it);
      } else {
        ++it;
      }
    }
    std::shared_ptr<Session> s = session;
    const std::uint64_t g = gen;
    struct Work {
      std::shared_ptr<Contender> c;
      std::uint64_t gen;
      std::string node_path;  // empty: look for the guid
    };
    std::vector<Work> work;
    for (auto it = to_reap.begin(); it != to_reap.end();) {
      if (now >= (*it)->expires_at) {
        const Contender& c = **it;
        const bool known = !c.node.empty() && c.phase != Contender::Phase::kCreating &&
                           c.phase != Contender::Phase::kUnknown;
        work.push_back({*it, c.gen, known ? c.NodePath() : std::string()});
        it = to_reap.erase(it);
      } else {
        ++it;
      }
    }
    const bool connected = s && s->state() == Session::State::kConnected;
    const milliseconds period = s ? s->timeout() / kHeartbeatsPerTimeout : milliseconds(1000);
    const bool active = !contenders.empty();
    bool beat = false;
    if (connected && active && (heartbeat_now || now >= last_heartbeat + period)) {
      beat = true;
      heartbeat_now = false;
      last_heartbeat = now;
    }
    lock.unlock();

    if (beat) (void)s->Exists(root, false);  // its answer moves heard_at
    for (auto& w : work) {
      if (!s || w.gen != g || s->dead()) continue;  // gone with its session
      if (!connected) {
        lock.lock();
        w.c->expires_at = now + kReapRetry;
        to_reap.push_back(w.c);
        lock.unlock();
        continue;
      }
      if (!w.node_path.empty()) {
        auto op = s->Delete(w.node_path);
        lock.lock();
        reaping.emplace_back(std::move(op), w.c);
        lock.unlock();
      } else {
        // Outcome unknown: look for our guid (blocking is fine here).
        bool found = false;
        Status st = DeleteOwn(Live{s, g}, w.c->lock_path, w.c->owner, &found, nullptr);
        if (!st.ok()) {
          lock.lock();
          w.c->expires_at = Now() + kReapRetry;
          to_reap.push_back(w.c);
          lock.unlock();
        }
      }
    }
    s.reset();

    lock.lock();
    TimePoint next = Now() + std::chrono::seconds(1);
    if (!reaping.empty()) next = std::min(next, Now() + milliseconds(20));
    if (!contenders.empty()) {
      if (connected) next = std::min(next, last_heartbeat + period);
      for (const auto& [k, c] : contenders) {
        if (c->expires_at != TimePoint{}) next = std::min(next, c->expires_at);
      }
    }
    for (const auto& c : to_reap) next = std::min(next, c->expires_at);
    auto beat_due = [&] {
      return heartbeat_now && !contenders.empty() && session &&
             session->state() == Session::State::kConnected;
    };
    const auto wait = std::max<std::chrono::nanoseconds>(next - Now(), std::chrono::nanoseconds(0));
    keeper_next = next;
    keeper_cv.wait_for(lock, stop, wait, beat_due);
    keeper_next = TimePoint{};
  }
}

// ---------------------------------------------------------------------------
// Backend

ZooKeeperBackend::ZooKeeperBackend(ZkOptions options)
    : impl_(std::make_shared<Impl>(std::move(options))) {}

ZooKeeperBackend::~ZooKeeperBackend() = default;

Result<Attempt> ZooKeeperBackend::TryAcquire(const LeaseRequest& request) {
  Impl& m = *impl_;
  auto path = LockPath(m.options.chroot, request.key);
  if (!path.ok()) return path.status();
  auto live = m.EnsureSession(request.ttl);
  if (!live.ok()) return live.status();
  std::shared_ptr<Contender> c = m.FindOrAdd(request, *path, live->gen);
  const bool queue = request.queue_ttl > milliseconds(0);

  for (int step = 0; step < 12; ++step) {
    Contender::Phase phase;
    {
      std::lock_guard lock(m.mu);
      if (c->gen != m.gen || m.contenders.count({request.key, request.owner}) == 0) {
        return UnavailableError("the ZooKeeper session changed during the attempt; retrying");
      }
      const TimePoint now = m.Now();
      phase = c->phase;
      if (phase == Contender::Phase::kHeld && c->deleted) {
        m.contenders.erase({request.key, request.owner});
        return UnavailableError("this owner's lock node " + c->NodePath() +
                                " was deleted by someone else; retrying");
      }
      if (phase == Contender::Phase::kHeld && c->delay_checked) {
        c->expires_at = now + request.ttl;
        Attempt a;
        a.granted = true;
        a.token = c->token;
        return a;
      }
      if (phase == Contender::Phase::kWaiting && queue && c->watch_armed && !c->pred_gone) {
        // Our predecessor still exists (its watch has not fired): not yet.
        c->expires_at = now + request.queue_ttl;
        return Attempt{};
      }
      c->expires_at = now + std::max(request.queue_ttl, m.attempt_timeout * 2);
    }
    Status st;
    milliseconds delayed{0};
    switch (phase) {
      case Contender::Phase::kFresh:
        st = m.StartCreate(*live, c);
        break;
      case Contender::Phase::kCreating:
        st = m.FinishCreate(*live, c);
        break;
      case Contender::Phase::kUnknown:
      case Contender::Phase::kWaiting:
        st = m.Look(*live, c);
        break;
      case Contender::Phase::kHeld: {
        auto left = m.ClearLockDelays(*live, c);
        if (!left.ok()) return left.status();
        delayed = *left;
        break;
      }
    }
    if (!st.ok()) return st;
    std::unique_lock lock(m.mu);
    if (c->phase == Contender::Phase::kHeld && delayed == milliseconds(0)) {
      continue;  // granted on the next pass
    }
    if (c->phase != Contender::Phase::kWaiting && c->phase != Contender::Phase::kHeld) continue;
    if (queue) {
      c->expires_at = m.Now() + request.queue_ttl;
      Attempt a;
      a.holder_ttl_remaining = delayed;  // the head waits out a lock-delay
      return a;
    }
    // A single attempt takes no place in the queue: withdraw.
    Attempt refused;
    refused.holder_ttl_remaining = delayed;
    const std::string node_path = c->NodePath();
    m.contenders.erase({request.key, request.owner});
    lock.unlock();
    auto del = live->session->Delete(node_path);
    const Reply* r = del->Wait(m.attempt_timeout);
    if (r == nullptr || OutcomeUnknown(r->rc)) {
      std::lock_guard relock(m.mu);
      c->phase = Contender::Phase::kUnknown;
      c->node.clear();
      c->expires_at = m.Now();
      m.to_reap.push_back(c);
      m.keeper_cv.notify_all();
    }
    return refused;
  }
  return UnavailableError("the lock node under " + *path + " kept changing; retrying");
}

Status ZooKeeperBackend::Release(std::string_view key, const OwnerId& owner) {
  Impl& m = *impl_;
  auto path = LockPath(m.options.chroot, key);
  if (!path.ok()) return path.status();
  std::shared_ptr<Contender> c;
  Contender::Phase phase = Contender::Phase::kFresh;
  std::shared_ptr<Op> create;
  std::string node;
  std::uint64_t c_gen = 0;
  {
    std::lock_guard lock(m.mu);
    auto it = m.contenders.find({std::string(key), owner});
    if (it != m.contenders.end()) {
      c = it->second;
      m.contenders.erase(it);
      phase = c->phase;
      create = c->create;
      node = c->node;
      c_gen = c->gen;
    }
  }
  if (c) {
    std::optional<Impl::Live> live = m.Current();
    if (!live || live->gen != c_gen) return Status::Ok();  // gone with its session
    if (phase == Contender::Phase::kCreating && create) {
      // Learn the name of the node being created, then delete it.
      const Reply* r = create->Wait(m.attempt_timeout);
      if (r != nullptr && r->rc == ZOK) {
        node = Basename(r->path);
        phase = Contender::Phase::kWaiting;
      } else if (r != nullptr && !OutcomeUnknown(r->rc)) {
        return Status::Ok();  // it failed: no node
      } else {
        phase = Contender::Phase::kUnknown;
      }
    }
    if (phase == Contender::Phase::kHeld && c->marker_made && !node.empty()) {
      // A clean release ends the lock-delay with the holding: node and
      // marker go together. A node already gone was lost, not released: its
      // marker stays and the delay runs.
      std::vector<MultiOp> ops(2);
      ops[0].kind = ops[1].kind = MultiOp::Kind::kDelete;
      ops[0].path = c->lock_path + "/" + node;
      ops[1].path = c->delay_path + "/" + node;
      auto op = live->session->Multi(std::move(ops));
      const Reply* r = op->Wait(m.attempt_timeout);  // points into `op`
      if (r != nullptr && r->rc == ZOK) return Status::Ok();
      if (r != nullptr && r->results.size() == 2 && r->results[0] == ZNONODE) return Status::Ok();
      // Otherwise (our marker gone, or no answer) the node alone, below.
    }
    if ((phase == Contender::Phase::kHeld || phase == Contender::Phase::kWaiting) &&
        !node.empty()) {
      const std::string path_of_node = c->lock_path + "/" + node;
      auto op = live->session->Delete(path_of_node);
      const Reply* r = op->Wait(m.attempt_timeout);
      if (r != nullptr && (r->rc == ZOK || r->rc == ZNONODE)) return Status::Ok();
      // Unknown: keep it for the keeper to find and delete.
      std::lock_guard lock(m.mu);
      c->phase = Contender::Phase::kUnknown;
      c->node.clear();
      c->expires_at = m.Now() + kReapRetry;
      m.to_reap.push_back(c);
      m.keeper_cv.notify_all();
      return r == nullptr ? UnavailableError("ZooKeeper did not answer the delete of " +
                                             path_of_node + " in time; it is retried")
                          : ZkError(r->rc, "deleting " + path_of_node);
    }
  }
  // No record (or its outcome was lost): look for nodes with our guid, if
  // connected. Without a connection there is nothing this backend made that
  // the keeper does not already track, so do not wait for one.
  std::optional<Impl::Live> any = m.Current();
  if (!any || any->session->state() != Session::State::kConnected) {
    return UnavailableError("not connected to ZooKeeper at " + m.options.hosts +
                            ": cannot look for this owner's node of key " + Quoted(key));
  }
  bool found = false;
  std::vector<LockNode> others;
  Status st = m.DeleteOwn(*any, *path, owner, &found, &others);
  if (!st.ok()) return st;
  if (!found && !others.empty()) {
    const OwnerId holder = OwnerOfGuid(others.front().guid);
    return NotOwnerError("key " + Quoted(key) + " is held by " +
                         (holder.empty() ? "node " + others.front().name
                                         : "owner " + holder.ToString()));
  }
  return Status::Ok();
}

std::vector<Status> ZooKeeperBackend::Renew(std::span<const LeaseRequest> leases) {
  Impl& m = *impl_;
  std::vector<Status> out;
  out.reserve(leases.size());
  std::vector<std::shared_ptr<Contender>> unwatched;
  Impl::Live live;
  std::unique_lock lock(m.mu);
  const TimePoint now = m.Now();
  const Session::State state = m.session ? m.session->state() : Session::State::kExpired;
  for (const LeaseRequest& r : leases) {
    auto it = m.contenders.find({r.key, r.owner});
    if (it == m.contenders.end() || it->second->phase != Contender::Phase::kHeld ||
        it->second->gen != m.gen) {
      out.push_back(NotOwnerError("this owner's lock node for key " + Quoted(r.key) +
                                  " is gone (session expired, or the node was reaped)"));
      continue;
    }
    Contender& c = *it->second;
    if (c.deleted) {
      out.push_back(NotOwnerError("lock node " + c.NodePath() + " was deleted by someone else"));
    } else if (state == Session::State::kExpired || state == Session::State::kAuthFailed) {
      out.push_back(NotOwnerError("the ZooKeeper session expired, and its nodes with it"));
    } else if (state == Session::State::kConnected) {
      // The node exists as long as the session does, and nobody deleted it
      // (its watch would have said): no round trip needed. How long the
      // session is good for is Liveness()'s answer.
      c.expires_at = now + r.ttl;
      out.push_back(Status::Ok());
      if (!c.node_watch_armed) unwatched.push_back(it->second);
    } else {
      out.push_back(UnavailableError("disconnected from ZooKeeper; the session may still live, "
                                     "so the lease holds until its valid_until"));
    }
  }
  live = Impl::Live{m.session, m.gen};
  lock.unlock();
  // A lease that lives to its first renewal gets a watch on its own node, so
  // that a deletion by someone else (an operator, a bug) is noticed. Short
  // leases never pay for it.
  for (auto& c : unwatched) m.ArmNodeWatch(live, c);
  return out;
}

bool ZooKeeperBackend::WaitForRelease(std::string_view key, TimePoint until,
                                      std::stop_token stop) {
  Impl& m = *impl_;
  std::unique_lock lock(m.mu);
  std::vector<std::shared_ptr<Contender>> mine;
  for (auto& [k, c] : m.contenders) {
    if (k.first == key && c->gen == m.gen && c->phase == Contender::Phase::kWaiting) {
      mine.push_back(c);
    }
  }
  if (mine.empty()) return false;  // not queued here: the core polls
  std::shared_ptr<Session> s = m.session;
  for (auto& c : mine) {
    if (c->pred_gone) return true;
    if (!c->watch_armed && s && c->watch_children) {
      c->watch_armed = true;
      std::weak_ptr<Contender> weak = c;
      const std::string lock_path = c->lock_path;
      lock.unlock();
      (void)s->WatchChildren(lock_path, [&m, weak](const Reply& r) {
        auto c = weak.lock();
        if (!c) return;
        std::lock_guard lock(m.mu);
        if (!c->watch_children) return;
        if (r.rc != ZOK) {
          c->watch_armed = false;  // not set: the next wait tries again
        } else if (c->phase == Contender::Phase::kWaiting &&
                   !m.ApplyLookLocked(*c, SortedContenders(r.children), r.stat)) {
          c->watch_armed = false;  // our node is gone: the next attempt looks
        }
        m.cv.notify_all();
      });
      lock.lock();
    } else if (!c->watch_armed && s) {
      c->watch_armed = true;
      std::weak_ptr<Contender> weak = c;
      const std::vector<std::string> paths =
          c->ahead_left.empty() ? std::vector<std::string>{c->predecessor} : c->ahead_left;
      lock.unlock();
      for (const std::string& path : paths) {
        (void)s->Exists(path, true, [&m, weak, path](const Reply& r) {
          auto c = weak.lock();
          if (!c) return;
          std::lock_guard lock(m.mu);
          if (!c->Watches(path)) return;  // no longer ahead of us
          if (r.rc == ZNONODE) {
            (void)m.AheadGoneLocked(*c, path);  // gone before the watch was set
          } else if (r.rc != ZOK) {
            c->watch_armed = false;  // not set: the next wait tries again
          }
          m.cv.notify_all();
        });
      }
      lock.lock();
    }
  }
  const std::uint64_t g = m.gen;
  auto ready = [&] {
    if (m.gen != g) return true;
    for (auto& c : mine) {
      if (c->pred_gone || !c->watch_armed || c->phase != Contender::Phase::kWaiting) return true;
      if (m.contenders.count({c->key, c->owner}) == 0) return true;
    }
    return false;
  };
  const auto left = std::max<std::chrono::nanoseconds>(until - m.Now(), std::chrono::nanoseconds(0));
  m.cv.wait_for(lock, stop, left, ready);
  return true;
}

// The lock paths under `prefix` (a key prefix) that have contenders, with
// their contenders in grant order.
Result<std::vector<std::pair<std::string, std::vector<LockNode>>>> ZooKeeperBackend::Impl::Walk(
    const Live& live, std::string_view prefix) {
  std::string_view p = prefix;
  if (p.starts_with('/')) p.remove_prefix(1);
  const auto slash = p.rfind('/');
  const std::string_view dir = slash == std::string_view::npos ? "" : p.substr(0, slash);
  const std::string partial(slash == std::string_view::npos ? p : p.substr(slash + 1));
  std::string start = root;
  if (!dir.empty()) {
    auto d = LockPath(options.chroot, dir);
    if (!d.ok()) return d.status();
    start = *d;
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
        if (level[i] == root && (child == kDoneDirName || child == kDelayDirName)) {
          continue;  // run-once records, lock-delay markers
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

Status ZooKeeperBackend::Impl::ForEachNode(std::string_view prefix, bool holders,
                                           const NodeFn& fn) {
  auto live = EnsureSession(options.session_timeout.value_or(kDefaultSessionTimeout));
  if (!live.ok()) return live.status();
  auto queues = Walk(*live, prefix);
  if (!queues.ok()) return queues.status();
  // One pipelined read per node, then the answers in order.
  struct Want {
    std::string key;
    LockNode node;
    std::shared_ptr<Op> get;
  };
  std::vector<Want> wants;
  for (const auto& [path, sorted] : *queues) {
    const std::string key = *KeyOfPath(options.chroot, path);
    const std::size_t held = HolderCount(sorted);
    for (std::size_t i = holders ? 0 : held; i < (holders ? held : sorted.size()); ++i) {
      wants.push_back({key, sorted[i], live->session->Get(path + "/" + sorted[i].name)});
    }
  }
  for (auto& w : wants) {
    const Reply* r = w.get->Wait(attempt_timeout);
    if (r == nullptr) return UnavailableError("ZooKeeper did not answer in time");
    if (r->rc != ZOK) continue;  // gone meanwhile
    fn(w.key, w.node, *r, *live);
  }
  return Status::Ok();
}

Result<std::vector<HolderInfo>> ZooKeeperBackend::List(std::string_view prefix) {
  std::vector<HolderInfo> out;
  Status s = impl_->ForEachNode(
      prefix, /*holders=*/true,
      [&](const std::string& key, const LockNode& node, const Reply& r, const Impl::Live& live) {
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
      [&](const std::string& key, const LockNode& node, const Reply& r, const Impl::Live&) {
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

Status ZooKeeperBackend::Impl::CreateDoneDir(const Live& live) {
  // Persistent, the chroot's ancestors too: records are never deleted, so
  // a container would only add a way to lose the directory.
  if (!options.chroot.empty()) DLOCK_RETURN_IF_ERROR(CreateParents(live, options.chroot));
  const std::string dir = DoneDir(options.chroot);
  auto op = live.session->Create(dir, "", 0);
  const Reply* r = op->Wait(attempt_timeout);
  if (r == nullptr) return UnavailableError("ZooKeeper did not answer the create of " + dir);
  if (r->rc != ZOK && r->rc != ZNODEEXISTS) return ZkError(r->rc, "creating " + dir);
  return Status::Ok();
}

Result<bool> ZooKeeperBackend::IsDone(std::string_view key) {
  Impl& m = *impl_;
  auto path = DonePath(m.options.chroot, key);
  if (!path.ok()) return path.status();
  auto live = m.EnsureSession(m.options.session_timeout.value_or(kDefaultSessionTimeout),
                              /*provisional=*/true);
  if (!live.ok()) return live.status();
  // A sync, then the read, pipelined on the session (answered in order): the
  // member this session talks to may lag the leader, and a record another
  // client has just written must be seen, as on the other stores.
  auto sync = live->session->Sync("/");
  auto op = live->session->Exists(*path, false);
  if (const Reply* sr = sync->Wait(m.attempt_timeout); sr != nullptr && sr->rc != ZOK) {
    return ZkError(sr->rc, "syncing before a read of " + *path);
  }
  const Reply* r = op->Wait(m.attempt_timeout);
  if (r == nullptr) {
    return UnavailableError("ZooKeeper did not answer a read of " + *path + " within " +
                            FormatDuration(m.attempt_timeout));
  }
  if (r->rc == ZOK) return true;
  if (r->rc == ZNONODE) return false;
  return ZkError(r->rc, "reading the done mark " + *path);
}

Status ZooKeeperBackend::MarkDone(std::string_view key, const OwnerId& owner) {
  Impl& m = *impl_;
  auto done = DonePath(m.options.chroot, key);
  if (!done.ok()) return done.status();
  auto not_owner = [&](std::string_view why) {
    return NotOwnerError("this owner does not hold " + Quoted(key) + " on " + m.Describe() +
                         " (" + std::string(why) + "): its run is not recorded as done");
  };
  std::shared_ptr<Contender> c;
  std::string node_path;
  FencingToken token = 0;
  std::uint64_t c_gen = 0;
  {
    std::lock_guard lock(m.mu);
    auto it = m.contenders.find({std::string(key), owner});
    if (it == m.contenders.end() || it->second->gen != m.gen ||
        it->second->phase != Contender::Phase::kHeld || it->second->node.empty()) {
      return not_owner("no lock node of it in this session");
    }
    c = it->second;
    if (c->deleted) return not_owner("its lock node was deleted");
    node_path = c->NodePath();
    token = c->token;
    c_gen = c->gen;
  }
  std::optional<Impl::Live> live = m.Current();
  if (!live || live->gen != c_gen) return not_owner("the session that held it expired");
  const std::string data = "{\"dlock\":1,\"owner\":\"" + owner.ToString() +
                           "\",\"token\":" + std::to_string(token) + "}";
  for (int round = 0; round < 2; ++round) {
    std::vector<MultiOp> ops(2);
    ops[0].kind = MultiOp::Kind::kCheck;
    ops[0].path = node_path;  // version -1: only that it still exists
    ops[1].kind = MultiOp::Kind::kCreate;
    ops[1].path = *done;
    ops[1].data = data;
    auto op = live->session->Multi(std::move(ops));
    const Reply* r = op->Wait(m.attempt_timeout);
    if (r == nullptr) {
      return UnavailableError("ZooKeeper did not answer the marking of " + Quoted(key) +
                              " as done within " + FormatDuration(m.attempt_timeout) +
                              " (outcome unknown)");
    }
    if (r->rc == ZOK) return Status::Ok();
    if (r->results.size() == 2) {
      if (r->results[0] != ZOK) {
        if (r->results[0] == ZNONODE) {
          std::lock_guard lock(m.mu);
          c->deleted = true;  // Renew reports the lease lost too
        }
        return not_owner("its lock node " + node_path + " is gone");
      }
      // Checked in the same multi: we hold the lock, and the record exists.
      if (r->results[1] == ZNODEEXISTS) return Status::Ok();
      if (r->results[1] == ZNONODE && round == 0) {
        DLOCK_RETURN_IF_ERROR(m.CreateDoneDir(*live));
        continue;
      }
      return ZkError(r->results[1], "creating " + *done);
    }
    if (r->rc == ZSESSIONEXPIRED) return not_owner("the session that held it expired");
    return ZkError(r->rc, "marking " + Quoted(key) + " done (" + *done + ")");
  }
  return UnavailableError("could not create " + DoneDir(m.options.chroot));
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
  Impl& m = *impl_;
  auto live = m.EnsureSession(m.options.session_timeout.value_or(kDefaultSessionTimeout));
  if (!live.ok()) return live.status();
  static std::atomic<std::uint64_t> n{0};
  const std::string path = (m.root == "/" ? "" : m.root) + "/dlock-ping-" +
                           std::to_string(getpid()) + "-" + std::to_string(++n);
  for (int round = 0; round < 2; ++round) {
    auto create = live->session->Create(path, "", ZOO_EPHEMERAL);
    const Reply* r = create->Wait(m.attempt_timeout);
    if (r == nullptr) return UnavailableError("ZooKeeper did not answer a create in time");
    if (r->rc == ZNONODE && round == 0) {
      DLOCK_RETURN_IF_ERROR(m.CreateParents(*live, m.root));
      continue;
    }
    if (r->rc != ZOK) return ZkError(r->rc, "creating " + path);
    auto del = live->session->Delete(path);
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

Result<ZkOptions> OptionsFromUri(const internal::Uri& uri) {
  DLOCK_RETURN_IF_ERROR(uri.CheckParams({"session_timeout"}));
  ZkOptions o;
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
  o.hosts = uri.hosts;
  auto chroot = NormalizeChroot(uri.path);
  if (!chroot.ok()) return chroot.status();
  o.chroot = *chroot;
  if (const std::string* t = uri.Param("session_timeout")) {
    auto d = ParseDuration(*t);
    if (!d.ok() || *d < milliseconds(1) || *d > std::chrono::hours(24)) {
      return InvalidArgumentError("session_timeout '" + *t +
                                  "' is not a duration between 1ms and 24h (e.g. 10s)");
    }
    o.session_timeout = *d;
  }
  return o;
}

std::unique_ptr<ZooKeeperBackend> OpenZooKeeper(ZkOptions options) {
  return std::make_unique<ZooKeeperBackend>(std::move(options));
}

Result<std::unique_ptr<Backend>> Open(const internal::Uri& uri,
                                      const internal::BackendParams& params) {
  auto options = OptionsFromUri(uri);
  if (!options.ok()) return options.status();
  options->connect_timeout = params.connect_timeout;
  options->clock = params.clock;
  return std::unique_ptr<Backend>(OpenZooKeeper(std::move(*options)));
}

}  // namespace dlock::zookeeper
