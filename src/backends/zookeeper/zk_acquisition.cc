// The lock recipe for one acquisition (zk_contender.h has its states):
// create an ephemeral-sequential node, look at the siblings, watch what must
// go, and at the head check lock-delays before the grant, which hands the
// node to the backend's holdings.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/zookeeper/zk_backend_impl.h"
#include "core/duration.h"

namespace dlock::zookeeper {
namespace {

using internal::FormatDuration;
using std::chrono::milliseconds;
using Live = ZooKeeperBackendImpl::Live;

// One Try takes at most this many steps (create, look, lock-delays, ...)
// before it answers kUnavailable.
constexpr int kMaxSteps = 12;

std::string Basename(std::string_view path) {
  const auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

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

class ZkAcquisition final : public Acquisition {
 public:
  ZkAcquisition(std::shared_ptr<ZooKeeperBackendImpl> m, const LeaseRequest& request);
  ~ZkAcquisition() override;

  Result<Attempt> Try() override;
  bool Wait(TimePoint until, std::stop_token stop) override;
  bool Notify(std::function<void()> wake) override;
  void StopNotify() override;
  void Abandon() override;

  using Step = std::optional<Attempt>;  // an answer, or nullopt: take the next step

  // For TryEach's rounds: takes steps until an answer, or until requests
  // are in flight that the next step would wait for (nullopt); `steps`
  // counts them across calls. Waits end by `round_end`.
  Result<Step> Advance(const Live& live, TimePoint round_end, int& steps);
  const Status& invalid() const { return invalid_; }
  // Waits for the delete of a refused single attempt's node, if one was
  // sent, by `round_end`.
  void FinishWithdraw(TimePoint round_end) {
    round_end_ = round_end;
    AwaitWithdraw();
  }

 private:
  Result<Step> TakeStep(const Live& live);
  Result<Step> HeldAlreadyLocked();
  // The most a wait for one reply may take now: the attempt's bound, or
  // what is left of TryEach's round.
  std::chrono::nanoseconds Bound() const;
  // True when requests are in flight that the next step waits for.
  bool AwaitingLocked() const;
  Status StartCreate(const Live& live);
  Status FinishLooks(const Live& live, const Contender::NoNode& looks);
  // Sends our node's create and a look behind it; `path_data`: the lock
  // path is missing, and is created first, with this data (and its
  // parents before it, with `parents`).
  void SendCreate(const Live& live, std::optional<std::string_view> path_data,
                  bool parents = false);
  Status FinishCreate(const Live& live, const Contender::Creating& creating);
  Status Look(const Live& live, const OwnNode& node);
  Status Place(const Live& live, OwnNode node, const Reply& children);
  Result<FencingToken> ReadToken(const Live& live, const std::string& name);
  Result<Step> AtHeadStep(const Live& live);
  Step Grant();
  Attempt NotYet(const Live& live, milliseconds delayed);
  void Withdraw(const Live& live);
  void AwaitWithdraw();
  void Leave(const Live& live, const Contender::Standing& was);
  void ForgetNode();
  // Sets the watches of a queued contender not yet watching (mu held by
  // `lock`, released while the requests go out).
  void ArmLocked(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Session>& s);

  const std::shared_ptr<ZooKeeperBackendImpl> m_;
  const std::shared_ptr<Contender> c_;
  const milliseconds ttl_;
  const milliseconds queue_ttl_;  // zero: a single attempt, no place kept
  Status invalid_;                // the key has no lock path
  TimePoint round_end_ = TimePoint::max();  // Advance's; max: a Try's own bounds
  // The delete of a refused single attempt's node, in flight.
  struct Withdrawal {
    std::shared_ptr<Op> del;
    std::string name;
    std::uint64_t gen = 0;
  };
  std::optional<Withdrawal> withdrawing_;
};

ZkAcquisition::ZkAcquisition(std::shared_ptr<ZooKeeperBackendImpl> m, const LeaseRequest& r)
    : m_(std::move(m)), c_(std::make_shared<Contender>()), ttl_(r.ttl), queue_ttl_(r.queue_ttl) {
  Contender& c = *c_;
  c.key = r.key;
  c.owner = r.owner;
  c.guid = GuidOf(r.owner);
  c.limit = std::max<std::uint32_t>(1, r.limit);
  c.delay_ms = static_cast<std::uint32_t>(
      std::clamp<std::int64_t>(r.lock_delay.count(), 0, 0xFFFFFFFFll));
  c.prefix = LockNodePrefix(r.owner, c.limit, c.delay_ms);
  c.data = NodeData(r.owner, c.limit, r.label);
  Result<std::string> path = LockPath(m_->options.chroot, r.key);
  if (!path.ok()) {
    invalid_ = path.status();
    return;
  }
  c.lock_path = std::move(*path);
  Result<std::string> delay_path = DelayPath(m_->options.chroot, r.key);
  if (delay_path.ok()) c.delay_path = std::move(*delay_path);
  m_->AddContender(c_);
}

ZkAcquisition::~ZkAcquisition() {
  if (!invalid_.ok()) return;
  std::function<void()> wake;  // dropped outside mu
  std::lock_guard lock(m_->mu);
  // A watch's answer may still hold the contender: it must find no wake-up.
  wake = std::exchange(c_->wake, nullptr);
  m_->contenders.erase(c_);
  // Dropped without Abandon: a waiter that died. Its node lapses with its
  // place, queue_ttl after its last attempt. A single attempt has a node
  // left only when an answer was lost: its owner's retry, which finds the
  // node by its guid and keeps it, comes first.
  const TimePoint due = c_->expires_at != TimePoint{} ? c_->expires_at
                                                      : m_->Now() + m_->attempt_timeout * 2;
  if (std::optional<Reap> reap = NodeToReap(*c_, due)) m_->ReapLaterLocked(std::move(*reap));
}

Result<Attempt> ZkAcquisition::Try() {
  DLOCK_RETURN_IF_ERROR(invalid_);
  DLOCK_ASSIGN_OR_RETURN(const Live live, m_->EnsureSession(ttl_));
  int steps = 0;
  for (;;) {
    Result<Step> answer = Advance(live, TimePoint::max(), steps);
    if (answer.ok() && !*answer) continue;
    AwaitWithdraw();
    if (!answer.ok()) return answer.status();
    return **answer;
  }
}

Result<ZkAcquisition::Step> ZkAcquisition::Advance(const Live& live, TimePoint round_end,
                                                   int& steps) {
  DLOCK_RETURN_IF_ERROR(invalid_);
  round_end_ = round_end;
  if (steps == 0) {
    std::lock_guard lock(m_->mu);
    if (std::holds_alternative<Contender::Abandoned>(c_->standing)) {
      return FailedPreconditionError("the acquisition of key " + Quoted(c_->key) +
                                     " was abandoned");
    }
    if (c_->gen != live.gen) {
      // A new session: what we had on the one before went with it.
      c_->standing = Contender::NoNode{};
      c_->gen = live.gen;
    }
  }
  while (steps < kMaxSteps) {
    ++steps;
    DLOCK_ASSIGN_OR_RETURN(const Step answer, TakeStep(live));
    if (answer) return answer;
    std::lock_guard lock(m_->mu);
    if (round_end != TimePoint::max() && AwaitingLocked()) return Step();
  }
  return UnavailableError("the lock node under " + c_->lock_path + " kept changing; retrying");
}

std::chrono::nanoseconds ZkAcquisition::Bound() const {
  if (round_end_ == TimePoint::max()) return m_->attempt_timeout;
  return std::clamp<std::chrono::nanoseconds>(round_end_ - MonotonicClock::now(),
                                              std::chrono::nanoseconds(0), m_->attempt_timeout);
}

bool ZkAcquisition::AwaitingLocked() const {
  if (std::holds_alternative<Contender::Creating>(c_->standing)) return true;
  const auto* none = std::get_if<Contender::NoNode>(&c_->standing);
  return none != nullptr && none->children != nullptr;
}

Result<ZkAcquisition::Step> ZkAcquisition::TakeStep(const Live& live) {
  Contender::Standing now;  // a copy: the steps wait for the store without the mutex
  {
    std::lock_guard lock(m_->mu);
    if (m_->gen != live.gen) {
      return UnavailableError("the ZooKeeper session changed during the attempt; retrying");
    }
    const TimePoint t = m_->Now();
    if (queue_ttl_ > milliseconds(0) && std::holds_alternative<Contender::Queued>(c_->standing) &&
        !ReadyToTry(*c_)) {
      // What we watch is still there (its watch has not fired): not yet.
      c_->expires_at = t + queue_ttl_;
      return Step(Attempt{});
    }
    const auto* none = std::get_if<Contender::NoNode>(&c_->standing);
    if ((none != nullptr && none->children == nullptr) ||
        std::holds_alternative<Contender::Granted>(c_->standing)) {
      DLOCK_ASSIGN_OR_RETURN(const Step held, HeldAlreadyLocked());
      if (held) return held;
    }
    // A waiter's node lapses if no attempt comes back for it. A single
    // attempt's does not: its acquisition ends with the call that made it,
    // and its end reaps what is left (TryEach's rounds may take longer
    // than one attempt's bound).
    c_->expires_at = queue_ttl_ > milliseconds(0)
                         ? t + std::max<milliseconds>(queue_ttl_, m_->attempt_timeout * 2)
                         : TimePoint{};
    now = c_->standing;
  }
  Status st;
  if (const auto* none = std::get_if<Contender::NoNode>(&now)) {
    st = none->children ? FinishLooks(live, *none) : StartCreate(live);
  } else if (const auto* creating = std::get_if<Contender::Creating>(&now)) {
    st = FinishCreate(live, *creating);
  } else if (std::holds_alternative<Contender::AtHead>(now)) {
    return AtHeadStep(live);
  } else if (const OwnNode* node = NodeOf(now)) {
    st = Look(live, *node);
  }
  DLOCK_RETURN_IF_ERROR(st);
  bool queued;
  {
    std::lock_guard lock(m_->mu);
    queued = std::holds_alternative<Contender::Queued>(c_->standing);
  }
  if (queued) return Step(NotYet(live, milliseconds(0)));
  return Step();
}

// The owner already holds the key (a retry after a reply was lost): the
// same grant again, its lease extended. Nothing held: start (over) with no
// node.
Result<ZkAcquisition::Step> ZkAcquisition::HeldAlreadyLocked() {
  auto it = m_->holdings.find({c_->key, c_->owner});
  if (it == m_->holdings.end() || it->second->gen != m_->gen) {
    c_->standing = Contender::NoNode{};
    return Step();
  }
  Holding& h = *it->second;
  if (h.deleted) {
    const std::string path = h.NodePath();
    m_->holdings.erase(it);
    c_->standing = Contender::NoNode{};
    return UnavailableError("this owner's lock node " + path +
                            " was deleted by someone else; retrying");
  }
  h.expires_at = m_->Now() + ttl_;
  c_->standing = Contender::Granted{};
  Attempt a;
  a.granted = true;
  a.token = h.token;
  return Step(a);
}

Status ZkAcquisition::StartCreate(const Live& live) {
  bool known;
  {
    std::lock_guard lock(m_->mu);
    known = m_->PathKnownLocked(c_->lock_path);
  }
  if (known) {
    SendCreate(live, std::nullopt);
    return Status::Ok();
  }
  // Not known to exist (a key new to this backend, or one whose path it
  // deleted): look at it, and at the lock-delay markers a missing path must
  // be flagged for, before creating it. Reads, where a create under a
  // missing path would be a failed write and a round trip more.
  std::shared_ptr<Op> markers;
  if (!c_->delay_path.empty()) markers = live.session->Children(c_->delay_path);
  auto children = live.session->Children(c_->lock_path);
  std::lock_guard lock(m_->mu);
  c_->standing = Contender::NoNode{std::move(children), std::move(markers)};
  return Status::Ok();
}

Status ZkAcquisition::FinishLooks(const Live& live, const Contender::NoNode& looks) {
  const Reply* kids = looks.children->Wait(Bound());  // the later: answered after the markers
  const Reply* marks = looks.markers ? looks.markers->Wait(std::chrono::nanoseconds(0)) : nullptr;
  {
    std::lock_guard lock(m_->mu);
    const auto* still = std::get_if<Contender::NoNode>(&c_->standing);
    if (still == nullptr || still->children != looks.children) {
      return UnavailableError("the attempt on " + c_->lock_path + " was overtaken; retrying");
    }
    c_->standing = Contender::NoNode{};
    if (kids != nullptr && kids->rc == ZOK) m_->NotePathLocked(c_->lock_path, true);
  }
  if (kids == nullptr) return ReplyError(kids, "the look at " + c_->lock_path, m_->attempt_timeout);
  if (kids->rc == ZOK) {
    SendCreate(live, std::nullopt);
    return Status::Ok();
  }
  if (kids->rc != ZNONODE) return ZkError(kids->rc, "listing " + c_->lock_path);
  DLOCK_ASSIGN_OR_RETURN(const std::string_view data, LockPathData(*c_, marks, m_->attempt_timeout));
  SendCreate(live, data);
  return Status::Ok();
}

void ZkAcquisition::SendCreate(const Live& live, std::optional<std::string_view> path_data,
                               bool parents) {
  // The create and a look at the siblings go out back to back: the server
  // answers the read after applying the write, so one round trip tells both
  // our sequence and who is ahead. A missing lock path is created ahead of
  // them (a container, as Curator makes it; its create fails harmlessly if
  // someone made it meanwhile), and, when its parents were missing too,
  // they are ahead of it: the chroot persistent, containers below.
  Contender::Creating creating;
  if (path_data) {
    const std::string& path = c_->lock_path;
    for (std::size_t i = 1; parents && i < path.size(); ++i) {
      if (path[i] != '/') continue;
      const bool in_chroot = i <= m_->options.chroot.size();
      creating.parents.push_back(live.session->Create(path.substr(0, i), "", in_chroot ? 0 : ZOO_CONTAINER));
    }
    creating.path = live.session->Create(path, *path_data, ZOO_CONTAINER);
    creating.path_data = *path_data;
  }
  creating.create = live.session->Create(c_->PathOf(c_->prefix), c_->data, ZOO_EPHEMERAL_SEQUENTIAL);
  creating.children = live.session->Children(c_->lock_path);
  std::lock_guard lock(m_->mu);
  c_->standing = std::move(creating);
}

Status ZkAcquisition::FinishCreate(const Live& live, const Contender::Creating& creating) {
  const std::string& under = c_->lock_path;
  // The read's reply comes after the create's: waiting for it first wakes
  // this thread once, not twice.
  if (creating.children) (void)creating.children->Wait(Bound());
  const Reply* r = creating.create->Wait(Bound());
  if (r == nullptr) {
    return UnavailableError("ZooKeeper did not answer the create of a lock node under " + under +
                            " within " + FormatDuration(m_->attempt_timeout) +
                            "; a retry finds the node by its guid");
  }
  const Reply* made = creating.path ? creating.path->Wait(std::chrono::nanoseconds(0)) : nullptr;
  const OwnNode node{Basename(r->path), static_cast<FencingToken>(r->stat.czxid)};
  {
    std::lock_guard lock(m_->mu);
    const auto* still = std::get_if<Contender::Creating>(&c_->standing);
    if (still == nullptr || still->create != creating.create) {
      return UnavailableError("the place under " + under + " lapsed during the attempt; retrying");
    }
    if (r->rc == ZOK) {
      c_->standing = Contender::Unsure{node};  // until we know our place
    } else if (OutcomeUnknown(r->rc)) {
      c_->standing = Contender::Unsure{};
    } else {
      c_->standing = Contender::NoNode{};
    }
    if (r->rc == ZOK || r->rc == ZNONODE) m_->NotePathLocked(under, r->rc == ZOK);
  }
  if (r->rc == ZNONODE) {
    // The path went since (a known one: the next step looks again), or its
    // parents are missing too (its own create failed): made with them.
    if (made == nullptr || made->rc != ZNONODE) return Status::Ok();
    for (const auto& parent : creating.parents) {
      const Reply* pr = parent->Wait(std::chrono::nanoseconds(0));
      if (pr != nullptr && pr->rc != ZOK && pr->rc != ZNODEEXISTS && !OutcomeUnknown(pr->rc)) {
        return ZkError(pr->rc, "creating the parents of " + under);
      }
    }
    SendCreate(live, creating.path_data, /*parents=*/true);
    return Status::Ok();
  }
  if (made != nullptr && made->rc != ZOK && made->rc != ZNODEEXISTS && r->rc != ZOK) {
    return ZkError(made->rc, "creating " + under);
  }
  if (OutcomeUnknown(r->rc)) {
    return ZkError(r->rc, "creating a lock node under " + under +
                              " (outcome unknown; a retry finds it by its guid)");
  }
  if (r->rc != ZOK) return ZkError(r->rc, "creating a lock node under " + under);
  const Reply* kids = creating.children ? creating.children->Wait(std::chrono::nanoseconds(0))
                                        : nullptr;
  if (kids == nullptr || kids->rc != ZOK) return Look(live, node);
  return Place(live, node, *kids);
}

Status ZkAcquisition::Look(const Live& live, const OwnNode& node) {
  auto op = live.session->Children(c_->lock_path);
  const Reply* r = op->Wait(Bound());
  if (r == nullptr) {
    return UnavailableError("ZooKeeper did not list " + c_->lock_path + " within " +
                            FormatDuration(m_->attempt_timeout));
  }
  if (r->rc == ZNONODE) {
    ForgetNode();  // no parent, so no node of ours
    return Status::Ok();
  }
  if (r->rc != ZOK) return ZkError(r->rc, "listing " + c_->lock_path);
  return Place(live, node, *r);
}

// Finds our node among the siblings and applies the look. Ours is the
// lowest with our guid: `node`, or a node an earlier attempt of this owner
// made and never heard back about (a lost reply; a retried TryAcquire is a
// new acquisition with the same owner), which keeps its place and its
// token, as the contract wants of a retry. Any other node with our guid is
// a duplicate, and goes. A node the keeper is deleting (being_reaped) is
// never ours: adopted, it would be granted and then deleted under us. No
// node of ours is marked after this look: we have a place on this lock
// path (Unsure or Queued), which keeps the keeper's hands off our nodes.
Status ZkAcquisition::Place(const Live& live, OwnNode node, const Reply& children) {
  const std::vector<LockNode> sorted = SortedContenders(children.children);
  std::set<std::string> reaped;
  {
    std::lock_guard lock(m_->mu);
    for (const LockNode& n : sorted) {
      if (m_->being_reaped.contains(c_->PathOf(n.name))) reaped.insert(n.name);
    }
  }
  const auto mine = std::find_if(sorted.begin(), sorted.end(), [&](const LockNode& n) {
    return (n.guid == c_->guid || (!node.name.empty() && n.name == node.name)) &&
           !reaped.contains(n.name);
  });
  if (mine != sorted.end() && mine->name != node.name) node = OwnNode{};  // adopting it
  for (auto it = sorted.begin(); it != sorted.end(); ++it) {
    if (it != mine && it->guid == c_->guid) (void)live.session->Delete(c_->PathOf(it->name));
  }
  if (mine == sorted.end()) {
    ForgetNode();  // gone (or never made): create anew
    return Status::Ok();
  }
  if (node.name.empty() || node.token == 0) {
    // Adopting a node found by guid: its czxid is the token.
    DLOCK_ASSIGN_OR_RETURN(node.token, ReadToken(live, mine->name));
    if (node.token == 0) {
      ForgetNode();
      return Status::Ok();
    }
  }
  node.name = mine->name;
  std::lock_guard lock(m_->mu);
  if (auto* unsure = std::get_if<Contender::Unsure>(&c_->standing)) {
    unsure->node = node;
  } else if (!std::holds_alternative<Contender::Queued>(c_->standing)) {
    return Status::Ok();  // at the head by a watch event meanwhile, or the place lapsed
  }
  if (ApplyLook(*c_, sorted, children.stat) == LookResult::kNodeGone) {
    c_->standing = Contender::NoNode{};
  }
  return Status::Ok();
}

// The czxid of our node `name`; 0 when it is gone.
Result<FencingToken> ZkAcquisition::ReadToken(const Live& live, const std::string& name) {
  auto op = live.session->Exists(c_->PathOf(name), false);
  const Reply* r = op->Wait(Bound());
  if (r == nullptr) return UnavailableError("ZooKeeper did not answer within the attempt");
  if (r->rc == ZNONODE) return FencingToken{0};
  if (r->rc != ZOK) return ZkError(r->rc, "reading " + name);
  return static_cast<FencingToken>(r->stat.czxid);
}

void ZkAcquisition::ForgetNode() {
  std::lock_guard lock(m_->mu);
  c_->standing = Contender::NoNode{};
}

Result<ZkAcquisition::Step> ZkAcquisition::AtHeadStep(const Live& live) {
  DLOCK_ASSIGN_OR_RETURN(const milliseconds left, m_->ClearLockDelays(live, *c_));
  // The head waits out a lock-delay; holder_ttl_remaining says how long.
  if (left > milliseconds(0)) return Step(NotYet(live, left));
  return Grant();
}

// The head, with no lock-delay in the way: the node is a holding now,
// renewed and released through the backend by key and owner.
ZkAcquisition::Step ZkAcquisition::Grant() {
  std::lock_guard lock(m_->mu);
  const auto* head = std::get_if<Contender::AtHead>(&c_->standing);
  if (head == nullptr) return Step();  // the place lapsed meanwhile: start over
  auto h = std::make_shared<Holding>();
  h->key = c_->key;
  h->owner = c_->owner;
  h->lock_path = c_->lock_path;
  h->node = head->node.name;
  h->token = head->node.token;
  h->delay_path = c_->delay_path;
  h->marker_made = c_->delay_ms > 0;
  h->delete_path = head->alone && c_->delay_ms == 0 && !head->hints.any();
  h->lock_path_version = head->path_version;
  h->gen = c_->gen;
  h->expires_at = m_->Now() + ttl_;
  Attempt a;
  a.granted = true;
  a.token = h->token;
  m_->holdings[{c_->key, c_->owner}] = std::move(h);
  c_->standing = Contender::Granted{};
  c_->expires_at = TimePoint{};  // the holding has its own
  return Step(a);
}

// Not granted: a waiter keeps its place for queue_ttl; a single attempt
// takes none, so its node goes at once.
Attempt ZkAcquisition::NotYet(const Live& live, milliseconds delayed) {
  Attempt a;
  a.holder_ttl_remaining = delayed;
  if (queue_ttl_ > milliseconds(0)) {
    std::lock_guard lock(m_->mu);
    c_->expires_at = m_->Now() + queue_ttl_;
    return a;
  }
  Withdraw(live);
  return a;
}

// Sends the delete of a single attempt's node; AwaitWithdraw waits for
// it, so that TryEach has every delete of its batch in flight at once.
void ZkAcquisition::Withdraw(const Live& live) {
  std::string name;
  {
    std::lock_guard lock(m_->mu);
    const OwnNode* node = c_->Node();
    if (node == nullptr || node->name.empty()) return;
    name = node->name;
    c_->standing = Contender::NoNode{};
    c_->expires_at = TimePoint{};
  }
  withdrawing_ = Withdrawal{live.session->Delete(c_->PathOf(name)), name, live.gen};
}

// The attempt answers once its node is gone, so that nobody sees a place
// it does not keep; a delete whose outcome is unknown is the keeper's.
void ZkAcquisition::AwaitWithdraw() {
  if (!withdrawing_) return;
  const Withdrawal w = std::exchange(withdrawing_, std::nullopt).value();
  const Reply* r = w.del->Wait(Bound());
  if (r == nullptr || OutcomeUnknown(r->rc)) {
    m_->ReapLater(Reap{c_->key, c_->owner, c_->lock_path, w.name, w.gen, m_->Now()});
  }
}

bool ZkAcquisition::Wait(TimePoint until, std::stop_token stop) {
  std::unique_lock lock(m_->mu);
  if (!invalid_.ok() || c_->gen != m_->gen || !m_->session) return false;
  // At the head: try now. One waiting out a lock-delay polls.
  if (const auto* head = std::get_if<Contender::AtHead>(&c_->standing)) {
    return head->delay_until == TimePoint{};
  }
  auto* q = std::get_if<Contender::Queued>(&c_->standing);
  if (q == nullptr) return false;  // not queued: the core polls
  if (q->armed && ReadyToTry(*c_)) return true;  // what it watched went: look again
  std::shared_ptr<Session> s = m_->session;
  ArmLocked(lock, s);
  auto ready = [&] { return m_->session != s || s->dead() || ReadyToTry(*c_); };
  m_->cv.wait_for(lock, stop, m_->Left(until), ready);
  return true;
}

void ZkAcquisition::ArmLocked(std::unique_lock<std::mutex>& lock,
                              const std::shared_ptr<Session>& s) {
  auto* q = std::get_if<Contender::Queued>(&c_->standing);
  if (q == nullptr || q->armed) return;
  q->armed = true;
  const Watch watch = q->watch;
  lock.unlock();
  m_->ArmWatches(s, c_, watch);
  lock.lock();
}

// Wait's callback twin: the same watches, and `wake` registered where the
// events that would end a Wait find it. What a Wait would have returned at
// once for (its watch already fired, the place lapsed, a new session, the
// head) is still a wake-up, but the keeper's: never on this thread.
bool ZkAcquisition::Notify(std::function<void()> wake) {
  if (!invalid_.ok()) return false;
  std::unique_lock lock(m_->mu);
  std::shared_ptr<Session> s = m_->session;
  if (c_->gen == m_->gen && s && !s->dead()) ArmLocked(lock, s);
  // Registered after the watches are set: an answer that came meanwhile
  // changed the standing, which WakeDueLocked reads below, so it is not lost.
  c_->wake = std::move(wake);
  if (!std::holds_alternative<Contender::Queued>(c_->standing) ||
      m_->WakeDueLocked(*c_, m_->Now())) {
    m_->wake_soon = true;  // now, or at a lock-delay's end (the keeper's sleep)
    m_->keeper_cv.notify_all();
  }
  return true;
}

void ZkAcquisition::StopNotify() {
  if (!invalid_.ok()) return;
  std::function<void()> wake;  // dropped outside mu
  std::lock_guard lock(m_->mu);
  wake = std::exchange(c_->wake, nullptr);
}

void ZkAcquisition::Abandon() {
  if (!invalid_.ok()) return;
  Contender::Standing was;
  std::uint64_t gen;
  std::function<void()> wake;  // dropped outside mu
  {
    std::lock_guard lock(m_->mu);
    wake = std::exchange(c_->wake, nullptr);
    was = std::exchange(c_->standing, Contender::Abandoned{});
    c_->expires_at = TimePoint{};
    gen = c_->gen;
  }
  std::optional<Live> live = m_->Current();
  if (!live || live->gen != gen) return;  // gone with its session (or never made)
  Leave(*live, was);
}

// Deletes the node `was` had, or may have had; what cannot be deleted now
// is left to the keeper. Granted has none: the holding is released by key
// and owner.
void ZkAcquisition::Leave(const Live& live, const Contender::Standing& was) {
  std::string name;
  if (const auto* creating = std::get_if<Contender::Creating>(&was)) {
    // Learn the name of the node being created, then delete it.
    const Reply* r = creating->create->Wait(m_->attempt_timeout);
    if (r != nullptr && r->rc != ZOK && !OutcomeUnknown(r->rc)) return;  // it failed: no node
    if (r != nullptr && r->rc == ZOK) name = Basename(r->path);
  } else if (const OwnNode* node = NodeOf(was)) {
    name = node->name;
  } else {
    return;
  }
  if (!name.empty()) {
    auto op = live.session->Delete(c_->PathOf(name));
    const Reply* r = op->Wait(m_->attempt_timeout);
    if (r != nullptr && (r->rc == ZOK || r->rc == ZNONODE)) return;
  } else if (live.session->state() == Session::State::kConnected) {
    bool found = false;
    if (m_->DeleteOwn(live, c_->lock_path, c_->owner, &found, nullptr).ok()) return;
  }
  m_->ReapLater(Reap{c_->key, c_->owner, c_->lock_path, name, live.gen, m_->Now() + kReapRetry});
}

}  // namespace

std::unique_ptr<Acquisition> NewZkAcquisition(std::shared_ptr<ZooKeeperBackendImpl> m,
                                              const LeaseRequest& request) {
  return std::make_unique<ZkAcquisition>(std::move(m), request);
}

// In rounds: in each, every attempt not yet answered takes its steps until
// it has an answer or requests in flight, and only then are the answers
// waited for, each within what is left of the round's bound. So every
// attempt's create (and its look, or the looks at a path not known) is on
// the session before the first answer is awaited, and a session that stops
// answering costs the batch one bound, not one per attempt.
std::vector<Result<Attempt>> TryEach(const std::shared_ptr<ZooKeeperBackendImpl>& m,
                                     std::span<const LeaseRequest> requests) {
  std::vector<Result<Attempt>> out(requests.size(), UnavailableError("not attempted"));
  std::vector<std::unique_ptr<ZkAcquisition>> attempts;
  std::vector<std::size_t> open;  // attempts not yet answered
  for (std::size_t i = 0; i < requests.size(); ++i) {
    LeaseRequest single = requests[i];
    single.queue_ttl = milliseconds(0);  // a single attempt takes no place in the queue
    attempts.push_back(std::make_unique<ZkAcquisition>(m, single));
    if (attempts.back()->invalid().ok()) {
      open.push_back(i);
    } else {
      out[i] = attempts.back()->invalid();
    }
  }
  if (open.empty()) return out;
  const Result<Live> live = m->EnsureSession(requests[open.front()].ttl);
  std::vector<int> steps(requests.size(), 0);
  while (live.ok() && !open.empty()) {
    const TimePoint round_end = MonotonicClock::now() + m->attempt_timeout;
    std::vector<std::size_t> still;
    for (std::size_t i : open) {
      Result<ZkAcquisition::Step> step = attempts[i]->Advance(*live, round_end, steps[i]);
      if (step.ok() && !*step) {
        still.push_back(i);
      } else {
        out[i] = step.ok() ? Result<Attempt>(**step) : Result<Attempt>(step.status());
      }
    }
    open = std::move(still);
  }
  for (std::size_t i : open) out[i] = live.status();
  const TimePoint deletes_end = MonotonicClock::now() + m->attempt_timeout;
  for (auto& a : attempts) a->FinishWithdraw(deletes_end);
  return out;
}

}  // namespace dlock::zookeeper
