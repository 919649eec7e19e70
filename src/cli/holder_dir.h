// Where detached holders (`dlock acquire`) listen for `dlock release`: one
// Unix socket per holding, named by its owner id, in a directory only the
// user can enter: $XDG_RUNTIME_DIR/dlock, else /tmp/dlock-UID.
#ifndef DLOCK_SRC_CLI_HOLDER_DIR_H_
#define DLOCK_SRC_CLI_HOLDER_DIR_H_

#include <sys/un.h>

#include <optional>
#include <string>

#include "dlock/status.h"
#include "dlock/types.h"

namespace dlock::cli {

// The directory, made (0700) when `create` and missing; kFailedPrecondition
// when missing and not made; kPermissionDenied when it is not a directory of
// this user's that nobody else may enter.
Result<std::string> HolderDirectory(bool create);

// The socket of the holding `owner` in `dir`.
std::string HolderSocket(const std::string& dir, const OwnerId& owner);

// The Unix socket address of `path`, for the holder's bind and release's
// connect; nullopt when the path is too long for one.
std::optional<sockaddr_un> SocketAddress(const std::string& path);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_HOLDER_DIR_H_
