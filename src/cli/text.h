// Text that dlock prints for people: keys, owners and labels come from
// other users and may hold anything, so a terminal must never take them as
// commands (an escape sequence that retitles the window, a carriage return
// that fakes a row).
#ifndef DLOCK_SRC_CLI_TEXT_H_
#define DLOCK_SRC_CLI_TEXT_H_

#include <string>
#include <string_view>

namespace dlock::cli {

// `text` with every control character (C0, DEL, C1) and every byte that is
// not valid UTF-8 written as \xNN; a backslash is doubled, so the escaped
// form is unambiguous. Printable UTF-8 passes unchanged.
std::string Printable(std::string_view text);

// 'text'. Not escaped: what prints a message (Fail) escapes it whole.
std::string Quoted(std::string_view text);

}  // namespace dlock::cli

#endif  // DLOCK_SRC_CLI_TEXT_H_
