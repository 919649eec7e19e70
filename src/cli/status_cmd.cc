#include "cli/status_cmd.h"

#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "core/duration.h"

namespace dlock::cli {

int RunStatus(const StatusFlags& flags) {
  auto store = OpenStore(flags.backend);
  if (!store.ok()) return Fail(store.status());
  auto holders = store->client->List(flags.prefix);
  if (!holders.ok()) return Fail(holders.status());

  if (flags.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const HolderInfo& h : *holders) {
      out.push_back({{"key", h.key},
                     {"owner", h.owner.ToString()},
                     {"token", h.token},
                     {"ttl_remaining_ms", h.ttl_remaining.count()}});
    }
    // Keys are bytes; replace invalid UTF-8 rather than fail.
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    return kExitOk;
  }
  if (holders->empty()) {
    std::cout << "no locks held" << (flags.prefix.empty() ? "" : " under '" + flags.prefix + "'")
              << " in " << store->client->Describe() << '\n';
    return kExitOk;
  }
  std::size_t key_width = 3;
  for (const auto& h : *holders) key_width = std::max(key_width, h.key.size());
  key_width = std::min<std::size_t>(key_width, 60);
  std::cout << std::left << std::setw(static_cast<int>(key_width)) << "KEY" << "  "
            << std::setw(32) << "OWNER" << "  " << std::right << std::setw(10) << "TOKEN"
            << "  " << "TTL LEFT" << '\n';
  for (const auto& h : *holders) {
    std::cout << std::left << std::setw(static_cast<int>(key_width)) << h.key << "  "
              << h.owner.ToString() << "  " << std::right << std::setw(10) << h.token << "  "
              << internal::FormatDuration(h.ttl_remaining) << '\n';
  }
  return kExitOk;
}

}  // namespace dlock::cli
