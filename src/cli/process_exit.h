// How the `dlock` process ends once main's work is done.
#pragma once

namespace dlock::cli {

// Ends the process with `code` without running the exit handlers and
// static destructors of the libraries it links. Call it once everything
// main made has been destroyed: output is flushed here, and under
// LeakSanitizer its check runs here, as it would at exit.
//
// Why: gRPC (dlock-full's etcd client) keeps threads of its own that the
// program cannot stop — a channel reconnecting, a TLS handshake — and
// OpenSSL's exit handler frees the locks such a thread still takes.
// dlock-full crashed at exit now and then after etcd refused its
// certificate (SIGSEGV in RAND_get_rand_method, on a busy machine).
// OpenSSL would skip its handler if asked before its first initialisation,
// but libraries linked here initialise it while they load, before main.
[[noreturn]] void ExitSkippingLibraryCleanUp(int code);

}  // namespace dlock::cli
