#include "dlock/version.h"

namespace dlock {

std::string_view Version() { return DLOCK_VERSION_STRING; }

}  // namespace dlock
