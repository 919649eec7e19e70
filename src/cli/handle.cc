#include "cli/handle.h"

#include <charconv>

#include "cli/text.h"

namespace dlock::cli {
namespace {

// Bytes a handle carries as they are: none of them means anything to a
// shell, and none is the handle's separator.
bool KeptAsIs(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '_' || c == '.' || c == '/';
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

Result<std::string> DecodeKey(std::string_view encoded) {
  std::string key;
  for (std::size_t i = 0; i < encoded.size(); ++i) {
    if (KeptAsIs(encoded[i])) {
      key += encoded[i];
      continue;
    }
    const bool escape = encoded[i] == '%' && i + 2 < encoded.size();
    const int hi = escape ? HexDigit(encoded[i + 1]) : -1;
    const int lo = escape ? HexDigit(encoded[i + 2]) : -1;
    if (hi < 0 || lo < 0) return InvalidArgumentError("a byte of the key is neither plain nor %XX");
    key += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  return key;
}

std::string ShellQuoted(std::string_view value) {
  std::string out = "'";
  for (char c : value) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string FormatHandle(const Handle& handle) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (char c : handle.key) {
    if (KeptAsIs(c)) {
      out += c;
    } else {
      const auto byte = static_cast<unsigned char>(c);
      out += '%';
      out += kHex[byte >> 4];
      out += kHex[byte & 0xF];
    }
  }
  return out + ":" + handle.owner.ToString() + ":" + std::to_string(handle.token);
}

Result<Handle> ParseHandle(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError("'" + Printable(text.substr(0, 80)) +
                                "' is not a handle from dlock acquire (KEY:OWNER:TOKEN, the key "
                                "percent-encoded): " + std::string(why));
  };
  const std::size_t last = text.rfind(':');
  const std::size_t middle = last == std::string_view::npos || last == 0
                                 ? std::string_view::npos
                                 : text.rfind(':', last - 1);
  if (middle == std::string_view::npos) return bad("it has fewer than three parts");
  Handle handle;
  auto key = DecodeKey(text.substr(0, middle));
  if (!key.ok()) return bad(key.status().message());
  handle.key = std::move(*key);
  auto owner = OwnerId::Parse(text.substr(middle + 1, last - middle - 1));
  if (!owner.ok()) return bad("the owner is not 32 hex digits");
  handle.owner = *owner;
  const std::string_view token = text.substr(last + 1);
  const auto [end, error] = std::from_chars(token.data(), token.data() + token.size(), handle.token);
  if (token.empty() || error != std::errc() || end != token.data() + token.size()) {
    return bad("the token is not a number");
  }
  return handle;
}

std::string HandleAsShell(const Handle& handle, bool token_ordered) {
  std::string out = "export DLOCK_HANDLE=" + ShellQuoted(FormatHandle(handle)) + "\n";
  out += "export DLOCK_KEY=" + ShellQuoted(handle.key) + "\n";
  if (token_ordered) out += "export DLOCK_TOKEN=" + std::to_string(handle.token) + "\n";
  return out;
}

}  // namespace dlock::cli
