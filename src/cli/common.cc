#include "cli/common.h"

#include <iostream>

#include "cli/text.h"

namespace dlock::cli {

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kInvalidArgument: return kExitUsage;
    case StatusCode::kUnavailable: return kExitUnavailable;
    case StatusCode::kPermissionDenied: return kExitNoPermission;
    case StatusCode::kLockHeld:
    case StatusCode::kDeadlineExceeded: return kExitTimedOut;
    case StatusCode::kLeaseLost:
    case StatusCode::kNotOwner: return kExitLeaseLost;
    case StatusCode::kStaleToken: return kExitDataErr;
    case StatusCode::kCancelled: return 130;
    case StatusCode::kDataLoss: return kExitDamaged;
    case StatusCode::kFailedPrecondition:
    case StatusCode::kNotFound:  // a backend's answer to the core, never a command's
    case StatusCode::kInternal: return kExitSoftware;
  }
  return kExitSoftware;
}

int Fail(int code, std::string_view message) {
  // One line, always, and nothing a terminal acts on: a store's message may
  // carry newlines, a key escape sequences.
  std::cerr << "dlock: " << Printable(message) << '\n';
  return code;
}

int Fail(const Status& status) { return Fail(ExitCodeFor(status), status.message()); }

Result<Store> OpenStore(const std::string& backend_flag) {
  Store store;
  if (!backend_flag.empty()) {
    store.uri = backend_flag;
  } else {
    DLOCK_ASSIGN_OR_RETURN(auto resolved, ResolveDefaultBackend());
    store.uri = resolved.uri;
    // Let Connect apply the default's rules (creating its directory) and
    // name DLOCK_BACKEND in errors.
    DLOCK_ASSIGN_OR_RETURN(store.client, Client::Connect(""));
    return store;
  }
  auto client = Client::Connect(store.uri);
  if (!client.ok()) return client.status().WithContext("--backend");
  store.client = std::move(*client);
  return store;
}

}  // namespace dlock::cli
