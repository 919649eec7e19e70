#include "core/break_text.h"

#include <charconv>

namespace dlock::internal {

std::string EncodeBreakText(const BreakRecord& r) {
  return r.owner.ToString() + '\n' + std::to_string(r.token) + '\n' +
         std::to_string(r.break_token) + '\n' + r.by + '\n' + r.label;
}

bool DecodeBreakText(std::string_view text, BreakRecord* out) {
  std::string_view f[5];
  for (int i = 0; i < 4; ++i) {
    const std::size_t nl = text.find('\n');
    if (nl == std::string_view::npos) return false;
    f[i] = text.substr(0, nl);
    text.remove_prefix(nl + 1);
  }
  f[4] = text;
  auto number = [](std::string_view t, FencingToken* v) {
    return !t.empty() && std::from_chars(t.data(), t.data() + t.size(), *v).ec == std::errc();
  };
  auto owner = OwnerId::Parse(f[0]);
  if (!owner.ok() || !number(f[1], &out->token) || !number(f[2], &out->break_token)) return false;
  out->owner = *owner;
  out->by = std::string(f[3]);
  out->label = std::string(f[4]);
  return true;
}

}  // namespace dlock::internal
