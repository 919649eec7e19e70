#include "bench_flags.h"

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <iostream>

namespace dlock::bench {
namespace {

constexpr int kExitUsage = 64;

[[noreturn]] void Refuse(const std::string& what, std::string_view usage) {
  std::cerr << program_invocation_short_name << ": " << what << '\n' << usage << '\n';
  std::exit(kExitUsage);
}

const BenchFlag* Find(std::initializer_list<BenchFlag> flags, std::string_view name) {
  for (const BenchFlag& f : flags) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

void SetCount(std::string_view name, const std::string& value, int* target,
              std::string_view usage) {
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), *target);
  if (ec != std::errc() || end != value.data() + value.size() || *target < 1) {
    Refuse(std::string(name) + " wants a positive integer, got '" + value + "'", usage);
  }
}

}  // namespace

void ParseBenchFlags(int argc, char** argv, std::string_view usage,
                     std::initializer_list<BenchFlag> flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << usage << '\n';
      std::exit(0);
    }
    const BenchFlag* flag = Find(flags, arg);
    if (flag == nullptr) Refuse("unknown argument '" + std::string(arg) + "'", usage);
    if (const SetTo* set = std::get_if<SetTo>(&flag->target)) {
      *set->target = set->value;
      continue;
    }
    if (i + 1 >= argc) Refuse(std::string(arg) + " needs a value", usage);
    const std::string value = argv[++i];
    if (std::string* const* text = std::get_if<std::string*>(&flag->target)) {
      **text = value;
    } else {
      SetCount(arg, value, std::get<int*>(flag->target), usage);
    }
  }
}

}  // namespace dlock::bench
