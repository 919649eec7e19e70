// A detached lock's handle: what `dlock acquire` prints and `dlock release`
// takes. KEY:OWNER:TOKEN, with the key percent-encoded so that the handle is
// one word a shell passes through untouched. It carries what a fence needs
// (the key and the token) and the owner id that names the holding.
#ifndef DLOCK_SRC_CLI_HANDLE_H_
#define DLOCK_SRC_CLI_HANDLE_H_

#include <string>
#include <string_view>

#include "dlock/status.h"
#include "dlock/types.h"

namespace dlock::cli {

struct Handle {
  std::string key;
  OwnerId owner;
  FencingToken token = 0;  // 0 on a store that orders no tokens
};

std::string FormatHandle(const Handle& handle);
// kInvalidArgument, naming the form, for anything FormatHandle would not print.
Result<Handle> ParseHandle(std::string_view text);
// `export NAME=VALUE` lines for `eval`: DLOCK_HANDLE, DLOCK_KEY and, when
// tokens are ordered, DLOCK_TOKEN; values quoted for any POSIX shell.
std::string HandleAsShell(const Handle& handle, bool token_ordered);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_HANDLE_H_
