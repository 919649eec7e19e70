// The registry's table: every URI scheme dlock knows, built or not, so that
// a user of a build without one gets "not in this build" rather than
// "unknown". KnownSchemes() is generated from the stores' declarations
// (src/backends/*/store.cmake, cmake/DlockStore.cmake) twice: for libdlock,
// and for the `dlock` command, whose copy links no FULL_ONLY store and
// hands their URIs to dlock-full. docs/stores.md.
#ifndef DLOCK_SRC_CORE_STORE_TABLE_H_
#define DLOCK_SRC_CORE_STORE_TABLE_H_

#include <memory>
#include <span>
#include <string_view>

#include "core/registry.h"
#include "core/uri.h"
#include "dlock/backend.h"

namespace dlock::internal {

using StoreFactory = Result<std::unique_ptr<Backend>> (*)(const Uri&, const BackendParams&);

struct SchemeEntry {
  std::string_view scheme;
  std::string_view form;        // how a URI of this scheme looks, for help texts
  StoreFactory factory;         // null: not in this build
  std::string_view why_not;     // why factory is null
  bool served_by_full = false;  // in `dlock`: hand the command to dlock-full
};

// In the order `dlock --help` lists them.
std::span<const SchemeEntry> KnownSchemes();

// The factory `dlock` has for the stores dlock-full serves: reached only if
// `dlock` could not hand the command over.
Result<std::unique_ptr<Backend>> HandOverFailed(const Uri& uri, const BackendParams& params);

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_STORE_TABLE_H_
