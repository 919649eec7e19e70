// The store's URI as a command run under a lock sees it in DLOCK_BACKEND:
// never with a secret in it, yet usable by a `dlock` the command runs.
//
//  - A password from password_file= or password_env= stays where it is:
//    the URI names the file or the variable, not the password.
//  - A password written in the URI itself goes into a file only this user
//    can read (mode 0600, in a new 0700 directory under $XDG_RUNTIME_DIR,
//    else $TMPDIR or /tmp), and the URI names that file with
//    password_file=. The file is removed when dlock exits, so it lives only
//    as long as the lock is held.
//
// So the password is in no command line, no environment and no message; a
// nested dlock reads it from the file as from any password_file.
#ifndef DLOCK_SRC_CLI_EXPORTED_STORE_H_
#define DLOCK_SRC_CLI_EXPORTED_STORE_H_

#include <string>

#include "dlock/status.h"

namespace dlock::cli {

class ExportedStore {
 public:
  // `uri_text`: the URI the store was opened with.
  static Result<ExportedStore> For(const std::string& uri_text);

  ExportedStore(ExportedStore&& other) noexcept;
  ExportedStore& operator=(ExportedStore&&) = delete;
  ExportedStore(const ExportedStore&) = delete;
  ~ExportedStore();  // removes the password file, if one was written

  const std::string& uri() const { return uri_; }

 private:
  ExportedStore() = default;

  std::string uri_;
  std::string dir_;  // holds the password file; empty if none
};

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_EXPORTED_STORE_H_
