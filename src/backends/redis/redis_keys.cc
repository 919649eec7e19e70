#include "backends/redis/redis_keys.h"

namespace dlock::redis {
namespace {

constexpr std::string_view kLockSuffix = "}:lock";
constexpr std::string_view kQueueSuffix = "}:queue";
constexpr std::string_view kBreaksSuffix = "}:breaks";
constexpr std::string_view kNamePrefix = "dlock:{";

std::string Name(std::string_view key, std::string_view role) {
  return NameOfEscaped(EscapeKey(key), role);
}

// SCAN MATCH is a glob: these bytes must be matched literally.
std::string GlobEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string EscapeKey(std::string_view key) {
  std::string out;
  out.reserve(key.size());
  for (char c : key) {
    switch (c) {
      case '%': out += "%25"; break;
      case '{': out += "%7B"; break;
      case '}': out += "%7D"; break;
      default: out += c;
    }
  }
  return out;
}

std::optional<std::string> UnescapeKey(std::string_view escaped) {
  std::string out;
  out.reserve(escaped.size());
  for (std::size_t i = 0; i < escaped.size(); ++i) {
    const char c = escaped[i];
    if (c == '{' || c == '}') return std::nullopt;
    if (c != '%') {
      out += c;
      continue;
    }
    const std::string_view code = escaped.substr(i + 1, 2);
    if (code == "25") {
      out += '%';
    } else if (code == "7B") {
      out += '{';
    } else if (code == "7D") {
      out += '}';
    } else {
      return std::nullopt;
    }
    i += 2;
  }
  return out;
}

std::string LockName(std::string_view key) { return Name(key, "lock"); }
std::string CounterName(std::string_view key) { return Name(key, "token"); }
std::string QueueName(std::string_view key) { return Name(key, "queue"); }
std::string QueueExpiryName(std::string_view key) { return Name(key, "qexp"); }
std::string QueueInfoName(std::string_view key) { return Name(key, "qinfo"); }
std::string HoldersName(std::string_view key) { return Name(key, "holders"); }
std::string HoldInfoName(std::string_view key) { return Name(key, "hinfo"); }
std::string FenceName(std::string_view key) { return Name(key, "fence"); }
std::string DoneName(std::string_view key) { return Name(key, "done"); }
std::string BreaksName(std::string_view key) { return Name(key, "breaks"); }

std::string WakeChannel(int db, std::string_view key) {
  return WakeChannelOfEscaped(db, EscapeKey(key));
}

std::string NameOfEscaped(std::string_view escaped, std::string_view role) {
  std::string name;
  name.reserve(kNamePrefix.size() + escaped.size() + 2 + role.size());
  name += kNamePrefix;
  name += escaped;
  name += "}:";
  name += role;
  return name;
}

std::string WakeChannelOfEscaped(int db, std::string_view escaped) {
  std::string channel = "dlock:" + std::to_string(db) + ":{";
  channel += escaped;
  channel += "}:wake";
  return channel;
}

std::string LockPattern(std::string_view prefix) {
  return std::string(kNamePrefix) + GlobEscape(EscapeKey(prefix)) + "*" +
         GlobEscape(kLockSuffix);
}

std::string NamesPattern(std::string_view prefix) {
  return std::string(kNamePrefix) + GlobEscape(EscapeKey(prefix)) + "*";
}

bool IsPerKeyName(std::string_view name) {
  return name.starts_with(kNamePrefix) && !name.starts_with("dlock:{%s") &&
         !name.ends_with("}:fence");
}

std::string QueuePattern(std::string_view prefix) {
  return std::string(kNamePrefix) + GlobEscape(EscapeKey(prefix)) + "*" +
         GlobEscape(kQueueSuffix);
}

std::string BreaksPattern(std::string_view prefix) {
  return std::string(kNamePrefix) + GlobEscape(EscapeKey(prefix)) + "*" +
         GlobEscape(kBreaksSuffix);
}

std::string CounterNameOfLock(std::string_view lock_name) {
  std::string name(lock_name.substr(0, lock_name.size() - 4));  // drop "lock"
  return name + "token";
}

namespace {
std::optional<std::string> KeyFromName(std::string_view name, std::string_view suffix) {
  if (!name.starts_with(kNamePrefix) || !name.ends_with(suffix)) return std::nullopt;
  name.remove_prefix(kNamePrefix.size());
  name.remove_suffix(suffix.size());
  if (name.empty()) return std::nullopt;
  return UnescapeKey(name);
}
}  // namespace

std::optional<std::string> KeyFromLockName(std::string_view name) {
  return KeyFromName(name, kLockSuffix);
}

std::optional<std::string> KeyFromQueueName(std::string_view name) {
  return KeyFromName(name, kQueueSuffix);
}

std::optional<std::string> KeyFromBreaksName(std::string_view name) {
  return KeyFromName(name, kBreaksSuffix);
}

}  // namespace dlock::redis
