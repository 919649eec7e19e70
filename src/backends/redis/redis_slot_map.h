// A Redis Cluster's slot map: which primary serves each of the 16384 hash
// slots, read from CLUSTER SLOTS, and the redirections (MOVED, ASK) a node
// answers with when a slot is served elsewhere. Pure parsing: every reply
// is checked, and what is malformed is named in a one-line error.
//
// Thread-compatible values.
#ifndef DLOCK_SRC_BACKENDS_REDIS_REDIS_SLOT_MAP_H_
#define DLOCK_SRC_BACKENDS_REDIS_REDIS_SLOT_MAP_H_

#include <hiredis/hiredis.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/redis/redis_slots.h"
#include "backends/redis/redis_transport.h"
#include "dlock/status.h"

namespace dlock::redis {

struct SlotMap {
  static constexpr std::uint16_t kNone = 0xffff;
  // The primaries, each once; owner[slot] indexes it (kNone: no primary
  // serves the slot now).
  std::vector<Endpoint> primaries;
  std::array<std::uint16_t, kSlotCount> owner;
  // Every node the reply named, replicas too: where to ask for the map
  // next time, when a primary has died.
  std::vector<Endpoint> nodes;

  SlotMap() { owner.fill(kNone); }
  // The primary of `slot`, or nullopt.
  std::optional<Endpoint> PrimaryOf(std::uint16_t slot) const;
  // Records that `slot` is served by `node` (a MOVED answer).
  void Assign(std::uint16_t slot, const Endpoint& node);
};

// The map a CLUSTER SLOTS reply describes: an array of
// [first slot, last slot, [host, port, id...], replicas...]. A host that is
// NULL or empty (cluster-preferred-endpoint-type unknown-endpoint) means
// `asked`'s host, on the node's port; "?" (a hostname the node has not
// announced) means nobody knows: that node is left out, and a range whose
// primary it is stays unserved. `server` names the node that answered, for
// the message.
Result<SlotMap> ParseClusterSlots(const redisReply* reply, const Endpoint& asked,
                                  std::string_view server);

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381".
struct Redirect {
  bool ask = false;  // ASK: this one command, after ASKING; MOVED: for good
  std::uint16_t slot = 0;
  Endpoint node;
};
// nullopt when `error` is not a redirection; kUnavailable when it is one
// that is malformed or names an unknown host ("?"). An empty host means
// `from`'s.
Result<std::optional<Redirect>> ParseRedirect(std::string_view error, const Endpoint& from,
                                              std::string_view server);

}  // namespace dlock::redis

#endif  // DLOCK_SRC_BACKENDS_REDIS_REDIS_SLOT_MAP_H_
