// Reading a small file named by the user (a password file, a certificate).
#ifndef DLOCK_SRC_CORE_READ_FILE_H_
#define DLOCK_SRC_CORE_READ_FILE_H_

#include <cstddef>
#include <string>

#include "dlock/status.h"

namespace dlock::internal {

// The whole of file `path`. kInvalidArgument "<what> cannot be read: <errno
// text>", or "<what> is larger than <limit_text>: <not_what>" past
// `max_bytes` (a wrong file, not one to load into memory).
Result<std::string> ReadSmallFile(const std::string& path, std::size_t max_bytes,
                                  const std::string& what, const std::string& too_large);

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_READ_FILE_H_
