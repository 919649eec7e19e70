#pragma once

namespace dlock::internal {

// Links src/core/leak_suppressions.cc, which tells LeakSanitizer about the
// client libraries' own leaks. A store whose library leaks calls it once:
// from a static archive the linker takes only the objects something uses,
// and the sanitizer's hooks are found by name, never called from dlock.
// Does nothing at run time.
void UseLeakSuppressions();

}  // namespace dlock::internal
