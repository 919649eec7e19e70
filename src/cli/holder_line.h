// One line between a detached holder and the command talking to it (its
// parent `dlock acquire` through a pipe, `dlock release` through its socket):
// "OK TEXT" or "ERR CODE MESSAGE", CODE a StatusCode's number.
#ifndef DLOCK_SRC_CLI_HOLDER_LINE_H_
#define DLOCK_SRC_CLI_HOLDER_LINE_H_

#include <string>
#include <string_view>

#include "dlock/status.h"

namespace dlock::cli {

// The line for `status` (with `text` when OK), newline-terminated.
std::string HolderLine(const Status& status, std::string_view text = {});
// The text of an OK line, or the status of an ERR line; kInternal naming
// `who` for anything else (nothing at all included).
Result<std::string> ReadHolderLine(std::string_view line, std::string_view who);

// Reads one line from `fd` until a newline, end of file or `timeout_ms`
// (-1: no bound); at most 64 KiB.
Result<std::string> ReadLineFrom(int fd, int timeout_ms);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_HOLDER_LINE_H_
