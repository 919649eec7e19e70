// Backend: the small interface one store implements.
//
// A backend only speaks to its store: one attempt to grant, one owner-checked
// release, one batched renewal, a listing, and an Acquisition object for an
// attempt that waits. Waiting policy, deadlines, renewal timing and loss
// detection live in the core (src/core/) and are written once.
//
// Contract for every implementation (tests/conformance checks it):
//  - An attempt (TryAcquire, Acquisition::Try) grants when the key is free,
//    its lease has expired by the store's clock, or `owner` already holds it
//    (a retried request whose reply was lost: the same token comes back and
//    the lease is extended).
//    Each new grant's token is strictly larger than every earlier token for
//    that key. Expiry is judged only by the store's clock.
//  - Release deletes the key only when `owner` holds it: kNotOwner when
//    another owner does, OK when nobody does (idempotent). It also drops any
//    place `owner` has in the key's wait queue.
//  - Renew extends each lease that `owner` still holds to a fresh ttl from
//    the store's now; kNotOwner for one it no longer holds. (The ttl in each
//    request is the granted one, Attempt::granted_ttl, when the store
//    reported one.)
//  - kUnavailable means "could not reach the store or the outcome is
//    unknown"; the core retries or reconciles by owner.
//  - Sharing (only where SupportsSharing() is true; the core sends limit 1
//    to the others). A key may have several holders. A request is granted
//    only when
//        holders + waiters queued ahead of it + 1
//          <= the smallest limit among itself, the holders and those waiters
//    (a holder inside its lock-delay still counts). With every limit 1 this
//    is the mutex; limit N makes a semaphore of N permits; readers
//    (kSharedLimit) share with each other but never with a writer (limit 1)
//    that holds or is queued ahead of them, so a stream of readers cannot
//    starve a writer. Every holder gets its own token from the key's one
//    counter. Release and Renew act on `owner`'s holding only.
//
// Thread-safety: the core calls a backend from the caller's thread and from
// the client's renewal thread at once; implementations must be thread-safe.
// Each Acquisition is used by one thread at a time (see below).
#ifndef DLOCK_BACKEND_H_
#define DLOCK_BACKEND_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/clock.h"
#include "dlock/export.h"
#include "dlock/status.h"
#include "dlock/types.h"

namespace dlock {

struct LeaseRequest {
  std::string key;
  OwnerId owner;
  std::chrono::milliseconds ttl{0};
  // Non-zero when the caller is waiting and will try again. A backend that
  // serves waiters in arrival order keeps this owner's place in the queue for
  // this long after each attempt (so a waiter that dies leaves the queue by
  // itself); the core tries again well within it. Zero: a single attempt,
  // take no place in any queue.
  std::chrono::milliseconds queue_ttl{0};
  // Lock-delay (as in Chubby): if this lease ends uncleanly — it expires
  // rather than being released — the store grants the key to nobody for this
  // long after the expiry, by its own clock, so that a paused holder's
  // in-flight writes can drain at resources that cannot check tokens. Only
  // sent to backends whose SupportsLockDelay() is true.
  std::chrono::milliseconds lock_delay{0};
  // When the caller stops waiting for this answer (a waiting Acquire's
  // deadline, on the client's clock); max(): no deadline of its own. A
  // backend that may wait long on the network (retrying across members)
  // bounds the attempt by it, after at least one short try, so that Acquire
  // returns close to its deadline even when the store cannot answer.
  TimePoint deadline = TimePoint::max();
  // How many holders the key may have while this one holds or waits (see
  // the sharing rule above): 1 exclusive, N a semaphore, kSharedLimit a
  // reader.
  std::uint32_t limit = 1;
  // Shown to people and to election observers (HolderInfo::label); stores
  // keep it with the holding and with the queued waiter.
  std::string label;
};

// The answer to one grant attempt.
struct Attempt {
  bool granted = false;
  FencingToken token = 0;  // when granted
  // When not granted: the time left on the holder's lease by the store's
  // clock, so a poller need not wake before it (zero when unknown).
  std::chrono::milliseconds holder_ttl_remaining{0};
  // When granted: the TTL the store actually applies, if it differs from the
  // request's (etcd counts lease TTLs in whole seconds, with a minimum of
  // its own); zero means the requested one. The core computes valid_until,
  // the renewal period and later Renew requests from it, so the client's
  // view of the lease follows the store's. A store applying a TTL counted
  // from before the request was sent must not report it here.
  std::chrono::milliseconds granted_ttl{0};
  // When granted by a store whose locks live as long as a session (etcd):
  // when that session was last confirmed alive (the send time, on the
  // client's clock, of its last successful keep-alive), if that is earlier
  // than this request. The TTL then runs from there: the core counts
  // valid_until and the first renewal from it, so the store need not renew
  // the session on every grant. {} (the default): the request's send time.
  TimePoint valid_from{};
};

// For a store whose leases all live exactly as long as one client session
// (ZooKeeper): what the store has promised about that session.
struct SessionLiveness {
  // The session timeout the store granted (ZooKeeper's negotiated timeout):
  // it ends the session, and every lease on it, once it has heard nothing
  // from the client for this long.
  std::chrono::milliseconds timeout{0};
  // The send time (on the backend's clock, the client's) of the newest
  // request on this session whose answer proves the store as a whole heard
  // it (ZooKeeper: a write, which a quorum logs; not a read, which one member
  // answers alone). The store keeps the session at least until
  // heard_at + timeout.
  TimePoint heard_at{};
};

// One acquisition of one key by one owner, from its first attempt until it
// is granted or given up: what etcd's Mutex and Curator's LockInternals
// keep per lock. It owns whatever the store needs between attempts (a place
// in the key's queue, a node, a subscription, a grant handed over by a
// release), so that nothing about an attempt in progress lives in the
// Backend's shared maps or in the calling thread.
//
// The core drives it as: Try; if not granted, Wait; Try again; ... until a
// grant, a deadline or a cancel. Calls on one Acquisition never overlap, but
// may come from different threads one after the other (the asynchronous API
// will resume an acquisition on whichever worker is free), so an
// implementation keeps no thread-local state. Try is one step: at most one
// round of requests to the store, bounded by the request's deadline; only
// Wait blocks.
class DLOCK_EXPORT Acquisition {
 public:
  // Frees what the object holds locally (a subscription, a watch). It does
  // not leave the store's queue: an acquisition dropped without Abandon is a
  // waiter that died, and its place lapses with its queue_ttl.
  virtual ~Acquisition() = default;

  // One attempt. Once it has granted, the acquisition is over: the lease is
  // renewed and released through the Backend by (key, owner).
  virtual Result<Attempt> Try() = 0;

  // Blocks until another Try may succeed (the key or a waiter ahead was
  // released, or this waiter reached the head), `until` passes, or `stop`
  // is requested. False at once if the store cannot tell: the core then
  // polls with capped backoff. The core calls Try again within a third of
  // the request's queue_ttl, so that the place stays fresh (the blocking
  // Acquire always; an asynchronous waiter only on a store that does not
  // KeepsPlaces, see Backend::KeepPlaces).
  virtual bool Wait(TimePoint until, std::stop_token stop) = 0;

  // Wait without a thread, for the asynchronous API: arranges for `wake` to
  // be called once, from a thread of the store's own (never inside this
  // call), when another Try may succeed. The core keeps its own timer for
  // the deadline, the holder's lease end (Attempt::holder_ttl_remaining)
  // and, unless the backend KeepsPlaces, the place's refresh, and calls
  // StopNotify if that fires first. False (the default) when the store can
  // only tell a thread blocked in Wait: the core then polls with capped
  // backoff. Between Notify and `wake` (or StopNotify) the core makes no
  // other call here.
  virtual bool Notify(std::function<void()> /*wake*/) { return false; }
  // Drops the wake-up Notify arranged; `wake` may still run once if it was
  // already on its way (the core ignores a late one). Idempotent.
  virtual void StopNotify() {}

  // The caller gives up: leave the queue, and release a grant this owner
  // may have got unseen (a Try whose reply was lost). Idempotent.
  virtual void Abandon() = 0;
};

class DLOCK_EXPORT Backend {
 public:
  virtual ~Backend() = default;

  // One attempt, on its own. A backend that keeps the default Begin also
  // takes (or refreshes) `owner`'s place in the key's queue here when
  // request.queue_ttl > 0: its waiters queue through TryAcquire. A backend
  // with its own Begin queues waiters only through its Acquisitions.
  virtual Result<Attempt> TryAcquire(const LeaseRequest& request) = 0;

  // Starts an acquisition: the core's every Acquire goes through it. The
  // default wraps TryAcquire, WaitForRelease and Release, which is all a
  // store without per-attempt state needs.
  virtual std::unique_ptr<Acquisition> Begin(const LeaseRequest& request);
  virtual Status Release(std::string_view key, const OwnerId& owner) = 0;

  // Many calls in one round trip, for the asynchronous API when many
  // acquisitions start or end at once. TryAcquireMany makes a single
  // attempt (queue_ttl 0) of each request, ReleaseMany releases each
  // (key, owner); one answer per entry, in order, each as the one-at-a-time
  // call would give. The defaults call one at a time; a store that can
  // pipeline (Redis) overrides them and says so with BatchesCalls.
  virtual std::vector<Result<Attempt>> TryAcquireMany(std::span<const LeaseRequest> requests);
  virtual std::vector<Status> ReleaseMany(std::span<const LeaseRequest> holdings);
  virtual bool BatchesCalls() const { return false; }

  // Keeps each waiter's place in its key's queue for another queue_ttl, by
  // the store's clock, without an attempt: the core calls it for all of a
  // client's waiting asynchronous acquisitions at once, every third of
  // queue_ttl, instead of one Try per waiter (a store call per waiter per
  // second, which grows with the waiters). Only queue places: a holding
  // (`owner` granted meanwhile) is never touched, its lease neither extended
  // nor cut. One answer per entry, in order: OK when the place was kept;
  // kNotFound when `owner` has no place for `key` (it lapsed, or `owner` now
  // holds the key), and the core then makes an attempt at once;
  // kUnavailable when the outcome is unknown. Called only when KeepsPlaces()
  // is true; the default answers kFailedPrecondition to each. A store may
  // also answer kNotFound for a place it found first in line on a key
  // nothing holds, leaving it as it was: the attempt that follows is then
  // granted (see NoticesLapsedPlaces).
  //
  // Each entry is the request the waiter's acquisition began with (key,
  // owner, queue_ttl, limit, label); a call may carry a few hundred. A
  // kNotFound place is not re-created: the waiter's next Try takes a new
  // one, at the back. When KeepsPlaces() is true an asynchronous waiter
  // makes no attempt to refresh its place, only when notified, at the
  // holder's lease end (Attempt::holder_ttl_remaining), at its deadline,
  // and, unless NoticesLapsedPlaces(), kQueueTtl after a refusal that named
  // no holder (a place ahead blocks it, and its waiter may have died). So a
  // Try after a place ahead lapsed must not count it.
  virtual std::vector<Status> KeepPlaces(std::span<const LeaseRequest> waiters);
  virtual bool KeepsPlaces() const { return false; }
  // True when a kept waiter blocked only by places ahead of it hears when
  // they end, however they end (a dead waiter's place lapses, it is not
  // released): Notify wakes it (etcd, ZooKeeper: a place is a key or node
  // the store deletes with its session, and the waiter watches the one
  // ahead), or KeepPlaces answers kNotFound for its place once it is first
  // on a free key (PostgreSQL). The core then makes no attempt kQueueTtl
  // after a refusal that named no holder, an attempt per waiter per
  // kQueueTtl while a busy key is free between hand-offs.
  virtual bool NoticesLapsedPlaces() const { return false; }

  // One Status per request, in order. All requests in one call share the
  // store round trip where the store allows it.
  virtual std::vector<Status> Renew(std::span<const LeaseRequest> leases) = 0;
  // Held (unexpired) locks whose key starts with `prefix`, by key.
  virtual Result<std::vector<HolderInfo>> List(std::string_view prefix) = 0;

  // The default Begin's Wait: as Acquisition::Wait, for `key`. A backend
  // with its own Begin need not implement it.
  virtual bool WaitForRelease(std::string_view /*key*/, TimePoint /*until*/,
                              std::stop_token /*stop*/) {
    return false;
  }
  // The default Begin's Notify and StopNotify, for `request`'s owner waiting
  // on its key (whose limit says when it may be granted): as
  // Acquisition::Notify, `wake` runs once, on a thread of the backend's own,
  // never inside this call. Returns a handle for StopNotifyOnRelease, or 0
  // (the default) when the backend cannot notify: the core then polls.
  // Optional, like WaitForRelease; a backend with its own Begin ignores it.
  virtual std::uint64_t NotifyOnRelease(const LeaseRequest& /*request*/,
                                        std::function<void()> /*wake*/) {
    return 0;
  }
  // Drops what NotifyOnRelease arranged (a stale or 0 handle: nothing).
  // Once it returns, that `wake` is not running (unless on the calling
  // thread) and never will: the acquisition may then be freed.
  virtual void StopNotifyOnRelease(std::uint64_t /*handle*/) {}

  // The store's address for messages, with any password removed.
  virtual std::string Describe() const = 0;

  // One round trip of the kind a grant costs (a durable single-row write
  // for a database, one script call for Redis), touching no lock. `dlock
  // bench` measures it as the floor a lock is compared against.
  // kFailedPrecondition when the backend has no such operation.
  virtual Status Ping() { return FailedPreconditionError(Describe() + " has no Ping"); }

  // Whether TryAcquire enforces LeaseRequest::lock_delay.
  virtual bool SupportsLockDelay() const { return false; }

  // Whether grants carry tokens ordered per key (the contract above). False
  // only for Redlock, whose grants carry token 0: no counter orders grants
  // across independent nodes. Lease::token_ordered() reports it, and `dlock
  // exec` then sets no DLOCK_TOKEN, so no fence is fed a meaningless number.
  virtual bool OrdersTokens() const { return true; }

  // Whether TryAcquire honours LeaseRequest::limit other than 1 (read-write
  // locks, semaphores).
  virtual bool SupportsSharing() const { return false; }

  // Waiters queued for keys starting with `prefix`: what `dlock status
  // --waits` builds the wait-for graph from. kFailedPrecondition when the
  // store keeps no waiter records.
  virtual Result<std::vector<WaiterInfo>> Waiters(std::string_view /*prefix*/) {
    return FailedPreconditionError(Describe() + " keeps no record of waiters");
  }

  // How many objects (rows, keys, znodes) the store keeps for keys that
  // start with `prefix`: holdings, waiters, markers, per-key counters,
  // run-once records, break records. A released key must leave none behind (the store's
  // own fixed objects, such as a token counter for the whole store, are not
  // counted); the conformance suite and `dlock bench --footprint` check it.
  // kFailedPrecondition when the store cannot count them.
  virtual Result<std::uint64_t> StoredObjects(std::string_view /*prefix*/) {
    return FailedPreconditionError(Describe() + " cannot count what it stores");
  }

  // Run-once records (`dlock once`): a durable "done" mark per key, which
  // only the key's current holder may set (so a holder whose lease was lost
  // cannot record a run it did not finish under the lock).
  virtual Result<bool> IsDone(std::string_view /*key*/) {
    return FailedPreconditionError(Describe() + " does not keep run-once records");
  }
  // kNotOwner when `owner` no longer holds `key`. The record is kept for
  // `keep` (kKeepDoneForever: for ever; types.h); after that IsDone is
  // false and the record is deleted.
  virtual Status MarkDone(std::string_view /*key*/, const OwnerId& /*owner*/,
                          std::chrono::milliseconds /*keep*/) {
    return FailedPreconditionError(Describe() + " does not keep run-once records");
  }

  // Break records (types.h), the audit trail of Client::Break. RecordBreak
  // keeps `record` for `keep` (kKeepDoneForever: for ever), stamping
  // at_unix_ms with the store's clock where it has one; Breaks lists the
  // records still kept for keys starting with `prefix`, by key and then
  // oldest first. kFailedPrecondition where the store keeps none.
  virtual Status RecordBreak(const BreakRecord& /*record*/, std::chrono::milliseconds /*keep*/) {
    return FailedPreconditionError(Describe() + " keeps no break records");
  }
  virtual Result<std::vector<BreakRecord>> Breaks(std::string_view /*prefix*/) {
    return FailedPreconditionError(Describe() + " keeps no break records");
  }

  // nullopt (the default): each lease lives by its own ttl, extended by
  // Renew. A session-based store returns its current session's liveness;
  // the core then also bounds each lease's valid_until by heard_at +
  // timeout - drift and renews at least every third of min(ttl, timeout),
  // so that a Renew answered from the session's state (no round trip) is
  // never trusted beyond what the store promised.
  virtual std::optional<SessionLiveness> Liveness() { return std::nullopt; }
};

}  // namespace dlock

#endif  // DLOCK_BACKEND_H_
