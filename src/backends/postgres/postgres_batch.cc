// The PostgreSQL backend's calls many at a time: TryAcquireMany and
// ReleaseMany through libpq's pipeline mode, KeepPlaces as one statement.
//
// A batch sends, for each entry, the statement its one-at-a-time call
// would send first (an attempt: the lean form, or the fresh form of a
// shared one; a release: the lean form), all in one pipeline with one
// Sync: one round trip and one transaction, so one WAL flush for the batch
// instead of one per entry. The entries a statement cannot decide (a key
// without a row yet, a shared holding, somebody else's) go to the next
// round with the next statement their call would send, each round a
// transaction of its own: at most three rounds for attempts (lean, fresh,
// template), two for releases. So each entry runs the statements its
// one-at-a-time call runs, in the same order, and its answer is read the
// same way.
//
// Transactions: one per round, not one per statement. A statement's row
// locks are then held until the round commits, so every round runs its
// statements in key order (a stable sort: entries of one key keep their
// order): two batches of two clients take their keys' locks in the same
// order and cannot deadlock each other. If a statement fails, the server
// rolls the whole round back and skips the rest: nothing of it stands, and
// its entries are run again one at a time, so that each gets the answer
// (or the error) its own call gives. If the connection is lost or the
// deadline passes before the round's Sync is answered, whether it
// committed is unknown: kUnavailable for each entry of the round (the core
// reconciles by owner), while the answers of a round already committed
// stand.
#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "backends/postgres/postgres_backend_impl.h"

namespace dlock::postgres {
namespace {

// `entries` (indexes into `calls`) in key order; one key's in their order.
void SortByKey(std::span<const LeaseRequest> calls, std::vector<std::size_t>& entries) {
  std::stable_sort(entries.begin(), entries.end(), [&](std::size_t a, std::size_t b) {
    return calls[a].key < calls[b].key;
  });
}

}  // namespace

std::vector<Result<Attempt>> PostgresBackend::TryAcquireMany(
    std::span<const LeaseRequest> requests) {
  std::vector<Result<Attempt>> out(requests.size(), Attempt{});
  std::vector<PendingAttempt> pending;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (Status ok = ValidateRequest(requests[i]); !ok.ok()) {
      out[i] = ok;
    } else {
      pending.emplace_back(i, FirstSingleForm(requests[i]));
    }
  }
  // At most three rounds: the template decides every entry it gets.
  while (!pending.empty()) pending = AttemptRound(requests, std::move(pending), out);
  return out;
}

// Single attempts, each with the statement of the form it is at (as
// TryAcquire runs them in turn); returns those passed on to the next form.
std::vector<PostgresBackend::PendingAttempt> PostgresBackend::AttemptRound(
    std::span<const LeaseRequest> requests, std::vector<PendingAttempt> entries,
    std::vector<Result<Attempt>>& out) {
  std::stable_sort(entries.begin(), entries.end(), [&](const auto& a, const auto& b) {
    return requests[a.first].key < requests[b.first].key;
  });
  std::vector<PreparedCall> calls;
  for (const auto& [i, form] : entries) {
    calls.push_back({SingleStatement(form), AttemptParams(requests[i], nullptr)});
  }
  const auto outcome =
      RunMany(calls, CallDeadline(), "a batch of " + std::to_string(calls.size()) + " attempts");
  std::vector<PendingAttempt> next;
  for (std::size_t j = 0; j < entries.size(); ++j) {
    const auto [i, form] = entries[j];
    const std::string what = "acquire " + requests[i].key;
    if (!outcome.ok()) {
      out[i] = outcome.status().WithContext(what);
    } else if (outcome->failed) {
      out[i] = RunAttempt(requests[i], nullptr);  // rolled back: on its own
    } else if (auto read = ReadSingle(form, outcome->results[j].get(), what, options_.describe);
               !read.ok()) {
      out[i] = read.status();
    } else if (*read) {
      out[i] = **read;
    } else {
      next.emplace_back(i, NextSingleForm(form));
    }
  }
  return next;
}

std::vector<Status> PostgresBackend::ReleaseMany(std::span<const LeaseRequest> holdings) {
  std::vector<Status> out(holdings.size());
  std::vector<std::size_t> valid, undecided;
  for (std::size_t i = 0; i < holdings.size(); ++i) {
    out[i] = ValidateKey(holdings[i].key);
    if (out[i].ok()) valid.push_back(i);
  }
  ReleaseRound(holdings, std::move(valid), true, out, &undecided);
  ReleaseRound(holdings, std::move(undecided), false, out, nullptr);
  return out;
}

// Releases as Release makes them: the lean form (the usual release of an
// exclusive holding; what it did not release is added to `undecided`), or
// the general one.
void PostgresBackend::ReleaseRound(std::span<const LeaseRequest> holdings,
                                   std::vector<std::size_t> entries, bool lean,
                                   std::vector<Status>& out, std::vector<std::size_t>* undecided) {
  if (entries.empty()) return;
  SortByKey(holdings, entries);
  std::vector<PreparedCall> calls;
  for (std::size_t i : entries) {
    calls.push_back({lean ? "dlock_release_lean" : "dlock_release",
                     ReleaseParams(holdings[i].key, holdings[i].owner.ToString())});
  }
  const auto outcome =
      RunMany(calls, CallDeadline(), "a batch of " + std::to_string(calls.size()) + " releases");
  for (std::size_t j = 0; j < entries.size(); ++j) {
    const LeaseRequest& holding = holdings[entries[j]];
    Status& answer = out[entries[j]];
    const std::string what = "release " + holding.key;
    if (!outcome.ok()) {
      answer = outcome.status().WithContext(what);
    } else if (outcome->failed) {
      // Rolled back: on its own.
      answer = lean ? Release(holding.key, holding.owner)
                    : ReleaseAndLeaveQueue(holding.key, holding.owner.ToString(), CallDeadline());
    } else if (!lean) {
      answer = ReadRelease(outcome->results[j].get(), what);
    } else if (PQntuples(outcome->results[j].get()) == 1) {
      NoteReleased(holding.key);
      NoteReleaseForSweep();
    } else {
      undecided->push_back(entries[j]);
    }
  }
}

std::vector<Status> PostgresBackend::KeepPlaces(std::span<const LeaseRequest> waiters) {
  std::vector<Status> out(waiters.size());
  std::vector<std::string> keys, owners, ttls;
  std::vector<std::size_t> sent;  // keys[j] is waiters[sent[j]]'s
  for (std::size_t i = 0; i < waiters.size(); ++i) {
    const LeaseRequest& w = waiters[i];
    out[i] = ValidateKey(w.key);
    if (out[i].ok() && w.owner.empty()) out[i] = InvalidArgumentError("keep a place: no owner id");
    if (out[i].ok() && w.queue_ttl <= std::chrono::milliseconds(0)) {
      out[i] = InvalidArgumentError("keep a place in the queue of " + w.key +
                                    ": queue_ttl is not positive");
    }
    if (!out[i].ok()) continue;
    keys.push_back(HexEncode(w.key));
    owners.push_back(w.owner.ToString());
    ttls.push_back(std::to_string(w.queue_ttl.count()));
    sent.push_back(i);
  }
  if (sent.empty()) return out;
  Params params;
  params.Text(ArrayLiteral(keys)).Text(ArrayLiteral(owners)).Text(ArrayLiteral(ttls));
  const std::string what = "keep " + std::to_string(sent.size()) + " places in their queues";
  auto kept = Run("dlock_keep_places", params, CallDeadline(), what);
  const Status answered =
      kept.ok() ? CheckShape(kept->get(), 2, 0, what, options_.describe) : kept.status();
  std::set<std::pair<std::string, std::string>> found;
  for (int row = 0; answered.ok() && row < PQntuples(kept->get()); ++row) {
    found.emplace(Value(kept->get(), row, 0), Value(kept->get(), row, 1));
  }
  for (std::size_t j = 0; j < sent.size(); ++j) {
    if (!answered.ok()) {
      out[sent[j]] = answered;
    } else if (found.count({keys[j], owners[j]}) == 0) {
      out[sent[j]] = NotFoundError("keep the place of " + owners[j] + " in the queue of " +
                                   waiters[sent[j]].key +
                                   ": it has none (it lapsed, or the key was granted to it)");
    }
  }
  return out;
}

}  // namespace dlock::postgres
