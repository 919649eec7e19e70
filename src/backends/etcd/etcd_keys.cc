#include "backends/etcd/etcd_keys.h"

#include <cinttypes>
#include <cstdio>

#include "core/duration.h"
#include "core/key_range.h"

namespace dlock::etcd {
namespace {

// Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF).
bool IsUtf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int len;
    std::uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (int k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += len;
  }
  return true;
}

std::string Escaped(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

Result<std::string> ParseEndpoint(std::string_view host) {
  const std::string form = "etcd://h1:2379,h2:2379[/prefix]";
  if (host.empty()) {
    return InvalidArgumentError("empty host in the etcd endpoint list; expected " + form);
  }
  std::string_view name = host;
  std::string_view port;
  if (host.front() == '[') {  // [v6]:port
    const std::size_t close = host.find(']');
    if (close == std::string_view::npos) {
      return InvalidArgumentError("etcd endpoint '" + std::string(host) + "': unclosed '['");
    }
    name = host.substr(0, close + 1);
    if (close + 1 < host.size()) {
      if (host[close + 1] != ':') {
        return InvalidArgumentError("etcd endpoint '" + std::string(host) +
                                    "': expected ':' and a port after ']'");
      }
      port = host.substr(close + 2);
    }
  } else if (const std::size_t colon = host.rfind(':'); colon != std::string_view::npos) {
    name = host.substr(0, colon);
    port = host.substr(colon + 1);
  }
  if (name.empty() || name == "[]") {
    return InvalidArgumentError("etcd endpoint '" + std::string(host) + "' has no host name");
  }
  if (port.empty()) return std::string(name) + ":" + std::to_string(kDefaultPort);
  int value = 0;
  for (char c : port) {
    if (c < '0' || c > '9' || value > 65535) {
      value = -1;
      break;
    }
    value = value * 10 + (c - '0');
  }
  if (value < 1 || value > 65535) {
    return InvalidArgumentError("etcd endpoint '" + std::string(host) + "': port '" +
                                std::string(port) + "' is not a number from 1 to 65535");
  }
  return std::string(name) + ":" + std::to_string(value);
}

// `name` with '%' and '/' (and ':' when `colon`) written as %XX.
void AppendEscaped(std::string& out, std::string_view name, bool colon) {
  for (char c : name) {
    if (c == '%') {
      out += "%25";
    } else if (c == '/') {
      out += "%2F";
    } else if (colon && c == ':') {
      out += "%3A";
    } else {
      out += c;
    }
  }
}

constexpr std::string_view kDelayTag = ".dlock-delay:";
constexpr std::string_view kBreaksTag = ".dlock-breaks:";

}  // namespace

Result<EtcdOptions> OptionsFromUri(const internal::Uri& uri) {
  EtcdOptions o;
  DLOCK_RETURN_IF_ERROR(uri.CheckParams({"timeout", "cacert", "cert", "key"}));
  o.security.tls = uri.scheme == "etcds";
  DLOCK_ASSIGN_OR_RETURN(o.security.tls_files,
                         internal::TlsFilesFromUri(uri, o.security.tls, "etcds"));
  if (uri.user.empty() && uri.has_password) {
    return InvalidArgumentError("etcd URI " + uri.Redacted() +
                                " has a password but no user name: write etcds://USER@host");
  }
  if (!uri.user.empty() && !uri.has_password) {
    return InvalidArgumentError(
        "etcd URI " + uri.Redacted() + " names user '" + uri.user +
        "' but no password: add password_file=PATH or password_env=NAME (or, to be known by "
        "the client certificate's CN alone, drop the user)");
  }
  o.security.user = uri.user;
  o.security.password = uri.password;
  if (uri.hosts.empty()) {
    return InvalidArgumentError("etcd URI " + uri.Redacted() +
                                " names no host: expected etcd://h1:2379,h2:2379[/prefix]");
  }
  std::string_view hosts = uri.hosts;
  while (true) {
    const std::size_t comma = hosts.find(',');
    DLOCK_ASSIGN_OR_RETURN(std::string endpoint, ParseEndpoint(hosts.substr(0, comma)));
    o.endpoints.push_back(std::move(endpoint));
    if (comma == std::string_view::npos) break;
    hosts.remove_prefix(comma + 1);
  }

  std::string_view root = uri.path;
  while (!root.empty() && root.front() == '/') root.remove_prefix(1);
  for (unsigned char c : root) {
    if (c < 0x20 || c == 0x7f) {
      return InvalidArgumentError("etcd key prefix '" + Escaped(root) +
                                  "' contains a NUL or control byte: use printable UTF-8");
    }
  }
  if (!IsUtf8(root)) {
    return InvalidArgumentError("etcd key prefix '" + Escaped(root) +
                                "' is not valid UTF-8: use printable UTF-8");
  }
  if (!root.empty()) {
    o.root = std::string(root);
    if (o.root.back() != '/') o.root += '/';
  }

  if (const std::string* t = uri.Param("timeout")) {
    auto d = internal::ParseDuration(*t);
    if (!d.ok()) return InvalidArgumentError("etcd parameter timeout: " + d.status().message());
    if (*d < std::chrono::milliseconds(100)) {
      return InvalidArgumentError("etcd parameter timeout=" + *t + " is below 100ms");
    }
    o.request_timeout = *d;
  }
  return o;
}

std::string QueuePrefix(std::string_view root, std::string_view name) {
  std::string p;
  p.reserve(root.size() + name.size() + 1);
  p += root;
  p += name;
  p += '/';
  return p;
}

std::string DoneKey(std::string_view root, std::string_view name) {
  std::string k;
  k.reserve(root.size() + name.size() + 16);
  k += root;
  k += ".dlock-done:";
  AppendEscaped(k, name, /*colon=*/false);
  return k;
}

std::string DelayListPrefix(std::string_view root, std::string_view name_prefix) {
  std::string k(root);
  k += kDelayTag;
  AppendEscaped(k, name_prefix, /*colon=*/true);
  return k;
}

std::string DelayPrefix(std::string_view root, std::string_view name) {
  return DelayListPrefix(root, name) + ":";
}

std::string DelayKey(std::string_view delay_prefix, std::string_view queue_prefix,
                     std::string_view member_key) {
  std::string k(delay_prefix);
  if (member_key.substr(0, queue_prefix.size()) == queue_prefix) {
    member_key.remove_prefix(queue_prefix.size());
  }
  k += member_key;
  return k;
}

namespace {

// The lock name of a key R + tag + N'' + ":" + leaf (N'' as AppendEscaped
// writes it with colons escaped); nullopt for any other key.
std::optional<std::string> TaggedLockNameOf(std::string_view root, std::string_view tag,
                                            std::string_view key) {
  if (key.substr(0, root.size()) != root) return std::nullopt;
  key.remove_prefix(root.size());
  if (key.substr(0, tag.size()) != tag) return std::nullopt;
  key.remove_prefix(tag.size());
  const std::size_t colon = key.find(':');
  if (colon == std::string_view::npos || colon + 1 == key.size()) return std::nullopt;
  const std::string_view escaped = key.substr(0, colon);
  std::string name;
  for (std::size_t i = 0; i < escaped.size(); ++i) {
    if (escaped[i] != '%') {
      name += escaped[i];
      continue;
    }
    const std::string_view code = escaped.substr(i + 1, 2);
    if (code == "25") {
      name += '%';
    } else if (code == "2F") {
      name += '/';
    } else if (code == "3A") {
      name += ':';
    } else {
      return std::nullopt;
    }
    i += 2;
  }
  return name;
}

}  // namespace

std::optional<std::string> DelayLockNameOf(std::string_view root, std::string_view key) {
  return TaggedLockNameOf(root, kDelayTag, key);
}

std::string BreaksListPrefix(std::string_view root, std::string_view name_prefix) {
  std::string k(root);
  k += kBreaksTag;
  AppendEscaped(k, name_prefix, /*colon=*/true);
  return k;
}

std::string BreakKey(std::string_view root, std::string_view name, std::int64_t at_unix_ms,
                     std::string_view owner_hex) {
  char at[24];
  std::snprintf(at, sizeof at, "%016" PRIx64, static_cast<std::uint64_t>(at_unix_ms));
  std::string k = BreaksListPrefix(root, name);
  k += ':';
  k += at;
  k += '-';
  k += owner_hex;
  return k;
}

std::optional<std::string> BreakLockNameOf(std::string_view root, std::string_view key) {
  return TaggedLockNameOf(root, kBreaksTag, key);
}

std::string EncodeMarker(std::int64_t member_revision, std::string_view member_value) {
  std::string v = std::to_string(member_revision);
  v += '\n';
  v += member_value;
  return v;
}

MarkerValue DecodeMarker(std::string_view value) {
  MarkerValue m;
  const std::size_t nl = value.find('\n');
  const std::string_view digits = value.substr(0, nl);
  std::int64_t revision = 0;
  bool ok = !digits.empty() && digits.size() <= 18;
  for (char c : digits) {
    if (c < '0' || c > '9') ok = false;
    if (ok) revision = revision * 10 + (c - '0');
  }
  if (ok) m.member_revision = revision;
  m.member = DecodeValue(nl == std::string_view::npos ? std::string_view() : value.substr(nl + 1));
  return m;
}

std::string LeaseHex(std::int64_t lease_id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%" PRIx64, static_cast<std::uint64_t>(lease_id));
  return buf;
}

std::string MemberKey(std::string_view queue_prefix, std::int64_t lease_id) {
  return std::string(queue_prefix) + LeaseHex(lease_id);
}

std::string MemberKey(std::string_view queue_prefix, std::int64_t lease_id,
                      std::string_view owner_hex) {
  return MemberKey(queue_prefix, lease_id) + "-" + std::string(owner_hex);
}

std::string EncodeValue(std::string_view owner_hex, std::uint32_t limit, std::string_view label) {
  std::string v(owner_hex);
  if (limit != 1 || !label.empty()) {
    v += '\n';
    v += std::to_string(limit);
    v += '\n';
    v += label;
  }
  return v;
}

MemberValue DecodeValue(std::string_view value) {
  MemberValue m;
  constexpr std::size_t kHex = 32;
  if (value.size() < kHex || (value.size() > kHex && value[kHex] != '\n')) return m;
  m.owner_hex = std::string(value.substr(0, kHex));
  if (value.size() == kHex) return m;
  value.remove_prefix(kHex + 1);
  const std::size_t nl = value.find('\n');
  const std::string_view digits = value.substr(0, nl);
  std::uint64_t limit = 0;
  bool ok = !digits.empty() && digits.size() <= 10;
  for (char c : digits) {
    if (c < '0' || c > '9') ok = false;
    if (ok) limit = limit * 10 + static_cast<std::uint64_t>(c - '0');
  }
  // An unreadable limit counts as exclusive: never more sharing than meant.
  m.limit = ok && limit >= 1 && limit <= 0xFFFFFFFFu ? static_cast<std::uint32_t>(limit) : 1;
  if (nl != std::string_view::npos) m.label = std::string(value.substr(nl + 1));
  return m;
}

bool IsQueueMember(std::string_view queue_prefix, std::string_view key) {
  if (key.size() <= queue_prefix.size() || key.substr(0, queue_prefix.size()) != queue_prefix) {
    return false;
  }
  return key.find('/', queue_prefix.size()) == std::string_view::npos;
}

std::string PrefixRangeEnd(std::string_view prefix) {
  return internal::PrefixEnd(prefix).value_or(std::string(1, '\0'));
}

std::optional<std::string> LockNameOf(std::string_view root, std::string_view key) {
  if (key.substr(0, root.size()) != root) return std::nullopt;
  key.remove_prefix(root.size());
  const std::size_t slash = key.rfind('/');
  if (slash == std::string_view::npos || slash == 0) return std::nullopt;
  std::string_view leaf = key.substr(slash + 1);
  auto hex = [](std::string_view s) {
    for (char c : s) {
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    }
    return !s.empty();
  };
  if (const std::size_t dash = leaf.find('-'); dash != std::string_view::npos) {
    if (leaf.size() - dash - 1 != 32 || !hex(leaf.substr(dash + 1))) return std::nullopt;
    leaf = leaf.substr(0, dash);
  }
  if (leaf.empty() || leaf.size() > 16 || !hex(leaf)) return std::nullopt;
  return std::string(key.substr(0, slash));
}

}  // namespace dlock::etcd
