// Break records for ZooKeeper (Backend::RecordBreak, Backend::Breaks): one
// persistent sequential znode per record in BreaksDir (zk_path.h), its end
// in its name so that old ones are found by one listing, its time the
// node's mtime (the leader's clock).
#include <algorithm>
#include <charconv>
#include <chrono>
#include <string>
#include <vector>

#include "backends/zookeeper/zk_backend_impl.h"
#include "core/break_text.h"
#include "backends/zookeeper/zookeeper_backend.h"

namespace dlock::zookeeper {
namespace {

using std::chrono::milliseconds;

// How many records past their end one write or listing deletes at most.
constexpr std::size_t kExpiredPerPass = 64;
// The most records kept: they share one directory, which every write and
// listing reads whole, within ZooKeeper's reply limit (jute.maxbuffer,
// 1 MB by default). Beyond it, each write deletes the oldest.
constexpr std::size_t kMaxRecords = 1000;

bool Expired(const BreakNodeName& n, std::int64_t now_ms) {
  return n.keep_until_unix_ms && *n.keep_until_unix_ms <= now_ms;
}

}  // namespace

// The records directory's children (none while it does not exist).
Result<std::vector<std::string>> ZooKeeperBackendImpl::BreakNodes(const Live& live) {
  const std::string dir = BreaksDir(options.chroot);
  auto op = live.session->Children(dir);
  const Reply* r = op->Wait(attempt_timeout);
  if (r == nullptr) return UnavailableError("ZooKeeper did not list " + dir + " in time");
  if (r->rc == ZNONODE) return std::vector<std::string>{};
  if (r->rc != ZOK) return ZkError(r->rc, "listing " + dir);
  return r->children;
}

// Deletes, pipelined and without waiting long, the records among `names`
// past their end, and the oldest beyond kMaxRecords: a later pass finds
// what this one left.
void ZooKeeperBackendImpl::DeleteExpiredBreaks(const Live& live,
                                               const std::vector<std::string>& names) {
  const std::int64_t now_ms = UnixNowMs();
  std::vector<std::string> doomed, kept;
  for (const std::string& name : names) {
    const auto parsed = ParseBreakNode(name);
    if (!parsed) continue;
    (Expired(*parsed, now_ms) ? doomed : kept).push_back(name);
  }
  if (kept.size() > kMaxRecords) {
    // Every name ends in its ten-digit sequence (ParseBreakNode checked it).
    auto sequence = [](const std::string& n) { return std::string_view(n).substr(n.size() - 10); };
    std::sort(kept.begin(), kept.end(),
              [&](const auto& a, const auto& b) { return sequence(a) < sequence(b); });
    doomed.insert(doomed.end(), kept.begin(), kept.end() - kMaxRecords);
  }
  std::vector<std::shared_ptr<Op>> ops;
  for (const std::string& name : doomed) {
    ops.push_back(live.session->Delete(BreaksDir(options.chroot) + "/" + name));
    if (ops.size() == kExpiredPerPass) break;
  }
  for (const auto& op : ops) (void)op->Wait(attempt_timeout);
}

Status ZooKeeperBackend::RecordBreak(const BreakRecord& record, milliseconds keep) {
  ZooKeeperBackendImpl& m = *impl_;
  std::optional<std::int64_t> keep_until;
  if (keep != kKeepDoneForever) keep_until = UnixNowMs() + keep.count();
  DLOCK_ASSIGN_OR_RETURN(const std::string name, BreakNodePrefix(record.key, keep_until));
  DLOCK_ASSIGN_OR_RETURN(
      const ZooKeeperBackendImpl::Live live,
      m.EnsureSession(m.options.session_timeout.value_or(kDefaultSessionTimeout),
                      /*provisional=*/true));
  const std::string dir = BreaksDir(m.options.chroot);
  const std::string path = dir + "/" + name;
  for (int round = 0; round < 2; ++round) {
    auto op = live.session->Create(path, internal::EncodeBreakText(record), ZOO_PERSISTENT_SEQUENTIAL);
    const Reply* r = op->Wait(m.attempt_timeout);
    if (r == nullptr) {
      return UnavailableError("ZooKeeper did not answer the create of " + path +
                              " (outcome unknown)");
    }
    if (r->rc == ZNONODE && round == 0) {
      DLOCK_RETURN_IF_ERROR(m.CreateRecordDir(live, dir));
      continue;
    }
    if (r->rc != ZOK) return ZkError(r->rc, "recording the break of " + Quoted(record.key));
    break;
  }
  if (auto names = m.BreakNodes(live); names.ok()) m.DeleteExpiredBreaks(live, *names);
  return Status::Ok();
}

Result<std::vector<BreakRecord>> ZooKeeperBackend::Breaks(std::string_view prefix) {
  ZooKeeperBackendImpl& m = *impl_;
  DLOCK_ASSIGN_OR_RETURN(
      const ZooKeeperBackendImpl::Live live,
      m.EnsureSession(m.options.session_timeout.value_or(kDefaultSessionTimeout),
                      /*provisional=*/true));
  std::string_view p = prefix;
  if (p.starts_with('/')) p.remove_prefix(1);  // as for every key
  DLOCK_ASSIGN_OR_RETURN(std::vector<std::string> names, m.BreakNodes(live));
  m.DeleteExpiredBreaks(live, names);
  // The records wanted, in sequence order (the order they were written).
  const std::int64_t now_ms = UnixNowMs();
  std::vector<std::pair<std::string, std::string>> wanted;  // key, node name
  for (const std::string& name : names) {
    auto parsed = ParseBreakNode(name);
    if (!parsed || Expired(*parsed, now_ms) || !parsed->key.starts_with(p)) continue;
    wanted.emplace_back(std::move(parsed->key), name);
  }
  // Every name ends in its ten-digit sequence (ParseBreakNode checked it).
  auto sequence = [](const std::string& name) { return name.substr(name.size() - 10); };
  std::sort(wanted.begin(), wanted.end(), [&](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : sequence(a.second) < sequence(b.second);
  });
  std::vector<std::shared_ptr<Op>> reads;
  for (const auto& [key, name] : wanted) {
    reads.push_back(live.session->Get(BreaksDir(m.options.chroot) + "/" + name));
  }
  std::vector<BreakRecord> records;
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    const Reply* r = reads[i]->Wait(m.attempt_timeout);
    if (r == nullptr) return UnavailableError("ZooKeeper did not answer a read of break records");
    if (r->rc == ZNONODE) continue;  // deleted meanwhile
    if (r->rc != ZOK) return ZkError(r->rc, "reading the break record " + wanted[i].second);
    BreakRecord b;
    if (!internal::DecodeBreakText(r->data, &b)) {
      return InternalError("the break record " + wanted[i].second + " on " + m.Describe() +
                           " is malformed (not written by dlock?)");
    }
    b.key = wanted[i].first;
    b.at_unix_ms = r->stat.mtime;
    records.push_back(std::move(b));
  }
  return records;
}

// The break records of keys starting with `prefix` (zk_footprint.cc).
Result<std::uint64_t> ZooKeeperBackendImpl::CountBreaks(const Live& live,
                                                        std::string_view prefix) {
  DLOCK_ASSIGN_OR_RETURN(const std::vector<std::string> names, BreakNodes(live));
  std::uint64_t count = 0;
  for (const std::string& name : names) {
    const auto parsed = ParseBreakNode(name);
    if (parsed && parsed->key.starts_with(prefix)) ++count;
  }
  return count;
}

}  // namespace dlock::zookeeper
