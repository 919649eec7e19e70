// The byte stream under a Redis Connection: a TCP socket, plain or TLS
// (OpenSSL), with hiredis's reply reader and command formatter on top.
// Debian's hiredis 0.14 has no TLS, but its reader and formatter work on
// any bytes, so both kinds of stream share this one code path.
//
// TLS: the server's certificate must chain to cacert= (else the system's
// trust store) and name the host dlock connected to (DNS name, or IP
// address for a literal); cert=/key= are presented when given. The files
// are read at each connect, so a rotated certificate is used at the next
// reconnect. Nothing falls back to plaintext.
//
// Thread-safety: one thread at a time.
#ifndef DLOCK_SRC_BACKENDS_REDIS_REDIS_TRANSPORT_H_
#define DLOCK_SRC_BACKENDS_REDIS_REDIS_TRANSPORT_H_

#include <hiredis/hiredis.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/status.h"

typedef struct ssl_st SSL;

namespace dlock::redis {

struct ReplyFree {
  void operator()(redisReply* r) const {
    if (r != nullptr) freeReplyObject(r);
  }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyFree>;

// One command, one argument per element (binary safe).
using Command = std::vector<std::string>;

// What went wrong on one call, as the stream or the server reported it.
struct Failure {
  int context_err = 0;         // REDIS_ERR_IO, _EOF, _PROTOCOL; 0 for an error reply
  int saved_errno = 0;         // errno right after the failing call
  std::string text;            // the error reply, or what was odd
  bool error_reply = false;    // the server answered with an error
  bool odd_reply = false;      // the server answered, not what a script returns
  bool partial_reply = false;  // the connection broke inside a reply
  bool tls_refused = false;    // a certificate was not accepted (either side)
  bool not_tls = false;        // rediss:// to a server that does not speak TLS
  std::chrono::milliseconds timeout{0};  // the read timeout in force
};

struct Endpoint {
  std::string host;
  int port = 6379;
  std::string Text() const;  // host:port, [v6]:port
};

// The TLS files of a rediss:// URI (core/tls_files.h): paths, read at
// connect time.
struct TlsOptions {
  bool enabled = false;
  std::string ca_file;  // empty: the system's trust store
  std::string cert_file;
  std::string key_file;
};

class Transport {
 public:
  // Connects within `timeout` (each address of the host in turn), and for
  // TLS completes the handshake within what is left of it. Errors are
  // dlock Statuses (FromRedis) naming `what`.
  static Result<std::unique_ptr<Transport>> Open(const Endpoint& endpoint,
                                                 const TlsOptions& tls,
                                                 std::chrono::milliseconds timeout,
                                                 std::string_view what);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // The send and receive timeout for the calls below.
  void SetTimeout(std::chrono::milliseconds timeout);
  // Queues one command (no I/O).
  void Append(const Command& command);
  // Writes everything queued; false on failure (failure() says why).
  bool Flush();
  // The next reply, reading as needed; false on failure.
  bool Get(ReplyPtr* out);
  // Reads what has arrived without blocking (after poll() said readable)
  // and returns every whole reply; false on failure.
  bool ReadAvailable(std::vector<ReplyPtr>* out);
  // Whether the server closed the connection or sent something unasked
  // (bytes or EOF waiting, beyond TLS's own session messages).
  bool PeerClosed();

  int fd() const { return fd_; }
  bool tls() const { return ssl_ != nullptr; }
  const Failure& failure() const { return failure_; }
  // For OpenSSL's message callback: the server asked for a certificate.
  void NoteCertRequest() { cert_requested_ = true; }

 private:
  Transport(int fd, std::string server);

  // One read into the reply reader: 1 bytes, 0 nothing yet (nonblocking
  // only), -1 failure.
  int ReadOnce(bool nonblocking);
  // A whole reply the reader already holds, into *out (null if none yet);
  // false when the bytes are not Redis protocol.
  bool NextReply(ReplyPtr* out);
  Status AwaitVerdict(std::chrono::steady_clock::time_point deadline, std::string_view what);
  void FailIo(int err, std::string text);
  void FailTls(int ssl_result, int err, bool handshake);
  Status Handshake(const Endpoint& endpoint, const TlsOptions& tls,
                   std::chrono::steady_clock::time_point deadline, std::string_view what);

  int fd_ = -1;
  std::string server_;
  std::string host_;  // the name the server's certificate must carry
  SSL* ssl_ = nullptr;
  redisReader* reader_ = nullptr;
  std::string out_;
  std::chrono::milliseconds timeout_{0};
  Failure failure_;
  // Read by the socket layer under TLS: recv without blocking.
  bool nonblocking_read_ = false;
  bool cert_requested_ = false;  // the server asked for a client certificate

  friend struct TransportBio;
};

}  // namespace dlock::redis

#endif  // DLOCK_SRC_BACKENDS_REDIS_REDIS_TRANSPORT_H_
