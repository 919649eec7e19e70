// The small value types every layer shares: keys, owner ids, fencing tokens.
#ifndef DLOCK_TYPES_H_
#define DLOCK_TYPES_H_

#include <chrono>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "dlock/status.h"

namespace dlock {

// Strictly increasing per key, for every grant, across client crashes and
// store restarts (see docs/token-contract.md). 0 is never granted.
using FencingToken = std::uint64_t;

// 128 random bits identifying one acquisition. Printed as 32 lowercase hex
// digits, which is also how stores keep it.
class OwnerId {
 public:
  OwnerId() = default;
  OwnerId(std::uint64_t hi, std::uint64_t lo) : hi_(hi), lo_(lo) {}

  // Parses 32 hex digits.
  static Result<OwnerId> Parse(std::string_view hex);

  std::string ToString() const;
  bool empty() const { return hi_ == 0 && lo_ == 0; }

  friend auto operator<=>(const OwnerId&, const OwnerId&) = default;

 private:
  std::uint64_t hi_ = 0;
  std::uint64_t lo_ = 0;
};

inline constexpr std::size_t kMaxKeyBytes = 1024;
inline constexpr std::chrono::milliseconds kMinTtl{10};
inline constexpr std::chrono::milliseconds kMaxTtl = std::chrono::hours(24);

// Keys are 1..1024 bytes of anything but NUL.
Status ValidateKey(std::string_view key);
// TTLs are 10 ms .. 24 h.
Status ValidateTtl(std::chrono::milliseconds ttl);

// One held lock as a store reports it (Client::List, `dlock status`).
struct HolderInfo {
  std::string key;
  OwnerId owner;
  FencingToken token = 0;
  // Time left on the lease by the store's own clock.
  std::chrono::milliseconds ttl_remaining{0};
};

}  // namespace dlock

#endif  // DLOCK_TYPES_H_
