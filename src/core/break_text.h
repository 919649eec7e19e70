// A break record (types.h) as one text, for stores that keep it as an
// opaque value (etcd's value, ZooKeeper's node data): five lines, owner,
// token, break token, who broke it, label. Labels and `by` hold no line
// breaks (ValidateLabel), so the label, last, is the rest of the text.
#ifndef DLOCK_SRC_CORE_BREAK_TEXT_H_
#define DLOCK_SRC_CORE_BREAK_TEXT_H_

#include <string>
#include <string_view>

#include "dlock/types.h"

namespace dlock::internal {

std::string EncodeBreakText(const BreakRecord& record);
// Fills owner, token, break_token, by and label; false (and `out` partly
// filled) when `text` is not what EncodeBreakText writes.
bool DecodeBreakText(std::string_view text, BreakRecord* out);

}  // namespace dlock::internal

#endif  // DLOCK_SRC_CORE_BREAK_TEXT_H_
