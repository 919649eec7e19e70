#include "cli/descriptors.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>

namespace dlock::cli {
namespace {

// Fixed storage: CloseDescriptorsNotInherited runs after fork in a process
// with threads, where nothing may allocate. More inherited descriptors than
// this are not kept open for the command.
constexpr std::size_t kMaxInherited = 64;
std::array<int, kMaxInherited> inherited;
std::size_t inherited_count = 0;

}  // namespace

void RememberInheritedDescriptors() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return;  // no /proc: the command inherits only 0-2
  const int own = ::dirfd(dir);
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd <= 2 || fd == own) continue;
    if (inherited_count < kMaxInherited) inherited[inherited_count++] = static_cast<int>(fd);
  }
  ::closedir(dir);
  std::sort(inherited.begin(), inherited.begin() + inherited_count);
}

void CloseDescriptorsNotInherited() {
  unsigned int from = 3;
  for (std::size_t i = 0; i < inherited_count; ++i) {
    const auto keep = static_cast<unsigned int>(inherited[i]);
    if (keep > from) ::close_range(from, keep - 1, 0);
    from = keep + 1;
  }
  ::close_range(from, ~0U, 0);
}

}  // namespace dlock::cli
