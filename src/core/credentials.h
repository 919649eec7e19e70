// Where a store's password may come from besides the URI's user information,
// so that it need not sit in a command line (which every local user can
// read with `ps`) or in a URI exported to children:
//
//   ?password_file=PATH   the first line of the file (at most 4 KiB)
//   ?password_env=NAME    the value of environment variable NAME
//
// Every store takes them: they are resolved here, before a store sees the
// URI, into Uri::password.
#ifndef DLOCK_SRC_CORE_CREDENTIALS_H_
#define DLOCK_SRC_CORE_CREDENTIALS_H_

#include "core/uri.h"
#include "dlock/status.h"

namespace dlock::internal {

// Reads the password named by password_file= or password_env= into `uri`
// and removes that parameter from its query. kInvalidArgument, naming the
// parameter and never the secret, when both or a URI password are given
// too, or when the file or variable cannot be read.
Status ResolveCredentials(Uri& uri);

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_CREDENTIALS_H_
