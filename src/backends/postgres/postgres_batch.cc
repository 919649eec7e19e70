// The PostgreSQL backend's calls many at a time: KeepPlaces as one
// statement.
#include <set>
#include <string>
#include <utility>

#include "backends/postgres/postgres_backend_impl.h"

namespace dlock::postgres {

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
