#include "backends/etcd/etcd_watch_stream.h"

#include <utility>

namespace dlock::etcd {

pb::WatchRequest CreateWatch(const Deletion& d, std::int64_t watch_id) {
  pb::WatchRequest request;
  pb::WatchCreateRequest* create = request.mutable_create_request();
  create->set_key(d.key);
  create->set_start_revision(0);  // the member's next revision: a synced watcher
  create->add_filters(pb::WatchCreateRequest::NOPUT);
  create->set_watch_id(watch_id);
  if (d.range()) {
    create->set_range_end(d.range_end);
    create->set_prev_kv(true);  // to tell the keys ahead from those behind
  }
  return request;
}

pb::RangeRequest GoneBeforeRead(const Deletion& d) {
  pb::RangeRequest check;
  check.set_key(d.key);
  check.set_serializable(true);
  if (d.range()) {
    check.set_range_end(d.range_end);
    check.set_max_create_revision(d.revision);
    check.set_count_only(true);
  }
  return check;
}

bool GoneIn(const Deletion& d, const pb::RangeResponse& found) {
  if (d.range()) return found.count() < d.expected;
  return found.kvs_size() == 0 || found.kvs(0).create_revision() != d.revision;
}

bool IsDeletion(const mvccpb::Event& event, const Deletion& d) {
  if (event.type() != mvccpb::Event::DELETE) return false;
  // In a range, only the keys created before the waiter's count.
  return !d.range() || !event.has_prev_kv() || event.prev_kv().create_revision() <= d.revision;
}

bool RefusedForAuth(const std::string& cancel_reason) {
  // etcd 3.4 says "permission denied" for an expired token too.
  return cancel_reason.find("permission denied") != std::string::npos ||
         cancel_reason.find("auth token") != std::string::npos;
}

namespace {

pb::WatchRequest CancelWatch(std::int64_t id) {
  pb::WatchRequest request;
  request.mutable_cancel_request()->set_watch_id(id);
  return request;
}

}  // namespace

WatchStream::WatchStream(pb::KV::Stub& kv, std::string address, const std::string& token,
                         Duration check_timeout)
    : kv_(kv), address_(std::move(address)), token_(token), check_timeout_(check_timeout) {}

std::shared_ptr<WatchStream> WatchStream::Start(pb::Watch::Stub& watch, pb::KV::Stub& kv,
                                                std::string address, const std::string& token,
                                                Duration check_timeout) {
  std::shared_ptr<WatchStream> s(new WatchStream(kv, std::move(address), token, check_timeout));
  // A member cut off from the quorum ends the stream rather than keep
  // watches that will tell nothing.
  s->context_.AddMetadata("hasleader", "true");
  if (!token.empty()) s->context_.AddMetadata("token", token);
  {
    // Publishes the fields above to gRPC's threads, which take mu_ first.
    std::lock_guard l(s->mu_);
    s->self_ = s;
  }
  watch.async()->Watch(&s->context_, s.get());
  s->AddHold();
  s->StartRead(&s->response_);
  s->StartCall();
  return s;
}

std::int64_t WatchStream::Add(const Deletion& d, std::int64_t seen_at,
                              std::function<void()>& wake) {
  std::int64_t id = 0;
  {
    std::lock_guard l(mu_);
    if (broken_ || outside_closed_) return 0;
    id = next_id_++;
    watchers_.emplace(id, Watcher{d, seen_at, std::move(wake)});
  }
  Send(CreateWatch(d, id));
  return id;
}

std::function<void()> WatchStream::Remove(std::int64_t id) {
  std::function<void()> wake;
  {
    std::lock_guard l(mu_);
    wake = TakeLocked(id);
  }
  if (wake) Send(CancelWatch(id));
  return wake;
}

bool WatchStream::broken() {
  std::lock_guard l(mu_);
  return broken_;
}

bool WatchStream::stale_token() {
  std::lock_guard l(mu_);
  return stale_token_;
}

std::size_t WatchStream::registered() {
  std::lock_guard l(mu_);
  return watchers_.size();
}

std::size_t WatchStream::open_at_store() {
  std::lock_guard l(mu_);
  return open_.size();
}

void WatchStream::Close() {
  bool remove;
  {
    std::lock_guard l(mu_);
    broken_ = true;
    outside_closed_ = true;
    remove = TakeHoldLocked();
  }
  context_.TryCancel();
  if (remove) RemoveHold();
}

void WatchStream::AwaitDone(Duration limit) {
  std::unique_lock l(mu_);
  cv_.wait_for(l, limit, [&] { return done_; });
}

bool WatchStream::done() {
  std::lock_guard l(mu_);
  return done_;
}

// One write at a time (gRPC's rule): the rest wait their turn here.
void WatchStream::Send(pb::WatchRequest request) {
  {
    std::lock_guard l(mu_);
    if (broken_ || outside_closed_) return;
    if (writing_) {
      queued_.push_back(std::move(request));
      return;
    }
    writing_ = true;
    request_ = std::move(request);
    ++outside_writes_;
  }
  StartWrite(&request_);
  bool remove;
  {
    std::lock_guard l(mu_);
    --outside_writes_;
    remove = TakeHoldLocked();
  }
  if (remove) RemoveHold();
}

void WatchStream::OnWriteDone(bool ok) {
  bool next = false;
  {
    std::lock_guard l(mu_);
    if (!ok) {
      // The read fails too, and wakes every watch.
      broken_ = true;
      writing_ = false;
      queued_.clear();
    } else if (!queued_.empty() && !broken_) {
      request_ = std::move(queued_.front());
      queued_.pop_front();
      next = true;
    } else {
      writing_ = false;
    }
  }
  if (next) StartWrite(&request_);
}

void WatchStream::OnReadDone(bool ok) {
  Reaction out;
  bool remove = false;
  {
    std::lock_guard l(mu_);
    if (ok) {
      ReactLocked(response_, out);
    } else {
      // The stream is over: nobody will hear of these deletions here.
      broken_ = true;
      outside_closed_ = true;
      remove = TakeHoldLocked();
      for (auto& [id, w] : watchers_) out.wakes.push_back(std::move(w.wake));
      watchers_.clear();
      open_.clear();
    }
  }
  Carry(out);
  if (ok) StartRead(&response_);
  if (remove) RemoveHold();
}

void WatchStream::ReactLocked(const pb::WatchResponse& response, Reaction& out) {
  const std::int64_t id = response.watch_id();
  if (response.canceled()) {
    // Refused, compacted, or the answer to our own cancel.
    open_.erase(id);
    if (auto wake = TakeLocked(id)) out.wakes.push_back(std::move(wake));
    if (RefusedForAuth(response.cancel_reason())) {
      // Every watch of this stream would be refused: a new stream, with a
      // new token, takes them when they are asked for again.
      stale_token_ = true;
      out.close = true;
    }
    return;
  }
  auto it = watchers_.find(id);
  if (response.created()) {
    open_.insert(id);
    // The member's revision moved since the caller's read: the deletion
    // may have come before the watch.
    if (it != watchers_.end() &&
        (it->second.seen_at == 0 || response.header().revision() > it->second.seen_at)) {
      out.checks.emplace_back(id, it->second.target);
    }
    return;
  }
  if (it == watchers_.end()) return;
  for (const auto& event : response.events()) {
    if (!IsDeletion(event, it->second.target)) continue;
    out.wakes.push_back(std::move(it->second.wake));
    watchers_.erase(it);
    out.cancels.push_back(id);
    return;
  }
}

void WatchStream::Carry(Reaction& out) {
  for (auto& wake : out.wakes) wake();
  for (const std::int64_t id : out.cancels) Send(CancelWatch(id));
  for (const auto& [id, d] : out.checks) Check(id, d);
  if (out.close) Close();
}

// Asked of the watch's member, serializably: it has applied at least up to
// the watch's start, so this read and the watch leave no gap. No answer:
// woken, to try again.
void WatchStream::Check(std::int64_t id, const Deletion& d) {
  struct Call {
    grpc::ClientContext context;
    pb::RangeRequest request;
    pb::RangeResponse response;
  };
  auto call = std::make_shared<Call>();
  call->request = GoneBeforeRead(d);
  call->context.set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::duration_cast<std::chrono::system_clock::duration>(check_timeout_));
  if (!token_.empty()) call->context.AddMetadata("token", token_);
  kv_.async()->Range(&call->context, &call->request, &call->response,
                     [self = shared_from_this(), call, id, d](grpc::Status status) {
                       if (status.ok() && !GoneIn(d, call->response)) return;
                       std::function<void()> wake;
                       {
                         std::lock_guard l(self->mu_);
                         wake = self->TakeLocked(id);
                       }
                       if (!wake) return;
                       self->Send(CancelWatch(id));
                       wake();
                     });
}

void WatchStream::OnDone(const grpc::Status& /*status*/) {
  std::vector<std::function<void()>> wakes;
  std::shared_ptr<WatchStream> self;
  {
    std::lock_guard l(mu_);
    done_ = true;
    broken_ = true;
    for (auto& [id, w] : watchers_) wakes.push_back(std::move(w.wake));
    watchers_.clear();
    open_.clear();
    cv_.notify_all();
    self = std::move(self_);
  }
  for (auto& wake : wakes) wake();
  // `self` may be the last reference: this object ends here.
}

std::function<void()> WatchStream::TakeLocked(std::int64_t id) {
  auto it = watchers_.find(id);
  if (it == watchers_.end()) return {};
  std::function<void()> wake = std::move(it->second.wake);
  watchers_.erase(it);
  return wake;
}

// True exactly once: when no more writes can start from outside.
bool WatchStream::TakeHoldLocked() {
  if (outside_closed_ && outside_writes_ == 0 && !hold_removed_) {
    hold_removed_ = true;
    return true;
  }
  return false;
}

}  // namespace dlock::etcd
