// The small value types every layer shares: keys, owner ids, fencing tokens.
#ifndef DLOCK_TYPES_H_
#define DLOCK_TYPES_H_

#include <chrono>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "dlock/export.h"
#include "dlock/status.h"

namespace dlock {

// Strictly increasing per key, for every grant, across client crashes and
// store restarts (see docs/token-contract.md). 0 is never granted.
using FencingToken = std::uint64_t;

// 128 bits identifying one acquisition. The first 64 name the Client that
// made it (its session: random per Client, or inherited through
// $DLOCK_SESSION by a process that acts for its parent), the last 64 are
// random per acquisition. Printed as 32 lowercase hex digits, which is also
// how stores keep it. The session part is what lets `dlock status --waits`
// see which waiter already holds which keys.
class DLOCK_EXPORT OwnerId {
 public:
  OwnerId() = default;
  OwnerId(std::uint64_t hi, std::uint64_t lo) : hi_(hi), lo_(lo) {}

  // Parses 32 hex digits.
  static Result<OwnerId> Parse(std::string_view hex);

  std::string ToString() const;
  bool empty() const { return hi_ == 0 && lo_ == 0; }
  std::uint64_t session() const { return hi_; }

  friend auto operator<=>(const OwnerId&, const OwnerId&) = default;

 private:
  std::uint64_t hi_ = 0;
  std::uint64_t lo_ = 0;
};

inline constexpr std::size_t kMaxKeyBytes = 1024;
inline constexpr std::chrono::milliseconds kMinTtl{10};
inline constexpr std::chrono::milliseconds kMaxTtl = std::chrono::hours(24);
// The longest wait or max hold: a year. Far beyond any sensible lock, and
// far inside what a clock's time point can add without overflowing.
inline constexpr std::chrono::milliseconds kMaxWait = std::chrono::hours(8760);

// How long a run-once record (`dlock once`, Client::RunOnce) is kept after
// it was written: by default 30 days, so that keys named per run (a date, a
// job id) do not pile up in the store; kKeepDoneForever keeps it until
// somebody deletes it. A record past its retention is not done any more,
// and the store deletes it (at once, or with the next run-once record or
// sweep). Judged by the store's wall clock: a retention is a calendar
// matter, and a clock stepped forward by days ends records early.
inline constexpr std::chrono::milliseconds kDefaultDoneRetention = std::chrono::hours(24 * 30);
inline constexpr std::chrono::milliseconds kKeepDoneForever = std::chrono::milliseconds::max();
// The longest finite retention: ten years, far inside what every store's
// clock arithmetic can add to now.
inline constexpr std::chrono::milliseconds kMaxRetention = std::chrono::hours(24 * 3653);
// OK for kKeepDoneForever and for 1 ms..kMaxRetention; kInvalidArgument
// otherwise, saying what is accepted.
DLOCK_EXPORT Status ValidateRetention(std::chrono::milliseconds keep);

// Keys are 1..1024 bytes of anything but NUL.
DLOCK_EXPORT Status ValidateKey(std::string_view key);
// TTLs are 10 ms .. 24 h.
DLOCK_EXPORT Status ValidateTtl(std::chrono::milliseconds ttl);

// How many holders a key may have at once (LeaseRequest::limit): 1 is a
// mutex or a read-write lock's writer, N a semaphore of N permits, and
// kSharedLimit a read-write lock's reader.
inline constexpr std::uint32_t kSharedLimit = 0xFFFFFFFFu;
inline constexpr std::uint32_t kMaxPermits = 65535;

// A label names the holder for people (`dlock status`) and is an election's
// leader value: up to 256 bytes of printable text. Default: "host:pid".
inline constexpr std::size_t kMaxLabelBytes = 256;
DLOCK_EXPORT Status ValidateLabel(std::string_view label);

// One held lock as a store reports it (Client::List, `dlock status`). A key
// held in shared mode, or as a semaphore, has one entry per holder.
struct HolderInfo {
  std::string key;
  OwnerId owner;
  FencingToken token = 0;
  // Time left on the lease by the store's own clock.
  std::chrono::milliseconds ttl_remaining{0};
  // The lease's ttl as the store applies it (0: the store does not say).
  // ttl - ttl_remaining is how long ago the holder last renewed.
  std::chrono::milliseconds ttl{0};
  // How long this owner has held the key, by the store's clock, if the
  // store keeps the grant time.
  std::optional<std::chrono::milliseconds> held_for;
  std::uint32_t limit = 1;
  std::string label;
};

// One waiter queued for a key (Backend::Waiters, `dlock status --waits`).
// Records live only as long as their waiter keeps its place.
struct WaiterInfo {
  std::string key;
  OwnerId owner;
  std::uint32_t limit = 1;
  std::string label;
  // How long it has waited, by the store's clock, if the store keeps it.
  std::optional<std::chrono::milliseconds> waited_for;
};

// What an operator's break (Client::Break, `dlock break`) leaves in the
// store: one record per holding it evicted, for the audit trail that `dlock
// status --breaks` shows. Kept for the break's retention (by default
// kDefaultBreakRetention, judged by wall clocks as run-once records are).
struct BreakRecord {
  std::string key;
  OwnerId owner;           // the evicted holder
  FencingToken token = 0;  // the evicted holding's token
  std::string label;       // what the evicted holder said of itself
  std::string by;          // who broke it: the break's label
  // The token the break ordered itself by (BreakReport::token): a fence
  // that has seen it refuses the evicted holder. 0 when there was none.
  FencingToken break_token = 0;
  // When, in Unix milliseconds: by the store's clock where it has one
  // (PostgreSQL, Redis, ZooKeeper), else the breaking client's.
  std::int64_t at_unix_ms = 0;
};

inline constexpr std::chrono::milliseconds kDefaultBreakRetention = std::chrono::hours(24 * 30);

}  // namespace dlock

#endif  // DLOCK_TYPES_H_
