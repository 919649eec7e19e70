#include "harness/child_process.h"

#include <unistd.h>

#include <string_view>

namespace dlock::harness {

std::vector<std::string> EnvironmentWithStore(const std::string& store_uri) {
  std::vector<std::string> env = {"DLOCK_BACKEND=" + store_uri};
  for (char** e = environ; *e; ++e) {
    if (!std::string_view(*e).starts_with("DLOCK_BACKEND=")) env.emplace_back(*e);
  }
  return env;
}

std::vector<char*> NullEnded(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace dlock::harness
