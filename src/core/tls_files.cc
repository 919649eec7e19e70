#include "core/tls_files.h"

#include "core/read_file.h"

namespace dlock::internal {
namespace {

constexpr std::size_t kMaxTlsFileBytes = 1 << 20;

}  // namespace

Result<TlsFiles> TlsFilesFromUri(const Uri& uri, bool tls, std::string_view tls_scheme) {
  TlsFiles files;
  for (auto [name, field] : {std::pair{"cacert", &files.ca_file}, std::pair{"cert", &files.cert_file},
                             std::pair{"key", &files.key_file}}) {
    const std::string* value = uri.Param(name);
    if (value == nullptr) continue;
    if (!tls) {
      return InvalidArgumentError(std::string(name) + "= names a TLS file, but " + uri.scheme +
                                  ":// is plaintext: use " + std::string(tls_scheme) + "://");
    }
    if (value->empty()) return InvalidArgumentError(std::string(name) + "= is empty: give a file path");
    *field = *value;
  }
  if (files.cert_file.empty() != files.key_file.empty()) {
    return InvalidArgumentError("cert= and key= come together: a client certificate needs its key");
  }
  return files;
}

Result<std::string> ReadTlsFile(std::string_view param, const std::string& path) {
  const std::string what = std::string(param) + "= file '" + path + "'";
  DLOCK_ASSIGN_OR_RETURN(std::string text,
                         ReadSmallFile(path, kMaxTlsFileBytes, what, "is larger than 1 MiB: not a PEM file"));
  if (text.empty()) return InvalidArgumentError(what + " is empty");
  if (text.find("-----BEGIN ") == std::string::npos) {
    return InvalidArgumentError(what + " holds no PEM block (-----BEGIN ...): not a certificate or key");
  }
  return text;
}

}  // namespace dlock::internal
