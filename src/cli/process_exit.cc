#include "cli/process_exit.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DLOCK_LEAK_CHECK_AT_EXIT 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define DLOCK_LEAK_CHECK_AT_EXIT 1
#endif
#ifdef DLOCK_LEAK_CHECK_AT_EXIT
#include <sanitizer/lsan_interface.h>
#endif

namespace dlock::cli {

void ExitSkippingLibraryCleanUp(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
#ifdef DLOCK_LEAK_CHECK_AT_EXIT
  __lsan_do_leak_check();  // exits with LeakSanitizer's code if it finds a leak
#endif
  std::_Exit(code);
}

}  // namespace dlock::cli
