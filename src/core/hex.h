// Lower-case hex of arbitrary bytes, and back: how the SQL stores keep a
// lock name of any bytes in a text or bytea value (PostgreSQL, MariaDB).
#ifndef DLOCK_SRC_CORE_HEX_H_
#define DLOCK_SRC_CORE_HEX_H_

#include <string>
#include <string_view>

namespace dlock::internal {

// Two lower-case hex digits per byte.
std::string HexEncode(std::string_view bytes);

// The bytes of `hex` (either case) in *out; false, with *out unspecified,
// when `hex` has an odd length or a character that is not a hex digit.
bool HexDecode(std::string_view hex, std::string* out);

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_HEX_H_
