#include "sql_bench_setup.h"

#include <stdlib.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string_view>

#include "cycle_and_handoff.h"

namespace dlock::bench {

Flags ParseFlags(int argc, char** argv, const char* usage, Flags defaults) {
  Flags flags = std::move(defaults);
  const bool takes_keys = flags.keys != 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << usage << '\n';
      std::exit(0);
    }
    int* count = arg == "--iterations"           ? &flags.iterations
                 : arg == "--seconds"            ? &flags.seconds
                 : arg == "--contenders"         ? &flags.contenders
                 : arg == "--keys" && takes_keys ? &flags.keys
                                                 : nullptr;
    std::string* text = arg == "--uri" ? &flags.uri : arg == "--json" ? &flags.json_path : nullptr;
    if (count == nullptr && text == nullptr) {
      Die("unknown argument '" + std::string(arg) + "'; " + usage, kExitUsage);
    }
    if (i + 1 >= argc) Die(std::string(arg) + " needs a value; " + usage, kExitUsage);
    const std::string value = argv[++i];
    if (text != nullptr) {
      *text = value;
      continue;
    }
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), *count);
    if (ec != std::errc() || end != value.data() + value.size() || *count < 1) {
      Die(std::string(arg) + " wants a positive integer, got '" + value + "'", kExitUsage);
    }
  }
  if (flags.contenders < 2) Die("--contenders wants at least 2", kExitUsage);
  return flags;
}

std::string StartOwnServer(const std::string& store) {
  std::string tmpl = "/tmp/dlock-bench-" + store + ".XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) Die(std::string("mkdtemp: ") + std::strerror(errno));
  // For the exit handler, which takes no arguments: one server a program.
  static std::string dir, script;
  dir = tmpl + "/server";
  script = std::string(DLOCK_SOURCE_DIR) + "/scripts/servers/" + store + ".sh";
  // Before the start: a server that half started is stopped too.
  std::atexit([] {
    const std::string stop = "bash '" + script + "' stop '" + dir + "' >/dev/null 2>&1";
    (void)std::system(stop.c_str());
    std::error_code ignored;
    std::filesystem::remove_all(std::filesystem::path(dir).parent_path(), ignored);
  });
  const std::string start = "bash '" + script + "' start '" + dir + "' >/dev/null";
  if (std::system(start.c_str()) != 0) Die("could not start a server with " + script);
  std::ifstream in(dir + "/uri");
  std::string uri;
  std::getline(in, uri);
  if (uri.empty()) Die("the server script wrote no URI to " + dir + "/uri");
  return uri;
}

}  // namespace dlock::bench
