#include "backends/redis/redis_slots.h"

#include <array>
#include <vector>

#include "backends/redis/redis_keys.h"

namespace dlock::redis {
namespace {

constexpr std::array<std::uint16_t, 256> MakeCrcTable() {
  std::array<std::uint16_t, 256> table{};
  for (unsigned byte = 0; byte < 256; ++byte) {
    auto crc = static_cast<std::uint16_t>(byte << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = static_cast<std::uint16_t>((crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    table[byte] = crc;
  }
  return table;
}

constexpr std::array<std::uint16_t, 256> kCrcTable = MakeCrcTable();

std::uint16_t CrcStep(std::uint16_t crc, char c) {
  const auto index = static_cast<std::uint8_t>((crc >> 8) ^ static_cast<std::uint8_t>(c));
  return static_cast<std::uint16_t>((crc << 8) ^ kCrcTable[index]);
}

std::uint16_t Crc16(std::string_view bytes) {
  std::uint16_t crc = 0;
  for (const char c : bytes) crc = CrcStep(crc, c);
  return crc;
}

// Every slot's tag, found once, at a process's first grant: about 216,000
// candidates, each one CRC step from the candidate with its last digit
// cut. (Hashing each candidate whole, in a string of its own, took 17-62
// ms on a loaded 2-core machine against 1.7-23 ms this way.)
std::vector<std::string> MakeSlotTags() {
  const std::uint16_t prefix = Crc16("%s");
  std::vector<std::uint16_t> crc_of;  // CRC16 of "%s<n>", by n
  std::vector<std::string> tags(kSlotCount);
  std::size_t found = 0;
  for (std::uint64_t n = 0; found < kSlotCount; ++n) {
    const char digit = static_cast<char>('0' + n % 10);
    crc_of.push_back(CrcStep(n < 10 ? prefix : crc_of[n / 10], digit));
    std::string& slot = tags[crc_of.back() % kSlotCount];
    if (slot.empty()) {
      slot = "%s" + std::to_string(n);
      ++found;
    }
  }
  return tags;
}

}  // namespace

std::uint16_t HashSlot(std::string_view name) {
  const std::size_t open = name.find('{');
  if (open != std::string_view::npos) {
    const std::size_t close = name.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      name = name.substr(open + 1, close - open - 1);
    }
  }
  return static_cast<std::uint16_t>(Crc16(name) % kSlotCount);
}

const std::string& SlotTag(std::uint16_t slot) {
  static const std::vector<std::string> tags = MakeSlotTags();
  return tags[slot % kSlotCount];
}

std::string SlotCounterName(std::string_view key) {
  return SlotCounterNameOfEscaped(EscapeKey(key));
}

std::string SlotCounterNameOfEscaped(std::string_view escaped) {
  return "dlock:{" + SlotTag(HashSlot(escaped)) + "}:tokens";
}

}  // namespace dlock::redis
