#include "core/leak_suppressions.h"

namespace dlock::internal {

void UseLeakSuppressions() {}

}  // namespace dlock::internal

#if defined(__SANITIZE_ADDRESS__)
// Under AddressSanitizer, LeakSanitizer reports at exit what Debian's client
// libraries keep or lose on their own; one list here, since the runtime
// takes one definition per program. Quietly: a command's stderr is one line.
// Default visibility: the runtime finds these by name, and libdlock hides
// its symbols (docs/install.md).
extern "C" [[gnu::visibility("default")]] const char* __lsan_default_suppressions() {
  // etcd: gRPC resolves host names (etcds:// URIs name "localhost", the
  // certificate's name) with c-ares, which keeps a few bytes for the life
  // of the process; dlock never shuts gRPC down (KeepGrpcInitialized).
  return "leak:libcares.so\n"
         // ZooKeeper: zookeeper_close drops the replies it makes up for
         // requests still in flight (ZOOKEEPER-3868, unfixed in Debian's
         // 3.8): closing a session that expired under a paused holder
         // leaks them, whatever the caller does.
         "leak:libzookeeper_mt.so\n";
}
extern "C" [[gnu::visibility("default")]] const char* __lsan_default_options() {
  return "print_suppressions=0";
}
#endif
