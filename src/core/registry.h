// The URI registry: opens a store from its URI, through the table of schemes
// generated from the stores' declarations (core/store_table.h).
#ifndef DLOCK_SRC_CORE_REGISTRY_H_
#define DLOCK_SRC_CORE_REGISTRY_H_

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "dlock/backend.h"
#include "dlock/clock.h"

namespace dlock::internal {

struct BackendParams {
  std::shared_ptr<Clock> clock;
  std::chrono::milliseconds connect_timeout{5000};
  // The URI is dlock's default SQLite file: create its directory.
  bool is_default = false;
};

// Opens the store named by `uri`. kInvalidArgument for a malformed URI or an
// unknown scheme (the message lists the schemes this build supports).
Result<std::unique_ptr<Backend>> OpenBackend(std::string_view uri,
                                             const BackendParams& params);

// True in the `dlock` command for the schemes it hands to `dlock-full` (the
// FULL_ONLY stores, docs/stores.md); false in the library.
bool ServedByFullBinary(std::string_view scheme);

// "sqlite:///path/locks.db, ..." for help texts and errors.
std::string SupportedSchemes();

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_REGISTRY_H_
