#include "cli/text.h"

namespace dlock::cli {
namespace {

void AppendEscaped(std::string& out, unsigned char byte) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\x";
  out += kHex[byte >> 4];
  out += kHex[byte & 15];
}

// The length of the valid UTF-8 sequence at the start of `s`, or 0.
std::size_t Utf8Length(std::string_view s) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  std::size_t n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
  if (n == 0 || n > s.size()) return 0;
  for (std::size_t i = 1; i < n; ++i) {
    if ((static_cast<unsigned char>(s[i]) >> 6) != 2) return 0;
  }
  if (n == 2 && b0 < 0xc2) return 0;  // overlong
  return n;
}

}  // namespace

std::string Printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const auto b0 = static_cast<unsigned char>(text[0]);
    const std::size_t n = Utf8Length(text);
    // C1 controls (U+0080..U+009F) are 0xC2 0x80..0x9F in UTF-8: some
    // terminals act on them as on ESC [.
    const bool c1 = n == 2 && b0 == 0xc2 && static_cast<unsigned char>(text[1]) < 0xa0;
    if (n == 0 || c1 || b0 < 0x20 || b0 == 0x7f) {
      AppendEscaped(out, b0);
      text.remove_prefix(1);
      continue;
    }
    if (b0 == '\\') out += '\\';
    out.append(text.substr(0, n));
    text.remove_prefix(n);
  }
  return out;
}

std::string Quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

}  // namespace dlock::cli
