// What `dlock status` shows for one look at the store — the holders, and who
// waits for whom — as text for people or as JSON, written once for the
// one-shot command and for the live view (`--watch`).
#ifndef DLOCK_SRC_CLI_STATUS_VIEW_H_
#define DLOCK_SRC_CLI_STATUS_VIEW_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dlock/client.h"
#include "dlock/types.h"
#include "dlock/waits.h"

namespace dlock::cli {

std::string SessionHex(std::uint64_t session);

nlohmann::json HolderJson(const HolderInfo& h);
nlohmann::json HoldersJson(const std::vector<HolderInfo>& holders);
// The wait-for graph: parties, cycles, and each waiter's verdict.
nlohmann::json WaitsJson(const WaitReport& report, const std::string& store);

// The holder table, or "no locks held [under PREFIX] in STORE".
void WriteHolders(std::ostream& out, const std::vector<HolderInfo>& holders,
                  const std::string& prefix, const std::string& store);
// Deadlock cycles first, then the other waiters; or "nobody is waiting".
void WriteWaits(std::ostream& out, const WaitReport& report, std::size_t held,
                const std::string& prefix, const std::string& store);

// One look at the store under `prefix`, as the live views send it:
// {"at_ms" (Unix time), "store", "holders", "waits" (the graph, when
// `with_waits` and the store keeps waiters)}, or with "error" and "code"
// when the store could not be read.
nlohmann::json LookJson(Client& client, const std::string& prefix, bool with_waits);

// Keys are bytes: JSON with invalid UTF-8 replaced rather than refused.
std::string JsonText(const nlohmann::json& j, int indent);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_STATUS_VIEW_H_
