#include "backends/redis/redis_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "backends/redis/redis_conn.h"
#include "core/connect.h"
#include "core/tls_files.h"

namespace dlock::redis {

using std::chrono::milliseconds;
using internal::SteadyTime;
using internal::WaitFor;

namespace {

void SetBlocking(int fd, bool blocking) {
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, blocking ? (flags & ~O_NONBLOCK) : (flags | O_NONBLOCK));
}

// As hiredis does: no Nagle delay; keepalive probes after 15 s idle.
void TuneSocket(int fd) {
  const int one = 1, idle = 15, interval = 5, count = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

std::string OpenSslReason(unsigned long e) {
  const char* reason = ERR_reason_error_string(e);
  return reason != nullptr ? reason : "error " + std::to_string(ERR_GET_REASON(e));
}

bool IsIpAddress(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

struct CtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using CtxPtr = std::unique_ptr<SSL_CTX, CtxFree>;
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

BioPtr MemBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Every certificate in `pem` handed to `use` (first the leaf for cert=).
template <typename Use>
Status EachCert(const std::string& pem, std::string_view param, const std::string& path, Use use) {
  BioPtr bio = MemBio(pem);
  int n = 0;
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    const bool ok = use(x, n++);
    X509_free(x);
    if (!ok) {
      return InvalidArgumentError(std::string(param) + "= file '" + path +
                                  "' was refused by OpenSSL: " + OpenSslReason(ERR_get_error()));
    }
  }
  ERR_clear_error();  // the end of the file reads as an error
  if (n == 0) {
    return InvalidArgumentError(std::string(param) + "= file '" + path +
                                "' holds no PEM certificate");
  }
  return Status::Ok();
}

Status LoadClientCert(SSL_CTX* ctx, const TlsOptions& tls) {
  DLOCK_ASSIGN_OR_RETURN(std::string cert, internal::ReadTlsFile("cert", tls.cert_file));
  DLOCK_ASSIGN_OR_RETURN(std::string key, internal::ReadTlsFile("key", tls.key_file));
  DLOCK_RETURN_IF_ERROR(EachCert(cert, "cert", tls.cert_file, [&](X509* x, int i) {
    return i == 0 ? SSL_CTX_use_certificate(ctx, x) == 1 : SSL_CTX_add1_chain_cert(ctx, x) == 1;
  }));
  BioPtr bio = MemBio(key);
  EVP_PKEY* pkey = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
  if (pkey == nullptr) {
    ERR_clear_error();
    return InvalidArgumentError("key= file '" + tls.key_file +
                                "' holds no unencrypted PEM private key");
  }
  const bool used = SSL_CTX_use_PrivateKey(ctx, pkey) == 1;
  EVP_PKEY_free(pkey);
  if (!used || SSL_CTX_check_private_key(ctx) != 1) {
    ERR_clear_error();
    return InvalidArgumentError("key= file '" + tls.key_file + "' is not the key of cert= file '" +
                                tls.cert_file + "'");
  }
  return Status::Ok();
}

// A client context from the files as they are now.
Result<CtxPtr> MakeContext(const TlsOptions& tls) {
  CtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx) return InternalError("TLS: cannot create an OpenSSL context");
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  // A server that closes without close_notify has closed, not attacked.
  SSL_CTX_set_options(ctx.get(), SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_AUTO_RETRY);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  if (tls.ca_file.empty()) {
    SSL_CTX_set_default_verify_paths(ctx.get());
  } else {
    DLOCK_ASSIGN_OR_RETURN(std::string ca, internal::ReadTlsFile("cacert", tls.ca_file));
    X509_STORE* store = SSL_CTX_get_cert_store(ctx.get());
    DLOCK_RETURN_IF_ERROR(EachCert(ca, "cacert", tls.ca_file, [&](X509* x, int) {
      return X509_STORE_add_cert(store, x) == 1;
    }));
  }
  if (!tls.cert_file.empty()) DLOCK_RETURN_IF_ERROR(LoadClientCert(ctx.get(), tls));
  return ctx;
}

}  // namespace

// OpenSSL's socket BIO writes with write(2), which raises SIGPIPE on a
// closed connection; this one sends with MSG_NOSIGNAL, and reads without
// blocking when the transport asks.
struct TransportBio {
  static Transport* Of(BIO* b) { return static_cast<Transport*>(BIO_get_data(b)); }
  static int Write(BIO* b, const char* data, int len) {
    BIO_clear_retry_flags(b);
    ssize_t n;
    do {
      n = send(Of(b)->fd_, data, static_cast<std::size_t>(len), MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_write(b);
    return static_cast<int>(n);
  }
  static int Read(BIO* b, char* data, int len) {
    BIO_clear_retry_flags(b);
    const int flags = Of(b)->nonblocking_read_ ? MSG_DONTWAIT : 0;
    ssize_t n;
    do {
      n = recv(Of(b)->fd_, data, static_cast<std::size_t>(len), flags);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_read(b);
    return static_cast<int>(n);
  }
  static long Ctrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }
  static int Create(BIO* b) {
    BIO_set_init(b, 1);
    return 1;
  }
  static const BIO_METHOD* Method() {
    static BIO_METHOD* const m = [] {
      BIO_METHOD* method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "dlock redis");
      BIO_meth_set_write(method, Write);
      BIO_meth_set_read(method, Read);
      BIO_meth_set_ctrl(method, Ctrl);
      BIO_meth_set_create(method, Create);
      return method;
    }();
    return m;
  }
};

Transport::Transport(int fd, std::string server)
    : fd_(fd), server_(std::move(server)), reader_(redisReaderCreate()) {}

Transport::~Transport() {
  if (ssl_ != nullptr) SSL_free(ssl_);
  if (reader_ != nullptr) redisReaderFree(reader_);
  if (fd_ >= 0) close(fd_);
}

Result<std::unique_ptr<Transport>> Transport::Open(const Endpoint& endpoint, const TlsOptions& tls,
                                                   milliseconds timeout, std::string_view what) {
  const SteadyTime deadline = std::chrono::steady_clock::now() + timeout;
  const std::string server = endpoint.Text();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int gai = getaddrinfo(endpoint.host.c_str(), std::to_string(endpoint.port).c_str(),
                              &hints, &found);
  if (gai != 0) {
    return UnavailableError(std::string(what) + ": Redis at " + server +
                            ": cannot resolve the host name: " + gai_strerror(gai));
  }
  int fd = -1, err = 0;
  for (const addrinfo* ai = found; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = internal::ConnectBefore(ai, deadline);
    if (fd < 0 && err != ECONNREFUSED) err = errno;  // a refusal says the most
  }
  freeaddrinfo(found);
  if (fd < 0) {
    Failure f;
    f.context_err = REDIS_ERR_IO;
    f.saved_errno = err;
    f.timeout = timeout;
    return FromRedis(f, server, what);
  }
  SetBlocking(fd, true);
  TuneSocket(fd);
  std::unique_ptr<Transport> t(new Transport(fd, server));
  if (tls.enabled) DLOCK_RETURN_IF_ERROR(t->Handshake(endpoint, tls, deadline, what));
  return t;
}

Status Transport::Handshake(const Endpoint& endpoint, const TlsOptions& tls, SteadyTime deadline,
                            std::string_view what) {
  DLOCK_ASSIGN_OR_RETURN(CtxPtr ctx, MakeContext(tls));
  host_ = endpoint.host;
  ssl_ = SSL_new(ctx.get());  // holds its own reference to ctx
  BIO* bio = BIO_new(TransportBio::Method());
  BIO_set_data(bio, this);
  SSL_set_bio(ssl_, bio, bio);
  SSL_set_msg_callback(ssl_, [](int write_p, int, int content_type, const void* buf,
                                std::size_t len, SSL*, void* arg) {
    if (!write_p && content_type == SSL3_RT_HANDSHAKE && len > 0 &&
        static_cast<const unsigned char*>(buf)[0] == SSL3_MT_CERTIFICATE_REQUEST) {
      static_cast<Transport*>(arg)->NoteCertRequest();
    }
  });
  SSL_set_msg_callback_arg(ssl_, this);
  if (IsIpAddress(endpoint.host)) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), endpoint.host.c_str());
  } else {
    SSL_set1_host(ssl_, endpoint.host.c_str());
    SSL_set_tlsext_host_name(ssl_, endpoint.host.c_str());
  }
  SetBlocking(fd_, false);
  for (;;) {
    ERR_clear_error();
    const int r = SSL_connect(ssl_);
    if (r == 1) break;
    const int e = SSL_get_error(ssl_, r);
    const int saved = errno;
    const bool want_read = e == SSL_ERROR_WANT_READ;
    if ((want_read || e == SSL_ERROR_WANT_WRITE) &&
        WaitFor(fd_, want_read ? POLLIN : POLLOUT, deadline)) {
      continue;
    }
    if (want_read || e == SSL_ERROR_WANT_WRITE) {
      failure_ = Failure{};
      failure_.not_tls = true;
      failure_.text = "did not complete the TLS handshake within the connect timeout (paused, "
                      "overloaded, or not a TLS port?)";
    } else {
      FailTls(e, saved, /*handshake=*/true);
    }
    failure_.timeout = milliseconds(0);
    return FromRedis(failure_, server_, what);
  }
  DLOCK_RETURN_IF_ERROR(AwaitVerdict(deadline, what));
  SetBlocking(fd_, true);
  return Status::Ok();
}

// TLS 1.3 ends the client's handshake before the server has checked the
// client's certificate; the server then sends either session tickets or
// an alert (and closes). Reading that now names a refused certificate as
// such, where the first command would only see a reset connection. A
// server that sends no tickets costs kVerdictWait on each connect.
Status Transport::AwaitVerdict(SteadyTime deadline, std::string_view what) {
  constexpr milliseconds kVerdictWait{250};
  if (!cert_requested_ || SSL_version(ssl_) < TLS1_3_VERSION) return Status::Ok();
  if (!WaitFor(fd_, POLLIN, std::min(deadline, std::chrono::steady_clock::now() + kVerdictWait))) {
    return Status::Ok();
  }
  char c;
  ERR_clear_error();
  const int n = SSL_peek(ssl_, &c, 1);
  if (n > 0) return Status::Ok();
  const int e = SSL_get_error(ssl_, n);
  if (e == SSL_ERROR_WANT_READ) return Status::Ok();
  FailTls(e, errno, /*handshake=*/true);
  if (!failure_.tls_refused) {
    failure_.tls_refused = true;
    failure_.text = "the server closed the connection after the TLS handshake: it refused this "
                    "client's certificate (none, expired, or from a CA it does not trust)";
  }
  return FromRedis(failure_, server_, what);
}

void Transport::FailIo(int err, std::string text) {
  failure_ = Failure{};
  failure_.context_err = err == 0 ? REDIS_ERR_EOF : REDIS_ERR_IO;
  failure_.saved_errno = err;
  failure_.text = std::move(text);
  failure_.timeout = timeout_;
  failure_.partial_reply = reader_->ridx >= 0 || reader_->pos < reader_->len;
}

// A failed SSL call: its SSL_get_error `ssl_result`, errno after it.
void Transport::FailTls(int ssl_result, int err, bool handshake) {
  const unsigned long e = ERR_peek_last_error();
  const int reason = ERR_GET_REASON(e);
  ERR_clear_error();
  switch (ssl_result) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
      return FailIo(EAGAIN, "");  // the socket's timeout
    case SSL_ERROR_ZERO_RETURN:
      return FailIo(0, "");
    case SSL_ERROR_SYSCALL:
      if (e == 0) return FailIo(err, "");
      break;
    default:
      break;
  }
  FailIo(EPROTO, "");
  const long verify = SSL_get_verify_result(ssl_);
  if (handshake && verify != X509_V_OK) {
    failure_.tls_refused = true;
    failure_.text = "the server's certificate for " + host_ + " did not verify: " +
                    std::string(X509_verify_cert_error_string(verify));
  } else if (handshake && (reason == SSL_R_WRONG_VERSION_NUMBER ||
                           reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
                           reason == SSL_R_UNKNOWN_PROTOCOL || reason == SSL_R_HTTP_REQUEST)) {
    failure_.not_tls = true;
    failure_.text = "did not speak TLS (" + OpenSslReason(e) +
                    "): a plaintext port? rediss:// needs the server's tls-port";
  } else if (reason >= SSL_AD_REASON_OFFSET || handshake) {
    // An alert from the server: it refused this client (no, expired or
    // untrusted certificate; TLS 1.3 says so after the handshake).
    failure_.tls_refused = true;
    failure_.text = "the server refused the TLS session: " + OpenSslReason(e);
  } else {
    failure_.text = "TLS: " + OpenSslReason(e);
  }
}

void Transport::SetTimeout(milliseconds timeout) {
  timeout_ = timeout;
  const timeval tv = ToTimeval(timeout);
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

void Transport::Append(const Command& command) {
  std::vector<const char*> argv;
  std::vector<std::size_t> len;
  argv.reserve(command.size());
  len.reserve(command.size());
  for (const std::string& arg : command) {
    argv.push_back(arg.data());
    len.push_back(arg.size());
  }
  char* formatted = nullptr;
  const int n = redisFormatCommandArgv(&formatted, static_cast<int>(argv.size()), argv.data(),
                                       len.data());
  if (n > 0) out_.append(formatted, static_cast<std::size_t>(n));
  redisFreeCommand(formatted);
}

bool Transport::Flush() {
  std::size_t done = 0;
  while (done < out_.size()) {
    const std::size_t left = out_.size() - done;
    if (ssl_ != nullptr) {
      ERR_clear_error();
      const int n = SSL_write(ssl_, out_.data() + done, static_cast<int>(left));
      if (n <= 0) {
        const int e = SSL_get_error(ssl_, n);
        FailTls(e, errno, false);
        out_.clear();
        return false;
      }
      done += static_cast<std::size_t>(n);
      continue;
    }
    const ssize_t n = send(fd_, out_.data() + done, left, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      FailIo(errno, "");
      out_.clear();
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  out_.clear();
  return true;
}

int Transport::ReadOnce(bool nonblocking) {
  char buf[16 * 1024];
  int n;
  if (ssl_ != nullptr) {
    nonblocking_read_ = nonblocking;
    ERR_clear_error();
    n = SSL_read(ssl_, buf, sizeof buf);
    nonblocking_read_ = false;
    if (n <= 0) {
      const int e = SSL_get_error(ssl_, n);
      if (nonblocking && e == SSL_ERROR_WANT_READ) return 0;
      FailTls(e, errno, false);
      return -1;
    }
  } else {
    ssize_t r;
    do {
      r = recv(fd_, buf, sizeof buf, nonblocking ? MSG_DONTWAIT : 0);
    } while (r < 0 && errno == EINTR);
    if (r < 0 && nonblocking && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (r <= 0) {
      FailIo(r == 0 ? 0 : errno, "");
      return -1;
    }
    n = static_cast<int>(r);
  }
  redisReaderFeed(reader_, buf, static_cast<std::size_t>(n));
  return 1;
}

bool Transport::NextReply(ReplyPtr* out) {
  void* raw = nullptr;
  if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
    failure_ = Failure{};
    failure_.context_err = REDIS_ERR_PROTOCOL;
    failure_.text = reader_->errstr;
    return false;
  }
  out->reset(static_cast<redisReply*>(raw));
  return true;
}

bool Transport::Get(ReplyPtr* out) {
  for (;;) {
    if (!NextReply(out)) return false;
    if (*out != nullptr) return true;
    if (ReadOnce(false) < 0) return false;
  }
}

bool Transport::ReadAvailable(std::vector<ReplyPtr>* out) {
  for (;;) {
    const int r = ReadOnce(true);
    if (r < 0) return false;
    for (;;) {
      ReplyPtr reply;
      if (!NextReply(&reply)) return false;
      if (reply == nullptr) break;
      out->push_back(std::move(reply));
    }
    // TLS may hold decrypted bytes the socket no longer shows.
    if (r == 0 || ssl_ == nullptr || SSL_pending(ssl_) == 0) return true;
  }
}

bool Transport::PeerClosed() {
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, 0) == 0) return false;
  if (ssl_ == nullptr) return true;
  // TLS 1.3 servers send session tickets unasked: only data or an end count.
  char c;
  nonblocking_read_ = true;
  ERR_clear_error();
  const int n = SSL_peek(ssl_, &c, 1);
  nonblocking_read_ = false;
  if (n > 0) return true;
  const bool idle = SSL_get_error(ssl_, n) == SSL_ERROR_WANT_READ;
  ERR_clear_error();
  return !idle;
}

}  // namespace dlock::redis
