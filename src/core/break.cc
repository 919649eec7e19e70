// Client::Break: an operator's forced release, ordered by a fencing token.
//
// Built on what every store already does: Release is checked by the owner
// id alone, so the break ends a holding by the owner the store showed; and
// every grant takes the next token, so one grant after the eviction puts a
// token above the evicted holders' into the world.
#include <algorithm>

#include "core/client_core.h"

namespace dlock::internal {
namespace {

using std::chrono::milliseconds;

// The break's own grant lives only until it is released, a moment later;
// the TTL bounds it if the release is lost.
constexpr milliseconds kBreakTtl{10'000};
// How long a break tries to see a grant after the eviction.
constexpr milliseconds kOrderWithin{10'000};

bool Chosen(const HolderInfo& h, std::string_view key, const BreakOptions& options) {
  if (h.key != key) return false;  // a longer key with this prefix
  return options.owners.empty() || std::find(options.owners.begin(), options.owners.end(),
                                             h.owner) != options.owners.end();
}

}  // namespace

Result<BreakReport> ClientCore::Break(std::string_view key, const BreakOptions& options) {
  DLOCK_RETURN_IF_ERROR(ValidateKey(key));
  DLOCK_RETURN_IF_ERROR(
      ValidateRetention(options.keep_record).WithContext("break of key '" + std::string(key) + "'"));
  const std::string label = options.label.empty() ? "break by " + label_ : options.label;
  DLOCK_RETURN_IF_ERROR(ValidateLabel(label));
  DLOCK_ASSIGN_OR_RETURN(std::vector<HolderInfo> holders, Counted(backend_->List(key)));
  BreakReport report;
  FencingToken highest = 0;
  for (HolderInfo& h : holders) {
    if (!Chosen(h, key, options)) continue;
    // Owner-checked by the owner the store just showed: a holding that
    // changed hands meanwhile is not touched.
    const Status ended = Counted(backend_->Release(h.key, h.owner));
    if (ended.code() == StatusCode::kNotOwner) continue;
    if (!ended.ok()) {
      return FailedAfterEvicting(report, label, options,
                                 ended.WithContext("break of key '" + std::string(key) + "'"));
    }
    highest = std::max(highest, h.token);
    report.evicted.push_back(std::move(h));
  }
  if (report.evicted.empty()) return report;
  if (backend_->OrdersTokens()) {
    Result<FencingToken> token = TokenAfterBreak(key, highest, label);
    if (!token.ok()) return FailedAfterEvicting(report, label, options, token.status());
    report.token = *token;
  }
  report.recorded = RecordBreaks(report, label, options.keep_record);
  return report;
}

// A break that fails after it evicted somebody still leaves the records of
// those evictions (with no ordering token), so the audit trail has them.
Status ClientCore::FailedAfterEvicting(const BreakReport& report, const std::string& by,
                                       const BreakOptions& options, Status failure) {
  if (!report.evicted.empty()) (void)RecordBreaks(report, by, options.keep_record);
  return failure;
}

// One record per evicted holding, written after the ordering grant so that
// each carries the token that fences its holder. The break stands whatever
// the records' fate: a failure is reported, not returned.
Status ClientCore::RecordBreaks(const BreakReport& report, const std::string& by,
                                std::chrono::milliseconds keep) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  for (const HolderInfo& h : report.evicted) {
    BreakRecord record{h.key, h.owner, h.token, h.label, by, report.token,
                       std::chrono::duration_cast<milliseconds>(now).count()};
    DLOCK_RETURN_IF_ERROR(Counted(backend_->RecordBreak(record, keep)));
  }
  return Status::Ok();
}

Result<std::vector<BreakRecord>> ClientCore::Breaks(std::string_view prefix) {
  if (prefix.size() > kMaxKeyBytes) {
    return InvalidArgumentError("prefix is longer than the 1024-byte key limit");
  }
  return Counted(backend_->Breaks(prefix));
}

Result<FencingToken> ClientCore::TokenAfterBreak(std::string_view key, FencingToken evicted,
                                                 const std::string& label) {
  LeaseRequest request{std::string(key), OwnerId(session_, random_->Next()), kBreakTtl};
  // A reader's grant where the store shares keys: admitted beside the
  // holders a break by owner left alone, refused only for a writer.
  request.limit = backend_->SupportsSharing() ? kSharedLimit : 1;
  request.label = label;
  const TimePoint until = clock_->Now() + kOrderWithin;
  Duration poll = milliseconds(1);
  for (;;) {
    Result<Attempt> attempt = Counted(backend_->TryAcquire(request));
    // Only a store that could not answer is asked again.
    if (!attempt.ok() && attempt.status().code() != StatusCode::kUnavailable) {
      return attempt.status();
    }
    if (attempt.ok() && attempt->granted) {
      (void)Counted(backend_->Release(request.key, request.owner));
      return attempt->token;
    }
    if (attempt.ok()) {
      // Refused: somebody may have been granted the key first — a later
      // token than the evicted ones is all the break needs.
      DLOCK_ASSIGN_OR_RETURN(std::vector<HolderInfo> now, Counted(backend_->List(key)));
      FencingToken later = 0;
      for (const HolderInfo& h : now) {
        if (h.key == key && h.token > evicted) later = std::max(later, h.token);
      }
      if (later != 0) return later;
    }
    if (clock_->Now() >= until) {
      return UnavailableError("the holders of key '" + std::string(key) +
                              "' were evicted, but no grant after them could be made within " +
                              "10s to show a later token; the next grant's will be later");
    }
    Backoff(until, poll, {});
  }
}

}  // namespace dlock::internal
