#include "backends/zookeeper/zk_path.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <optional>
#include <tuple>

namespace dlock::zookeeper {
namespace {

constexpr char kHex[] = "0123456789ABCDEF";
constexpr std::string_view kLockMarker = "lock-";
constexpr std::string_view kProtectedPrefix = "_c_";
constexpr std::size_t kSequenceDigits = 10;
constexpr std::size_t kGuidChars = 36;

bool KeptAsIs(unsigned char c) { return c >= 0x20 && c < 0x7f && c != '%'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The first code point ZooKeeper's path rules forbid in `s` (as UTF-8), or
// a description of broken UTF-8; empty when `s` is fine. Java sees paths as
// UTF-16, so anything outside the BMP (a surrogate pair there) is refused too.
std::string BadCharacter(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::uint32_t cp;
    std::size_t len;
    if (c < 0x80) {
      cp = c, len = 1;
    } else if ((c & 0xe0) == 0xc0) {
      cp = c & 0x1f, len = 2;
    } else if ((c & 0xf0) == 0xe0) {
      cp = c & 0x0f, len = 3;
    } else {
      return "a byte that is not UTF-8 of the Basic Multilingual Plane";
    }
    if (i + len > s.size()) return "truncated UTF-8";
    for (std::size_t k = 1; k < len; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return "broken UTF-8";
      cp = (cp << 6) | (d & 0x3f);
    }
    if (cp == 0 || cp <= 0x1f || (cp >= 0x7f && cp <= 0x9f) ||
        (cp >= 0xd800 && cp <= 0xf8ff) || cp >= 0xfff0) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
      return std::string("the character ") + buf;
    }
    i += len;
  }
  return "";
}

}  // namespace

Result<std::string> NormalizeChroot(std::string_view chroot) {
  if (chroot.empty() || chroot == "/") return std::string();
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError("chroot '" + std::string(chroot) +
                                "' breaks ZooKeeper's path rules: " + std::string(why) +
                                " (want an absolute path like /dlock or /apps/locks)");
  };
  if (chroot.front() != '/') return bad("it must start with '/'");
  if (chroot.back() == '/') return bad("it must not end with '/'");
  std::size_t start = 1;
  while (start <= chroot.size()) {
    std::size_t end = chroot.find('/', start);
    if (end == std::string_view::npos) end = chroot.size();
    const std::string_view seg = chroot.substr(start, end - start);
    if (seg.empty()) return bad("it has an empty segment ('//')");
    if (seg == "." || seg == "..") return bad("it has a '" + std::string(seg) + "' segment");
    start = end + 1;
  }
  if (std::string why = BadCharacter(chroot); !why.empty()) return bad("it contains " + why);
  if (chroot == "/zookeeper" || chroot.starts_with("/zookeeper/")) {
    return bad("/zookeeper is ZooKeeper's own subtree");
  }
  return std::string(chroot);
}

std::string EncodeSegment(std::string_view segment, bool first_at_root) {
  if (segment.empty()) return "%";
  if (segment == ".") return "%2E";
  if (segment == "..") return "%2E%2E";
  std::string out;
  out.reserve(segment.size() + 8);
  std::size_t i = 0;
  if (segment.starts_with(kProtectedPrefix)) {
    out += "%5F";
    i = 1;
  } else if (first_at_root && segment == "zookeeper") {
    out += "%7A";
    i = 1;
  }
  for (; i < segment.size(); ++i) {
    const auto c = static_cast<unsigned char>(segment[i]);
    if (KeptAsIs(c)) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out;
}

std::optional<std::string> DecodeSegment(std::string_view segment) {
  if (segment == "%") return std::string();
  std::string out;
  out.reserve(segment.size());
  for (std::size_t i = 0; i < segment.size(); ++i) {
    const char c = segment[i];
    if (c != '%') {
      if (!KeptAsIs(static_cast<unsigned char>(c))) return std::nullopt;
      out += c;
      continue;
    }
    if (i + 2 >= segment.size()) return std::nullopt;
    const int hi = HexValue(segment[i + 1]);
    const int lo = HexValue(segment[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

Result<std::string> LockPath(std::string_view chroot, std::string_view key) {
  if (key.starts_with('/')) key.remove_prefix(1);
  if (key.empty()) return InvalidArgumentError("the key is empty");
  std::string path(chroot);
  std::size_t start = 0;
  bool first = true;
  for (;;) {
    const std::size_t end = key.find('/', start);
    const std::string_view seg =
        key.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    path += '/';
    path += EncodeSegment(seg, first && chroot.empty());
    first = false;
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return path;
}

std::string DoneDir(std::string_view chroot) {
  return std::string(chroot) + "/" + std::string(kDoneDirName);
}

namespace {

// A key as one znode name (for flat directories of per-key records).
Result<std::string> FlatName(std::string_view key) {
  if (key.starts_with('/')) key.remove_prefix(1);
  if (key.empty()) return InvalidArgumentError("the key is empty");
  std::string name;
  if (key == ".") {
    name = "%2E";
  } else if (key == "..") {
    name = "%2E%2E";
  } else {
    name.reserve(key.size() + 8);
    for (const char ch : key) {
      const auto c = static_cast<unsigned char>(ch);
      if (KeptAsIs(c) && c != '/') {
        name += ch;
      } else {
        name += '%';
        name += kHex[c >> 4];
        name += kHex[c & 0xf];
      }
    }
  }
  return name;
}

}  // namespace

Result<std::string> DonePath(std::string_view chroot, std::string_view key) {
  DLOCK_ASSIGN_OR_RETURN(const std::string name, FlatName(key));
  return DoneDir(chroot) + "/" + name;
}

namespace {

// "ever", or a Unix ms count written as std::to_string does (and nothing
// else, so that one end has one name).
std::string FormatKeepUntil(std::optional<std::int64_t> until) {
  return until ? std::to_string(*until) : std::string("ever");
}
std::optional<std::optional<std::int64_t>> ParseKeepUntil(std::string_view text) {
  if (text == "ever") return std::optional<std::int64_t>();
  std::int64_t until = 0;
  if (std::from_chars(text.data(), text.data() + text.size(), until).ec != std::errc() ||
      std::to_string(until) != text) {
    return std::nullopt;
  }
  return std::optional<std::int64_t>(until);
}

}  // namespace

std::string FormatDoneRecord(const DoneRecordName& record) {
  return FormatKeepUntil(record.keep_until_unix_ms) + "-" + record.owner.ToString();
}

std::optional<DoneRecordName> ParseDoneRecord(std::string_view name) {
  const std::size_t dash = name.rfind('-');
  if (dash == std::string_view::npos) return std::nullopt;
  auto until = ParseKeepUntil(name.substr(0, dash));
  auto owner = OwnerId::Parse(name.substr(dash + 1));
  if (!until || !owner.ok()) return std::nullopt;
  return DoneRecordName{*until, *owner};
}

std::string BreaksDir(std::string_view chroot) {
  return std::string(chroot) + "/" + std::string(kBreaksDirName);
}

Result<std::string> BreakNodePrefix(std::string_view key,
                                    std::optional<std::int64_t> keep_until_unix_ms) {
  DLOCK_ASSIGN_OR_RETURN(std::string name, FlatName(key));
  name += "%-";
  name += FormatKeepUntil(keep_until_unix_ms);
  name += '-';
  return name;
}

std::optional<BreakNodeName> ParseBreakNode(std::string_view name) {
  const std::size_t end_of_key = name.find("%-");
  const std::size_t dash = name.rfind('-');
  if (end_of_key == std::string_view::npos || end_of_key == 0 || dash <= end_of_key + 2) {
    return std::nullopt;
  }
  // ZooKeeper's sequence: ten decimal digits.
  const std::string_view sequence = name.substr(dash + 1);
  if (sequence.size() != 10 ||
      !std::all_of(sequence.begin(), sequence.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  BreakNodeName out;
  auto key = DecodeSegment(name.substr(0, end_of_key));
  if (!key) return std::nullopt;
  out.key = std::move(*key);
  auto until = ParseKeepUntil(name.substr(end_of_key + 2, dash - end_of_key - 2));
  if (!until) return std::nullopt;
  out.keep_until_unix_ms = *until;
  return out;
}

std::string DelayDir(std::string_view chroot) {
  return std::string(chroot) + "/" + std::string(kDelayDirName);
}

Result<std::string> DelayPath(std::string_view chroot, std::string_view key) {
  DLOCK_ASSIGN_OR_RETURN(const std::string name, FlatName(key));
  return DelayDir(chroot) + "/" + name;
}

std::optional<std::string> KeyOfPath(std::string_view chroot, std::string_view path) {
  if (!path.starts_with(chroot)) return std::nullopt;
  path.remove_prefix(chroot.size());
  if (path.size() < 2 || path.front() != '/') return std::nullopt;
  path.remove_prefix(1);
  std::string key;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = path.find('/', start);
    const std::string_view seg =
        path.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    auto decoded = DecodeSegment(seg);
    if (!decoded) return std::nullopt;
    if (start != 0) key += '/';
    key += *decoded;
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return key;
}

std::string GuidOf(const OwnerId& owner) {
  const std::string hex = owner.ToString();  // 32 digits
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
         hex.substr(16, 4) + "-" + hex.substr(20, 12);
}

std::string LockNodePrefix(const OwnerId& owner, std::uint32_t limit, std::uint32_t delay_ms) {
  std::string p = std::string(kProtectedPrefix) + GuidOf(owner) + "-";
  if (limit != 1) p += "n" + std::to_string(limit) + "-";
  if (delay_ms != 0) p += "d" + std::to_string(delay_ms) + "-";
  return p + std::string(kLockMarker);
}

namespace {

// "<letter><digits>-" at the front of `tag` (no leading zero, 1..2^32-1):
// the number, and the tag after it; nullopt when the tag does not start so.
std::optional<std::pair<std::uint32_t, std::string_view>> TakeField(std::string_view tag,
                                                                    char letter) {
  if (tag.size() < 3 || tag.front() != letter) return std::nullopt;
  const std::size_t dash = tag.find('-');
  if (dash == std::string_view::npos || dash < 2 || dash > 11 || tag[1] == '0') {
    return std::nullopt;
  }
  std::uint64_t n = 0;
  for (char c : tag.substr(1, dash - 1)) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (n < 1 || n > 0xFFFFFFFFu) return std::nullopt;
  return std::make_pair(static_cast<std::uint32_t>(n), tag.substr(dash + 1));
}

}  // namespace

std::optional<LockNode> ParseLockNode(std::string_view name) {
  if (name.size() < kLockMarker.size() + kSequenceDigits) return std::nullopt;
  const std::string_view digits = name.substr(name.size() - kSequenceDigits);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  if (name.substr(name.size() - kSequenceDigits - kLockMarker.size(), kLockMarker.size()) !=
      kLockMarker) {
    return std::nullopt;
  }
  LockNode node;
  node.name = std::string(name);
  node.sequence = std::stoll(std::string(digits));
  const std::size_t guid_end = kProtectedPrefix.size() + kGuidChars;
  const std::size_t marker_at = name.size() - kSequenceDigits - kLockMarker.size();
  if (name.starts_with(kProtectedPrefix) && marker_at >= guid_end + 1 && name[guid_end] == '-') {
    // Between the guid's '-' and "lock-": nothing, "n<limit>-", "d<ms>-",
    // or both in that order.
    std::string_view tag = name.substr(guid_end + 1, marker_at - guid_end - 1);
    std::uint32_t limit = 1, delay_ms = 0;
    if (auto f = TakeField(tag, 'n')) std::tie(limit, tag) = *f;
    if (auto f = TakeField(tag, 'd')) std::tie(delay_ms, tag) = *f;
    if (tag.empty()) {
      node.guid = std::string(name.substr(kProtectedPrefix.size(), kGuidChars));
      node.limit = limit;
      node.delay_ms = delay_ms;
    }
  }
  return node;
}

std::size_t HolderCount(const std::vector<LockNode>& sorted) {
  std::uint32_t limit = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    limit = std::min(limit, sorted[i].limit);
    if (i + 1 > limit) return i;
  }
  return sorted.size();
}

std::vector<LockNode> SortedContenders(const std::vector<std::string>& children) {
  std::vector<LockNode> out;
  out.reserve(children.size());
  for (const auto& c : children) {
    if (auto node = ParseLockNode(c)) out.push_back(std::move(*node));
  }
  std::sort(out.begin(), out.end(), [](const LockNode& a, const LockNode& b) {
    return a.sequence != b.sequence ? a.sequence < b.sequence : a.name < b.name;
  });
  return out;
}

OwnerId OwnerOfGuid(std::string_view guid) {
  std::string hex;
  for (char c : guid) {
    if (c != '-') hex += c;
  }
  auto owner = OwnerId::Parse(hex);
  return owner.ok() ? *owner : OwnerId();
}

}  // namespace dlock::zookeeper
