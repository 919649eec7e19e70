// Lease: one granted lock, owned by exactly one handle.
//
// A Lease is what Client::Acquire returns. It names the key, the owner id
// (128 random bits, new for each acquisition) and the fencing token, and it
// knows until when the client may still believe it holds the lock:
//
//   valid_until = (monotonic time the last successful acquire/renew request
//                  was *sent*) + ttl - drift margin
//
// so the client always considers the lease gone before the store can grant
// the key to anybody else, provided clock *rates* agree within the margin.
// The client renews it in the background (one thread per Client); when
// valid_until passes without a successful renewal, or the store reports that
// another owner has the key, the lease is lost: stop_token() is requested,
// the on_lost callback (AcquireOptions) runs once, and Check() and Release()
// return kLeaseLost.
//
// A lost lease cannot stop a process that is paused while it writes. Send
// token() with every write and let the resource reject stale ones
// (dlock/fence.h).
//
// Move-only. Destroying a held Lease releases it, best effort. All const
// methods are safe to call from any thread while the client renews.
#ifndef DLOCK_LEASE_H_
#define DLOCK_LEASE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>

#include "dlock/clock.h"
#include "dlock/export.h"
#include "dlock/status.h"
#include "dlock/types.h"

namespace dlock {

namespace internal {
class ClientCore;
struct LeaseState;
}  // namespace internal

class DLOCK_EXPORT Lease {
 public:
  Lease() = default;  // empty; every accessor but the bool is invalid
  Lease(Lease&& other) noexcept = default;
  Lease& operator=(Lease&& other) noexcept;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease();

  explicit operator bool() const { return state_ != nullptr; }

  const std::string& key() const;
  const OwnerId& owner() const;
  // The fencing token: strictly larger than every earlier grant's for this
  // key. 0 when token_ordered() is false.
  FencingToken token() const;
  // False when the store orders no tokens (redlock://): the lease still
  // excludes others while valid, but nothing can fence a paused holder.
  bool token_ordered() const;

  // The TTL the store applies to this lease: the requested one, or what the
  // store made of it (etcd: whole seconds, at least its minimum lease TTL).
  // valid_until and the renewal period follow it.
  std::chrono::milliseconds ttl() const;

  // Moves forward with each successful renewal.
  TimePoint valid_until() const;

  // How many handles hold this lease now: 1, or more after reentrant
  // acquires (AcquireOptions::reentrant) by the same thread. 0 once this
  // handle is released.
  std::uint32_t hold_count() const;

  // OK while the lease is believed held; kLeaseLost once it is lost;
  // kFailedPrecondition after Release().
  Status Check() const;

  // Requested when the lease is lost (not when it is released).
  std::stop_token stop_token() const;

  // Renews now, in one round trip, rather than at the next background
  // renewal: to confirm the lease after the process was stopped, say. OK
  // when the store still holds the key for this owner (valid_until then
  // counts from this call); kLeaseLost, and the lease is lost, when it does
  // not or valid_until passed first; kUnavailable when the store could not
  // answer (the lease is unchanged: it is still believed until valid_until).
  Status Renew();

  // Releases the lock if this owner still holds it. Idempotent: a second call
  // returns OK. Returns kLeaseLost if the lease was lost first (the store is
  // still asked to drop the key if, and only if, this owner holds it). A
  // reentrant lease's handle ends only its own hold; the store is asked when
  // the last one is released.
  Status Release();
  // Release without waiting for the store: `done` (if set) gets what
  // Release would have returned, on one of the client's async threads, or
  // at once when the store need not be asked. Many releases at once share
  // round trips on a store that pipelines (Redis). Closing the Client
  // first sends those still queued.
  void ReleaseAsync(std::function<void(Status)> done = nullptr);

 private:
  friend class internal::ClientCore;
  friend class Client;
  // kFailedPrecondition for an empty handle or one released; else OK.
  DLOCK_INTERNAL Status Usable() const;
  DLOCK_INTERNAL Lease(std::shared_ptr<internal::ClientCore> core,
                       std::shared_ptr<internal::LeaseState> state, std::uint64_t hold = 0);

  std::shared_ptr<internal::ClientCore> core_;
  std::shared_ptr<internal::LeaseState> state_;
  std::uint64_t hold_ = 0;  // which of the holding's handles this is
  bool released_ = false;   // this handle's Release() ran
};

}  // namespace dlock

#endif  // DLOCK_LEASE_H_
