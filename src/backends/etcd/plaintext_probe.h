// Whether a server answers HTTP/2 in plaintext. gRPC reports a plaintext
// etcd that resets a TLS client's hello exactly as it reports a TLS etcd
// that refuses the client's certificate (a reset in the handshake); which
// one it was decides the error and its exit code, so dlock asks the server.
#ifndef DLOCK_BACKENDS_ETCD_PLAINTEXT_PROBE_H_
#define DLOCK_BACKENDS_ETCD_PLAINTEXT_PROBE_H_

#include <chrono>
#include <string>

namespace dlock::etcd {

// Connects to `address` ("host:port", "[v6]:port"), sends the HTTP/2
// client preface and an empty SETTINGS frame, and says whether a SETTINGS
// frame came back within `timeout`. False for anything else: a TLS server,
// a close, no answer, an address that does not resolve.
bool AnswersPlaintextHttp2(const std::string& address, std::chrono::milliseconds timeout);

}  // namespace dlock::etcd

#endif  // DLOCK_BACKENDS_ETCD_PLAINTEXT_PROBE_H_
