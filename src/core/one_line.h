// A server's or a client library's message on one line, as it reads best
// inside a Status: libpq's and Connector/C's texts end in a newline and may
// span lines ("...failed: ...\n\tIs the server running...").
#ifndef DLOCK_SRC_CORE_ONE_LINE_H_
#define DLOCK_SRC_CORE_ONE_LINE_H_

#include <string>
#include <string_view>

namespace dlock::internal {

// Each line break becomes "; ", tabs and carriage returns are dropped, and
// so are trailing spaces and semicolons.
std::string OnOneLine(std::string_view text);

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_ONE_LINE_H_
