// The TLS files a store URI names, with the same parameter names on every
// store (those etcdctl and curl users know):
//
//   ?cacert=PATH   the CA certificates (PEM) the server's certificate must
//                  chain to; without it, the system's trust store
//   ?cert=PATH     this client's certificate (PEM), for servers that demand
//   ?key=PATH      one; cert= and key= come together
//
// Only a TLS scheme (rediss://, etcds://, ...) may name them: a plaintext
// URI with cacert= is refused rather than silently sent in the clear. The
// files are read when a connection is made (ReadTlsFile), not when the URI
// is parsed, so a rotated certificate is used at the next reconnect.
#ifndef DLOCK_SRC_CORE_TLS_FILES_H_
#define DLOCK_SRC_CORE_TLS_FILES_H_

#include <string>
#include <string_view>

#include "core/uri.h"
#include "dlock/status.h"

namespace dlock::internal {

struct TlsFiles {
  std::string ca_file;    // empty: the system's trust store
  std::string cert_file;  // empty: no client certificate
  std::string key_file;
};

// The cacert=, cert= and key= parameters of `uri`. kInvalidArgument when
// `tls` is false and any is given (naming `tls_scheme`, the URI's TLS form), when cert= comes without key= (or the
// other way round), or when a value is empty.
Result<TlsFiles> TlsFilesFromUri(const Uri& uri, bool tls, std::string_view tls_scheme);

// The whole of file `path` (at most 1 MiB), named by URI parameter `param`
// in errors: kInvalidArgument "cacert= file '/x/ca.pem' cannot be read: No
// such file or directory".
Result<std::string> ReadTlsFile(std::string_view param, const std::string& path);

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_TLS_FILES_H_
