// Client: the entry point. One Client talks to one store.
//
//   auto client = dlock::Client::Connect("sqlite:///var/lib/app/locks.db");
//   if (!client.ok()) return client.status();
//   auto lease = (*client)->Acquire("orders/42", {.ttl = 30s, .wait = 10s});
//   if (!lease.ok()) return lease.status();       // kDeadlineExceeded, ...
//   Write(data, lease->token());                  // the resource checks it
//   return lease->Release();
//
// The store is chosen by URI (see docs/backends.md):
//   sqlite:///path/locks.db     embedded, one host (the default)
// An empty URI means $DLOCK_BACKEND if set, else the default SQLite file
// $XDG_STATE_HOME/dlock/locks.db (~/.local/state/dlock/locks.db).
//
// Each Client owns one background thread that renews all of its leases,
// batched into one store call per tick, at ttl/3.
//
// Thread-safety: a Client may be used from many threads at once. Leases
// handed out keep what they need alive, so they may outlive the Client.
#ifndef DLOCK_CLIENT_H_
#define DLOCK_CLIENT_H_

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/backend.h"
#include "dlock/clock.h"
#include "dlock/export.h"
#include "dlock/lease.h"
#include "dlock/metrics.h"
#include "dlock/status.h"
#include "dlock/types.h"

namespace dlock {

namespace internal {
class AsyncAcquire;
class ClientCore;
}  // namespace internal

struct ClientOptions {
  std::shared_ptr<Clock> clock;    // null: RealClock
  std::shared_ptr<Random> random;  // null: the kernel's CSPRNG
  // Bounds connecting to a network store (not used by SQLite).
  std::chrono::milliseconds connect_timeout{5000};
  // The first 64 bits of every owner id this client makes (OwnerId::
  // session). Unset: $DLOCK_SESSION (16 hex digits) when Connect finds it
  // set — `dlock exec` exports its own, so a child that takes more locks is
  // seen as the same party in `dlock status --waits` — else random.
  std::optional<std::uint64_t> session;
  // Names this client's holdings and waits for people (HolderInfo::label).
  // Empty: "host:pid".
  std::string label;
  // Client::Metrics() records what the client does (a few relaxed atomic
  // adds per call); false records nothing.
  bool record_metrics = true;
  // Called after every recorded event, on the thread it happened on (the
  // caller's, or the renewal thread's for renewals and losses): to feed
  // the application's own metrics system. Never called under the client's
  // own locks; still, keep it short and never block in it: the renewal
  // thread (which also keeps the asynchronous API's timers) waits for it.
  std::function<void(const MetricEvent&)> on_metric;
  // The worker threads that run asynchronous acquisitions (AcquireAsync),
  // made at the first one: each step (one store attempt) runs on one of
  // them, and so do the callbacks. Their timers are kept by the renewal
  // thread: a client's own threads are these and that one.
  unsigned async_threads = 2;
};

struct AcquireOptions {
  std::chrono::milliseconds ttl{30000};
  // How long Acquire waits for a held key before kDeadlineExceeded.
  // TryAcquire ignores it.
  std::chrono::milliseconds wait{10000};
  // Subtracted from every valid_until to cover clock-rate differences between
  // this host and the store. Unset: ttl/100 + 2 ms (capped at ttl/4).
  std::optional<std::chrono::milliseconds> drift_margin;
  // Runs once, on the client's renewal thread, when the lease is lost. Keep
  // it short; it must not block: renewals and the asynchronous API's timers
  // wait for it.
  std::function<void(const Status& why)> on_lost;
  // Cancels a waiting Acquire (kCancelled).
  std::stop_token cancel;
  // Bounded holding: no renewal after this long, so a hung holder cannot
  // keep the key forever; the lease is then lost at its valid_until in the
  // usual, reported way. Unset: renewed until released.
  std::optional<std::chrono::milliseconds> max_hold;
  // Lock-delay: after this lease ends uncleanly (expires instead of being
  // released), the store grants the key to nobody for this long. kInvalid
  // Argument on a store that cannot enforce it by its own clock.
  std::chrono::milliseconds lock_delay{0};
  // Read-write lock: true takes the read side — shared with other readers,
  // never with a writer (an exclusive acquire of the same key), and queued
  // behind a writer that waits, so readers cannot starve writers.
  bool shared = false;
  // Semaphore: up to this many holders at once (1..65535), each with its own
  // token. 1 (the default) is the plain mutex. Everyone using a key should
  // ask with the same count; if they differ, the smallest one applies.
  std::uint32_t permits = 1;
  // This holding's label, instead of the client's (ClientOptions::label):
  // an election candidate's value, shown to observers.
  std::optional<std::string> label;
  // Reentrancy, off by default. A reentrant acquire of a key that this
  // thread already holds through this Client, by an acquire that was
  // reentrant too, asks no store: it returns another handle on the same
  // holding (same owner, same token) and counts one more hold
  // (Lease::hold_count). The store's lock is released with the last handle.
  // The holding keeps its first acquire's ttl, max_hold and label; asking in
  // another mode (shared, permits) is kFailedPrecondition. Other threads and
  // other Clients wait as usual. docs/decisions.md says why per thread.
  bool reentrant = false;
};

// An operator's forced release (Client::Break, `dlock break`).
struct BreakOptions {
  // Only these holders of the key; empty: every holder (all readers or
  // permits of a shared key).
  std::vector<OwnerId> owners;
  // Who breaks, shown on the break's own grant and kept in its records.
  // Empty: "break by " and the client's label.
  std::string label;
  // How long the store keeps the break's records (kKeepDoneForever: for
  // ever).
  std::chrono::milliseconds keep_record = kDefaultBreakRetention;
};

// What a break did.
struct BreakReport {
  std::vector<HolderInfo> evicted;  // the holdings it ended, as the store showed them
  // The token of the first grant after the eviction: the break's own
  // (released at once) or a waiter's that got the key first. Above every
  // evicted holder's token, so a fence that has seen it refuses their
  // writes. 0 when nothing was evicted, or the store orders no tokens.
  FencingToken token = 0;
  // Whether the store kept a record of each eviction (BreakRecord): OK, or
  // why not (kFailedPrecondition on a store that keeps none). The break
  // itself stands either way.
  Status recorded;
};

// The answer to an asynchronous acquisition: the lease, or why not (the
// same errors as Acquire's; kCancelled after PendingAcquire::Cancel, the
// options' cancel token, or when the Client is destroyed first).
using AcquireCallback = std::function<void(Result<Lease>)>;

// An acquisition started by Client::AcquireAsync. Dropping the handle does
// not stop it; Cancel does.
class DLOCK_EXPORT PendingAcquire {
 public:
  // Ends the acquisition with kCancelled unless its answer is already
  // decided; it leaves the store's queue. Safe from any thread, repeatedly.
  void Cancel();
  // Whether its callback has run or is running.
  bool done() const;

 private:
  friend class Client;
  std::shared_ptr<internal::AsyncAcquire> op_;
};

// The current leader of an election key, as the store reports it.
struct Leader {
  OwnerId owner;
  FencingToken term = 0;  // the leader's fencing token
  std::string label;      // the value it campaigned with
  std::chrono::milliseconds ttl_remaining{0};
  std::optional<std::chrono::milliseconds> held_for;
};

class DLOCK_EXPORT Client {
 public:
  // Opens the store named by `uri` (empty: $DLOCK_BACKEND, else the default
  // SQLite file). Errors: kInvalidArgument for a malformed or unknown URI,
  // kUnavailable when the store cannot be opened or reached.
  static Result<std::unique_ptr<Client>> Connect(std::string_view uri,
                                                 ClientOptions options = {});
  // Wraps a backend built by hand (tests, custom stores).
  static std::unique_ptr<Client> FromBackend(std::unique_ptr<Backend> backend,
                                             ClientOptions options = {});

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client();

  // Acquires `key`, waiting up to options.wait while another owner holds it.
  // kDeadlineExceeded when the wait runs out, kCancelled on options.cancel.
  Result<Lease> Acquire(std::string_view key, const AcquireOptions& options = {});
  // One attempt: kLockHeld if another owner holds the key.
  Result<Lease> TryAcquire(std::string_view key,
                           const AcquireOptions& options = {});

  // Asynchronous Acquire: returns at once, and `done` runs exactly once, on
  // one of the client's async threads, with the lease or the error Acquire
  // would have returned. Between attempts nothing blocks a thread: the
  // store notifies (or, for a store that cannot, a timer polls), so one
  // client carries thousands of pending acquisitions on
  // ClientOptions::async_threads threads. `done` must not block: it holds
  // a thread that other acquisitions need. options.reentrant is
  // kInvalidArgument (reentrancy is per thread). Destroying the Client
  // ends pending ones with kCancelled and waits for their callbacks.
  PendingAcquire AcquireAsync(std::string_view key, const AcquireOptions& options,
                              AcquireCallback done);
  // The same, as a future. (For coroutines: dlock/async.h.)
  std::future<Result<Lease>> AcquireFuture(std::string_view key,
                                           const AcquireOptions& options = {});

  // Acquires every key, all or nothing, within one options.wait. Keys are
  // taken in one canonical order (bytewise, duplicates dropped), so two
  // callers asking for {a, b} and {b, a} can never deadlock. On failure every
  // key taken so far is released. The leases come back in canonical order,
  // each with its own token.
  Result<std::vector<Lease>> AcquireAll(std::vector<std::string> keys,
                                        const AcquireOptions& options = {});

  // Run once: if `key` is not yet marked done, acquire it, run `job`, and if
  // the job succeeds mark the key done — owner-checked, so only while the
  // lease still holds. Returns true if this call ran the job, false if the
  // key was (or became) done. A failed job is not marked done; a crashed one
  // is run again by the next caller once its lease expires. The record is
  // kept for `keep` (types.h: kDefaultDoneRetention, kKeepDoneForever);
  // after that the key may run again.
  Result<bool> RunOnce(std::string_view key, const AcquireOptions& options,
                       const std::function<Status()>& job,
                       std::chrono::milliseconds keep = kDefaultDoneRetention);
  // The parts, for callers that run the job themselves (`dlock once`).
  // kInvalidArgument for a `keep` that is not positive.
  Result<bool> IsDone(std::string_view key);
  Status MarkDone(const Lease& lease, std::chrono::milliseconds keep = kDefaultDoneRetention);

  // Ends other owners' holdings of `key` (all, or options.owners) at the
  // store, then makes a grant so that a token above theirs exists. The
  // evicted holders learn it at their next renewal: their leases are lost
  // (on_lost, the stop token; `dlock exec` terminates its command). A key
  // nobody holds is left alone (an empty report). kUnavailable if the store
  // could not be told; a holder already evicted stays evicted.
  Result<BreakReport> Break(std::string_view key, const BreakOptions& options = {});
  // The break records still kept for keys starting with `prefix` (by key,
  // oldest first); kFailedPrecondition on a store that keeps none.
  Result<std::vector<BreakRecord>> Breaks(std::string_view prefix = {});

  // Locks currently held in the store whose key starts with `prefix`.
  Result<std::vector<HolderInfo>> List(std::string_view prefix = {});
  // Waiters queued for keys starting with `prefix` (kFailedPrecondition on a
  // store that keeps no waiter records). With List, the input of the
  // wait-for graph (dlock/waits.h).
  Result<std::vector<WaiterInfo>> Waiters(std::string_view prefix = {});

  // Leader election on `key`, built on the lock: Campaign waits (up to
  // options.wait, or until options.cancel) to become the leader; the Lease
  // it returns is the leadership, its token() the term, which fences the
  // leader's writes like any token. Resign with Lease::Release(); losing the
  // lease is losing the leadership. options.label is the value observers see.
  Result<Lease> Campaign(std::string_view key, const AcquireOptions& options = {});
  // The current leader, or nullopt when there is none.
  Result<std::optional<Leader>> CurrentLeader(std::string_view key);
  // Observe: waits until a leader with a term above `after_term` is in
  // office (returns it), or `wait` passes or `cancel` is requested (returns
  // whoever leads then, possibly nobody). Polls the store at most every
  // 100 ms.
  Result<std::optional<Leader>> AwaitLeader(std::string_view key, FencingToken after_term,
                                            std::chrono::milliseconds wait,
                                            std::stop_token cancel = {});

  // The store's address, without any password.
  std::string Describe() const;
  // This client's session: the first 64 bits of its owner ids.
  std::uint64_t Session() const;

  // What this client has done since it was made (dlock/metrics.h).
  ClientMetrics Metrics() const;

  // One round trip to the store of the kind a grant costs, touching no lock
  // (Backend::Ping): a health check, and the floor `dlock bench` measures.
  Status Ping();

 private:
  DLOCK_INTERNAL explicit Client(std::shared_ptr<internal::ClientCore> core);
  std::shared_ptr<internal::ClientCore> core_;
};

// The URI Connect("") would use, and where that choice came from
// ("DLOCK_BACKEND" or "default").
struct DefaultBackend {
  std::string uri;
  std::string source;
};
DLOCK_EXPORT Result<DefaultBackend> ResolveDefaultBackend();

// Parses a session id as $DLOCK_SESSION carries it (16 hex digits, not 0).
DLOCK_EXPORT Result<std::uint64_t> ParseSession(std::string_view hex);

}  // namespace dlock

#endif  // DLOCK_CLIENT_H_
