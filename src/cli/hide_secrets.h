// A password typed into dlock's own command line (--backend URI) can be
// read by every local user through `ps` while dlock runs. Once the flags
// are parsed, dlock overwrites it in place in its argv, as mysql does with
// -p; the docs recommend password_file= or password_env= instead, which
// leave nothing to hide.
#ifndef DLOCK_SRC_CLI_HIDE_SECRETS_H_
#define DLOCK_SRC_CLI_HIDE_SECRETS_H_

#include <string>

namespace dlock::cli {

// Overwrites with 'x' the password and every secret parameter's value of
// the URI in `text` (a NUL-terminated argv string), keeping its length.
void HideUriSecretsInPlace(char* text);

// The same for every --backend value among argv[1] .. argv[end - 1].
void HideBackendSecretsInArgv(int end, char** argv);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_HIDE_SECRETS_H_
