// Run-once records for ZooKeeper (Backend::IsDone, Backend::MarkDone): one
// child per marking under the key's container node DonePath, named by the
// end of its retention and the owner that marked it (zk_path.h,
// DoneRecordName). Because a name is never used twice, a record past its
// end can be deleted by anybody, by name, without the risk a fixed path
// has: a delete meant for an expired record landing on a fresh one written
// in its place, which would let the job run again.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "backends/zookeeper/zk_backend_impl.h"
#include "backends/zookeeper/zookeeper_backend.h"
#include "core/duration.h"

namespace dlock::zookeeper {
namespace {

using std::chrono::milliseconds;
using internal::FormatDuration;

// Key directories a marking looks through for records past their end.
constexpr std::size_t kDirsSweptPerMark = 16;

// For people and tools reading the tree; dlock reads only the name.
std::string RecordData(const OwnerId& owner, FencingToken token) {
  return "{\"dlock\":2,\"owner\":\"" + owner.ToString() + "\",\"token\":" +
         std::to_string(token) + "}";
}

bool Unexpired(const DoneRecordName& r, std::int64_t now_ms) {
  return !r.keep_until_unix_ms || *r.keep_until_unix_ms > now_ms;
}

// The dlock before retentions wrote the record as the key node's own data,
// {"dlock":1,...}, kept for ever.
bool LegacyRecord(std::string_view data) { return data.starts_with("{\"dlock\":1"); }

}  // namespace

// Deletes, without waiting, the records among `children` of `dir` past
// their end; returns whether a live one remains.
bool ZooKeeperBackendImpl::DropExpiredRecords(const Live& live, const std::string& dir,
                                              const std::vector<std::string>& children) {
  const std::int64_t now_ms = UnixNowMs();
  bool any_live = false;
  for (const std::string& child : children) {
    const auto record = ParseDoneRecord(child);
    if (!record) continue;  // not dlock's: left alone
    if (Unexpired(*record, now_ms)) {
      any_live = true;
    } else {
      (void)live.session->Delete(dir + "/" + child);
    }
  }
  return any_live;
}

Result<bool> ZooKeeperBackend::IsDone(std::string_view key) {
  ZooKeeperBackendImpl& m = *impl_;
  DLOCK_ASSIGN_OR_RETURN(const std::string dir, DonePath(m.options.chroot, key));
  DLOCK_ASSIGN_OR_RETURN(
      const ZooKeeperBackendImpl::Live live,
      m.EnsureSession(m.options.session_timeout.value_or(kDefaultSessionTimeout),
                      /*provisional=*/true));
  // A sync, then the reads, pipelined on the session (answered in order):
  // the member this session talks to may lag the leader, and a record
  // another client has just written must be seen, as on the other stores.
  auto sync = live.session->Sync("/");
  auto node = live.session->Get(dir);
  auto records = live.session->Children(dir);
  if (const Reply* sr = sync->Wait(m.attempt_timeout); sr != nullptr && sr->rc != ZOK) {
    return ZkError(sr->rc, "syncing before a read of " + dir);
  }
  const Reply* r = records->Wait(m.attempt_timeout);
  const Reply* own = node->Wait(m.attempt_timeout);
  if (r == nullptr || own == nullptr) {
    return UnavailableError("ZooKeeper did not answer a read of " + dir + " within " +
                            FormatDuration(m.attempt_timeout));
  }
  if (r->rc == ZNONODE) return false;
  if (r->rc != ZOK) return ZkError(r->rc, "reading the done marks of " + dir);
  if (m.DropExpiredRecords(live, dir, r->children)) return true;
  if (own->rc == ZOK && LegacyRecord(own->data)) return true;
  // Emptied: the node goes too (it fails if a record came meanwhile).
  if (own->rc == ZOK && own->data.empty()) (void)live.session->Delete(dir);
  return false;
}

// One multi: this owner's lock node still exists, and its record is
// created. Then the key's older records go, and a few other keys' past
// their end (keys never asked about again would keep theirs for ever).
Status ZooKeeperBackend::MarkDone(std::string_view key, const OwnerId& owner,
                                  milliseconds keep) {
  ZooKeeperBackendImpl& m = *impl_;
  DLOCK_ASSIGN_OR_RETURN(const std::string dir, DonePath(m.options.chroot, key));
  auto not_owner = [&](std::string_view why) {
    return NotOwnerError("this owner does not hold " + Quoted(key) + " on " + m.Describe() +
                         " (" + std::string(why) + "): its run is not recorded as done");
  };
  std::shared_ptr<Holding> h;
  {
    std::lock_guard lock(m.mu);
    auto it = m.holdings.find({std::string(key), owner});
    if (it == m.holdings.end() || it->second->gen != m.gen) {
      return not_owner("no lock node of it in this session");
    }
    h = it->second;
    if (h->deleted) return not_owner("its lock node was deleted");
  }
  std::optional<ZooKeeperBackendImpl::Live> live = m.Current();
  if (!live || live->gen != h->gen) return not_owner("the session that held it expired");
  DoneRecordName name{std::nullopt, owner};
  if (keep != kKeepDoneForever) name.keep_until_unix_ms = UnixNowMs() + keep.count();
  const std::string path = dir + "/" + FormatDoneRecord(name);
  for (int round = 0; round < 4; ++round) {
    std::vector<MultiOp> ops(2);
    ops[0].kind = MultiOp::Kind::kCheck;
    ops[0].path = h->NodePath();  // version -1: only that it still exists
    ops[1].kind = MultiOp::Kind::kCreate;
    ops[1].path = path;
    ops[1].data = RecordData(owner, h->token);
    auto op = live->session->Multi(std::move(ops));
    const Reply* r = op->Wait(m.attempt_timeout);
    if (r == nullptr) {
      return UnavailableError("ZooKeeper did not answer the marking of " + Quoted(key) +
                              " as done within " + FormatDuration(m.attempt_timeout) +
                              " (outcome unknown)");
    }
    const int check = r->results.size() == 2 ? r->results[0] : r->rc;
    const int created = r->results.size() == 2 ? r->results[1] : r->rc;
    if (r->rc == ZOK || (check == ZOK && created == ZNODEEXISTS)) {  // or our lost reply's
      m.AfterMarking(*live, dir, path);
      return Status::Ok();
    }
    if (check == ZNONODE) {
      std::lock_guard lock(m.mu);
      h->deleted = true;  // Renew reports the lease lost too
      return not_owner("its lock node " + h->NodePath() + " is gone");
    }
    if (r->rc == ZSESSIONEXPIRED) return not_owner("the session that held it expired");
    if (check == ZOK && created == ZNONODE) {  // the key's node (or the directory) is missing
      DLOCK_RETURN_IF_ERROR(m.CreateDoneKeyNode(*live, dir));
      continue;
    }
    return ZkError(created != ZOK ? created : r->rc,
                   "marking " + Quoted(key) + " done (" + path + ")");
  }
  return UnavailableError("could not keep " + dir + " long enough to write the record in it");
}

// The key's container node (ZooKeeper deletes it once empty), under the
// persistent records directory.
Status ZooKeeperBackendImpl::CreateDoneKeyNode(const Live& live, const std::string& dir) {
  DLOCK_RETURN_IF_ERROR(CreateRecordDir(live, DoneDir(options.chroot)));
  auto op = live.session->Create(dir, "", ZOO_CONTAINER);
  const Reply* r = op->Wait(attempt_timeout);
  if (r == nullptr) return UnavailableError("ZooKeeper did not answer the create of " + dir);
  if (r->rc != ZOK && r->rc != ZNODEEXISTS) return ZkError(r->rc, "creating " + dir);
  return Status::Ok();
}

// Best effort, bounded: the key's other records (the new one supersedes
// them), then records past their end under a few keys picked at random.
void ZooKeeperBackendImpl::AfterMarking(const Live& live, const std::string& dir,
                                        const std::string& kept) {
  auto mine = live.session->Children(dir);
  if (const Reply* r = mine->Wait(attempt_timeout); r != nullptr && r->rc == ZOK) {
    for (const std::string& child : r->children) {
      const std::string path = dir + "/" + child;
      if (path != kept && ParseDoneRecord(child)) (void)live.session->Delete(path);
    }
  }
  const std::string top = DoneDir(options.chroot);
  auto keys = live.session->Children(top);
  const Reply* k = keys->Wait(attempt_timeout);
  if (k == nullptr || k->rc != ZOK || k->children.empty()) return;
  const std::size_t n = std::min(kDirsSweptPerMark, k->children.size());
  const std::size_t start = DefaultRandom()->Next() % k->children.size();
  std::vector<std::pair<std::string, std::shared_ptr<Op>>> reads;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string path = top + "/" + k->children[(start + i) % k->children.size()];
    reads.emplace_back(path, live.session->Children(path));
  }
  for (auto& [path, op] : reads) {
    const Reply* r = op->Wait(attempt_timeout);
    if (r != nullptr && r->rc == ZOK) (void)DropExpiredRecords(live, path, r->children);
  }
}

}  // namespace dlock::zookeeper
