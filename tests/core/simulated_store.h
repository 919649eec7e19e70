// A store for core tests that never sleep: the in-memory store on a
// simulated clock, behind a fault wrapper driven by `plan`.
#ifndef DLOCK_TESTS_CORE_SIMULATED_STORE_H_
#define DLOCK_TESTS_CORE_SIMULATED_STORE_H_

#include <chrono>
#include <memory>
#include <utility>

#include "dlock/client.h"
#include "dlock/testing/faulty_backend.h"
#include "dlock/testing/in_memory_backend.h"
#include "dlock/testing/simulated_clock.h"

namespace dlock::testing {

struct SimulatedStore {
  // A client on the store, on the simulated clock; `options` may add the rest.
  std::unique_ptr<Client> NewClient(ClientOptions options = {}) const {
    options.clock = clock;
    return Client::FromBackend(
        std::make_unique<FaultyBackend>(std::make_unique<InMemoryBackend>(store), plan),
        std::move(options));
  }

  // A single attempt with this ttl and a fixed 100 ms drift margin, so that
  // valid_until is easy to compute.
  static AcquireOptions Ttl(std::chrono::milliseconds ttl) {
    AcquireOptions o;
    o.ttl = ttl;
    o.wait = std::chrono::milliseconds(0);
    o.drift_margin = std::chrono::milliseconds(100);
    return o;
  }

  std::shared_ptr<SimulatedClock> clock = std::make_shared<SimulatedClock>();
  std::shared_ptr<InMemoryStore> store = std::make_shared<InMemoryStore>(clock);
  std::shared_ptr<FaultPlan> plan = std::make_shared<FaultPlan>();
};

}  // namespace dlock::testing

#endif  // DLOCK_TESTS_CORE_SIMULATED_STORE_H_
