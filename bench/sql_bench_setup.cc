#include "sql_bench_setup.h"

#include <stdlib.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string_view>

#include "bench_flags.h"
#include "cycle_and_handoff.h"

namespace dlock::bench {

Flags ParseFlags(int argc, char** argv, const char* usage, Flags defaults) {
  Flags flags = std::move(defaults);
  if (flags.keys != 0) {
    ParseBenchFlags(argc, argv, usage,
                    {{"--iterations", &flags.iterations},
                     {"--seconds", &flags.seconds},
                     {"--contenders", &flags.contenders},
                     {"--keys", &flags.keys},
                     {"--uri", &flags.uri},
                     {"--json", &flags.json_path}});
  } else {
    ParseBenchFlags(argc, argv, usage,
                    {{"--iterations", &flags.iterations},
                     {"--seconds", &flags.seconds},
                     {"--contenders", &flags.contenders},
                     {"--uri", &flags.uri},
                     {"--json", &flags.json_path}});
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
