// What `dlock serve` exposes on /metrics about the store as a whole — keys
// held, holders, waiters, the oldest hold, leases whose renewals stopped,
// deadlock cycles, counts per prefix — and about its own process, in the
// Prometheus text format. Pure functions of one look at the store.
#ifndef DLOCK_SRC_CLI_STORE_GAUGES_H_
#define DLOCK_SRC_CLI_STORE_GAUGES_H_

#include <optional>
#include <string>
#include <vector>

#include "dlock/clock.h"
#include "dlock/status.h"
#include "dlock/types.h"

namespace dlock::cli {

// One look at the store: what List and Waiters returned, and how long the
// look took.
struct StoreLook {
  Result<std::vector<HolderInfo>> holders = std::vector<HolderInfo>{};
  // kFailedPrecondition: the store keeps no waiter records.
  Result<std::vector<WaiterInfo>> waiters = std::vector<WaiterInfo>{};
  Duration took{0};
};

// The part of a key counted as its prefix: up to and including the first
// '/', or "-" for a key without one.
std::string KeyPrefix(const std::string& key);

// dlock_store_* gauges for one look (dlock_store_up 0 when it failed).
std::string StoreGaugesText(const StoreLook& look);
// process_* figures of this process, as Prometheus's client libraries name
// them: resident memory, CPU seconds, open descriptors, start time.
std::string ProcessText();

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_STORE_GAUGES_H_
