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
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/backend.h"
#include "dlock/clock.h"
#include "dlock/lease.h"
#include "dlock/status.h"
#include "dlock/types.h"

namespace dlock {

namespace internal {
class ClientCore;
}

struct ClientOptions {
  std::shared_ptr<Clock> clock;    // null: RealClock
  std::shared_ptr<Random> random;  // null: the kernel's CSPRNG
  // Bounds connecting to a network store (not used by SQLite).
  std::chrono::milliseconds connect_timeout{5000};
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
  // it short; it must not block.
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
};

class Client {
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
  // is run again by the next caller once its lease expires.
  Result<bool> RunOnce(std::string_view key, const AcquireOptions& options,
                       const std::function<Status()>& job);
  // The parts, for callers that run the job themselves (`dlock once`).
  Result<bool> IsDone(std::string_view key);
  Status MarkDone(const Lease& lease);

  // Locks currently held in the store whose key starts with `prefix`.
  Result<std::vector<HolderInfo>> List(std::string_view prefix = {});

  // The store's address, without any password.
  std::string Describe() const;

  // One round trip to the store of the kind a grant costs, touching no lock
  // (Backend::Ping): a health check, and the floor `dlock bench` measures.
  Status Ping();

 private:
  explicit Client(std::shared_ptr<internal::ClientCore> core);
  std::shared_ptr<internal::ClientCore> core_;
};

// The URI Connect("") would use, and where that choice came from
// ("DLOCK_BACKEND" or "default").
struct DefaultBackend {
  std::string uri;
  std::string source;
};
Result<DefaultBackend> ResolveDefaultBackend();

}  // namespace dlock

#endif  // DLOCK_CLIENT_H_
