// The keys, owners and requests the ZooKeeper backend's tests make, and
// their retry of an attempt the ensemble was too slow to answer.
#ifndef DLOCK_TESTS_BACKENDS_ZOOKEEPER_ZK_REQUESTS_H_
#define DLOCK_TESTS_BACKENDS_ZOOKEEPER_ZK_REQUESTS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "dlock/backend.h"
#include "dlock/clock.h"
#include "eventually.h"

namespace dlock::zookeeper::testing {

// A key of `suite`'s, under a directory of this run's: runs never meet.
inline std::string RunKey(std::string_view suite, std::string_view name) {
  static const std::string run = std::to_string(DefaultRandom()->Next() % 1'000'000'000);
  return std::string(suite) + "/" + run + "/" + std::string(name);
}

inline OwnerId NewOwner() {
  static std::atomic<std::uint64_t> n{1};
  return OwnerId(DefaultRandom()->Next() | 1, n++);
}

inline LeaseRequest Req(const std::string& key, OwnerId owner,
                        std::chrono::milliseconds queue_ttl = {}) {
  LeaseRequest r;
  r.key = key;
  r.owner = owner;
  r.ttl = std::chrono::seconds(30);
  r.queue_ttl = queue_ttl;
  return r;
}

// One attempt, asked again while the ensemble is slower than the attempt's
// bound (a loaded machine): the next attempt finds the node by its owner.
// For up to 30 s, not a number of tries: under AddressSanitizer beside other
// tests, eleven 1 s tries in a row once went unanswered.
template <typename Tried>
Result<Attempt> Answered(Tried try_once) {
  std::optional<Result<Attempt>> a;
  testing_support::Eventually(
      [&] {
        a = try_once();
        return a->status().code() != StatusCode::kUnavailable;
      },
      std::chrono::seconds(30), std::chrono::milliseconds(0));
  return *std::move(a);
}

}  // namespace dlock::zookeeper::testing

#endif  // DLOCK_TESTS_BACKENDS_ZOOKEEPER_ZK_REQUESTS_H_
