#include "dlock/types.h"

#include <cstdio>

#include "core/duration.h"

namespace dlock {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Status ValidateRetention(std::chrono::milliseconds keep) {
  if (keep == kKeepDoneForever || (keep > std::chrono::milliseconds(0) && keep <= kMaxRetention)) {
    return Status::Ok();
  }
  return InvalidArgumentError("a record's retention of " + std::to_string(keep.count()) +
                              " ms: accepted: 1 ms to 10 years, or for ever (kKeepDoneForever)");
}

Result<OwnerId> OwnerId::Parse(std::string_view hex) {
  if (hex.size() != 32) {
    return InvalidArgumentError("owner id must be 32 hex digits, got " +
                                std::to_string(hex.size()) + " characters");
  }
  std::uint64_t half[2] = {0, 0};
  for (std::size_t i = 0; i < 32; ++i) {
    int v = HexValue(hex[i]);
    if (v < 0) return InvalidArgumentError("owner id must be 32 hex digits");
    half[i / 16] = (half[i / 16] << 4) | static_cast<std::uint64_t>(v);
  }
  return OwnerId(half[0], half[1]);
}

std::string OwnerId::ToString() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx",
                static_cast<unsigned long long>(hi_),
                static_cast<unsigned long long>(lo_));
  return std::string(buf, 32);
}

Status ValidateKey(std::string_view key) {
  if (key.empty()) {
    return InvalidArgumentError("key is empty: a key is 1 to 1024 bytes, any byte but NUL");
  }
  if (key.size() > kMaxKeyBytes) {
    return InvalidArgumentError("key is " + std::to_string(key.size()) +
                                " bytes: a key is at most 1024 bytes");
  }
  if (key.find('\0') != std::string_view::npos) {
    return InvalidArgumentError("key contains a NUL byte: a key is 1 to 1024 bytes, any byte but NUL");
  }
  return Status::Ok();
}

Status ValidateTtl(std::chrono::milliseconds ttl) {
  if (ttl < kMinTtl || ttl > kMaxTtl) {
    return InvalidArgumentError("ttl " + internal::FormatDuration(ttl) +
                                " is out of range: a ttl is 10ms to 24h");
  }
  return Status::Ok();
}

Status ValidateLabel(std::string_view label) {
  if (label.size() > kMaxLabelBytes) {
    return InvalidArgumentError("label is " + std::to_string(label.size()) +
                                " bytes: a label is at most 256 bytes of printable text");
  }
  for (unsigned char c : label) {
    if (c < 0x20 || c == 0x7f) {
      return InvalidArgumentError(
          "label contains a control character: a label is printable text (UTF-8 allowed)");
    }
  }
  return Status::Ok();
}

}  // namespace dlock
