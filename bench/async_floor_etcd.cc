// etcd's pipelined-write floor (async_floor.h): single-key Puts on one gRPC
// channel to the URI's first member, kMaxBatch of them in flight at once
// (as many as one of dlock's batches, core/call_batcher.h), each new one
// sent as one is answered. Each Put is one Raft-replicated write of a key no
// lock uses, as a grant's transaction is; the keys are deleted after.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

#include "async_floor.h"
#include "backends/etcd/etcd_keys.h"
#include "core/call_batcher.h"
#include "core/uri.h"
#include "rpc.grpc.pb.h"

namespace dlock::bench {
namespace {

namespace pb = ::etcdserverpb;

// Keeps `in_flight` Puts going until `total` were answered.
class PutPipeline {
 public:
  PutPipeline(pb::KV::Stub& kv, std::string prefix, int total)
      : kv_(kv), prefix_(std::move(prefix)), total_(total) {}

  // False when a Put failed.
  bool Run(int in_flight) {
    for (int i = 0; i < in_flight; ++i) {
      int n;
      {
        std::lock_guard l(mu_);
        if (sent_ == total_) break;
        n = sent_++;
      }
      Send(n);
    }
    std::unique_lock l(mu_);
    done_.wait(l, [&] { return answered_ == sent_; });
    return !failed_;
  }

 private:
  struct Call {
    grpc::ClientContext context;
    pb::PutRequest request;
    pb::PutResponse response;
  };

  void Send(int n) {
    auto* call = new Call;
    call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    call->request.set_key(prefix_ + std::to_string(n));
    call->request.set_value("floor");
    kv_.async()->Put(&call->context, &call->request, &call->response,
                     [this, call](const grpc::Status& status) { Answered(call, status.ok()); });
  }

  // On a gRPC thread. Once the last answer is in, Run may return and this
  // object end: nothing of it is touched after that notification.
  void Answered(Call* call, bool ok) {
    delete call;
    int next = -1;
    {
      std::lock_guard l(mu_);
      ++answered_;
      failed_ = failed_ || !ok;
      if (sent_ < total_ && !failed_) next = sent_++;
      if (next < 0 && answered_ == sent_) done_.notify_all();
    }
    if (next >= 0) Send(next);
  }

  pb::KV::Stub& kv_;
  const std::string prefix_;
  const int total_;
  std::mutex mu_;
  std::condition_variable done_;
  int sent_ = 0;
  int answered_ = 0;
  bool failed_ = false;
};

}  // namespace

// Plaintext etcd:// only (the bench's servers); nullopt for anything else.
std::optional<WriteFloor> EtcdWriteFloor(std::string_view uri, int writes) {
  Result<internal::Uri> parsed = internal::ParseUri(uri);
  if (!parsed.ok() || parsed->scheme != "etcd") return std::nullopt;
  Result<etcd::EtcdOptions> options = etcd::OptionsFromUri(*parsed);
  if (!options.ok()) return std::nullopt;
  auto channel =
      grpc::CreateChannel(options->endpoints.front(), grpc::InsecureChannelCredentials());
  auto kv = pb::KV::NewStub(channel);
  const std::string prefix = options->root + ".dlock-floor/";
  const int in_flight = static_cast<int>(internal::CallBatcher::kMaxBatch);
  // Warm the channel (connection, first Raft round) outside the count.
  PutPipeline(*kv, prefix + "warm-", in_flight).Run(in_flight);
  const auto start = std::chrono::steady_clock::now();
  const bool ok = PutPipeline(*kv, prefix, writes).Run(in_flight);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  grpc::ClientContext context;
  pb::DeleteRangeRequest clear;
  clear.set_key(prefix);
  clear.set_range_end(etcd::PrefixRangeEnd(prefix));
  pb::DeleteRangeResponse cleared;
  (void)kv->DeleteRange(&context, clear, &cleared);
  if (!ok) return std::nullopt;
  return WriteFloor{writes / took.count(),
                    "etcd Put of one key (no lease), " + std::to_string(in_flight) +
                        " in flight on one gRPC channel to " + options->endpoints.front()};
}

}  // namespace dlock::bench
