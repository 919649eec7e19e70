// The keys that start with a prefix, as a half-open range [prefix, end):
// how the stores that list by key order (SQLite, PostgreSQL, MariaDB,
// etcd) find every lock under a prefix with an index's range scan.
#ifndef DLOCK_SRC_CORE_KEY_RANGE_H_
#define DLOCK_SRC_CORE_KEY_RANGE_H_

#include <optional>
#include <string>
#include <string_view>

namespace dlock::internal {

// The smallest string greater than every string that starts with `prefix`
// (compared byte by byte, unsigned), or nullopt when there is none: an
// empty prefix, or one of 0xff bytes only, whose range runs to the end.
inline std::optional<std::string> PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    const auto last = static_cast<unsigned char>(end.back());
    if (last != 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();  // "a\xff" ends where "b" starts
  }
  return std::nullopt;
}

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_KEY_RANGE_H_
