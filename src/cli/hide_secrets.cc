#include "cli/hide_secrets.h"

#include <cstring>
#include <string_view>

#include "core/uri.h"

namespace dlock::cli {
namespace {

void Blank(char* from, char* to) {
  for (char* p = from; p < to; ++p) *p = 'x';
}

}  // namespace

void HideUriSecretsInPlace(char* text) {
  char* const end = text + std::strlen(text);
  char* rest = std::strstr(text, "://");
  if (rest == nullptr) return;
  rest += 3;
  // As ParseUri reads it: user information up to the last '@'.
  if (*rest != '/') {
    if (char* at = std::strrchr(rest, '@'); at != nullptr) {
      if (char* colon = static_cast<char*>(std::memchr(rest, ':', at - rest))) Blank(colon + 1, at);
      rest = at + 1;
    }
  }
  char* query = std::strchr(rest, '?');
  if (query == nullptr) return;
  for (char* item = query + 1; item < end;) {
    char* amp = std::strchr(item, '&');
    char* item_end = amp ? amp : end;
    char* eq = static_cast<char*>(std::memchr(item, '=', item_end - item));
    if (eq && internal::IsSecretParam(std::string_view(item, eq - item))) Blank(eq + 1, item_end);
    item = item_end + 1;
  }
}

void HideBackendSecretsInArgv(int end, char** argv) {
  for (int i = 1; i < end; ++i) {
    if (std::strcmp(argv[i], "--backend") == 0 && i + 1 < end) {
      HideUriSecretsInPlace(argv[++i]);
    } else if (std::strncmp(argv[i], "--backend=", 10) == 0) {
      HideUriSecretsInPlace(argv[i] + 10);
    }
  }
}

}  // namespace dlock::cli
