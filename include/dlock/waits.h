// The wait-for graph: who waits for whom, across processes and machines, and
// whether anyone is stuck in a cycle (`dlock status --waits`).
//
// A party is one Client — everything whose owner ids share a session
// (OwnerId::session), including child processes of `dlock exec` that
// inherited its $DLOCK_SESSION. Party P waits for party Q when one of P's
// queued waiters wants a key that Q holds. A cycle in that graph is a
// deadlock unless a lease in it expires or is released: nobody in it can
// proceed by waiting. A waiter outside any cycle is waiting behind a holder
// that is (still) doing something — or has hung, which the holder's
// renewals tell apart: a holder whose renewals still arrive is alive; one
// whose renewals stopped will lose the key at expiry.
//
// Caveat, stated in docs/decisions.md: the graph is per party, not per
// thread. Two threads of one Client, one holding a key and the other
// waiting, make one party; a cycle through such a party is a deadlock only
// if the holding and the waiting are on the same thread of control.
#ifndef DLOCK_WAITS_H_
#define DLOCK_WAITS_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dlock/export.h"
#include "dlock/types.h"

namespace dlock {

struct WaitParty {
  std::uint64_t session = 0;
  std::string label;  // from any of its holdings or waits
  std::vector<HolderInfo> holds;
  std::vector<WaiterInfo> waits;
};

struct WaitVerdict {
  enum class Kind {
    kInCycle,        // its party is in a wait-for cycle
    kBehindHolder,   // the key is held by parties not in a cycle with it
    kBehindQueue,    // nobody holds the key: it waits behind earlier waiters
                     // (or the holder just left and it has not tried since)
  };
  WaiterInfo waiter;
  Kind kind = Kind::kBehindHolder;
  std::size_t cycle = 0;               // index into WaitReport::cycles (kInCycle)
  std::vector<HolderInfo> blocked_by;  // the key's holders of other parties
};

struct WaitReport {
  std::vector<WaitParty> parties;  // by session
  // Each cycle's member sessions, in wait order: members[i] waits for
  // members[i + 1], and the last for the first.
  std::vector<std::vector<std::uint64_t>> cycles;
  std::vector<WaitVerdict> verdicts;  // one per waiter
};

// Builds the graph from one listing of holders and waiters.
DLOCK_EXPORT WaitReport AnalyzeWaits(std::span<const HolderInfo> holders,
                        std::span<const WaiterInfo> waiters);

// Whether a holder's renewals are still arriving: it renewed within half its
// ttl (renewals come every third). Unknown (true) when the store reports no
// ttl.
DLOCK_EXPORT bool RenewalsArriving(const HolderInfo& holder);

}  // namespace dlock

#endif  // DLOCK_WAITS_H_
