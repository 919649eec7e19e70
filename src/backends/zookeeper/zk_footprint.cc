// Backend::StoredObjects for ZooKeeper: the znodes kept for keys that start
// with a prefix — lock paths and their parents (containers, which the
// server deletes some time after they empty), lock nodes, lock-delay
// markers and their directories, run-once records, break records.
#include <string>
#include <vector>

#include "backends/zookeeper/zk_backend_impl.h"
#include "backends/zookeeper/zookeeper_backend.h"

namespace dlock::zookeeper {
namespace {

std::string Join(const std::string& parent, const std::string& child) {
  return parent == "/" ? "/" + child : parent + "/" + child;
}

// The children of each of `paths`, read pipelined; a path gone meanwhile
// has none.
Result<std::vector<std::vector<std::string>>> ChildrenOf(const ZooKeeperBackendImpl::Live& live,
                                                         const std::vector<std::string>& paths,
                                                         std::chrono::nanoseconds timeout) {
  std::vector<std::shared_ptr<Op>> ops;
  for (const auto& path : paths) ops.push_back(live.session->Children(path));
  std::vector<std::vector<std::string>> out(paths.size());
  for (std::size_t i = 0; i < paths.size(); ++i) {
    const Reply* r = ops[i]->Wait(timeout);
    if (r == nullptr) return UnavailableError("ZooKeeper did not list " + paths[i] + " in time");
    if (r->rc == ZNONODE) continue;
    if (r->rc != ZOK) return ZkError(r->rc, "listing " + paths[i]);
    out[i] = r->children;
  }
  return out;
}

}  // namespace

// Every node below `tops` (themselves included), level by level.
Result<std::uint64_t> ZooKeeperBackendImpl::CountSubtrees(const Live& live,
                                                          std::vector<std::string> tops) {
  std::uint64_t count = 0;
  while (!tops.empty()) {
    DLOCK_ASSIGN_OR_RETURN(const auto children, ChildrenOf(live, tops, attempt_timeout));
    std::vector<std::string> next;
    for (std::size_t i = 0; i < tops.size(); ++i) {
      ++count;
      for (const auto& child : children[i]) next.push_back(Join(tops[i], child));
    }
    tops = std::move(next);
  }
  return count;
}

// The children of `dir` that stand for keys starting with `prefix` (lock
// paths decode segment by segment; flat record names decode whole).
Result<std::vector<std::string>> ZooKeeperBackendImpl::ChildrenFor(const Live& live,
                                                                   const std::string& dir,
                                                                   std::string_view partial) {
  DLOCK_ASSIGN_OR_RETURN(const auto children, ChildrenOf(live, {dir}, attempt_timeout));
  std::vector<std::string> out;
  for (const auto& child : children[0]) {
    if (dir == root && (child == "zookeeper" || child == kDoneDirName || child == kDelayDirName ||
                        child == kBreaksDirName)) {
      continue;
    }
    const auto decoded = DecodeSegment(child);
    if (decoded && decoded->starts_with(partial)) out.push_back(Join(dir, child));
  }
  return out;
}

Result<std::uint64_t> ZooKeeperBackend::StoredObjects(std::string_view prefix) {
  ZooKeeperBackendImpl& m = *impl_;
  DLOCK_ASSIGN_OR_RETURN(const ZooKeeperBackendImpl::Live live,
                         m.EnsureSession(m.options.session_timeout.value_or(kDefaultSessionTimeout),
                                         /*provisional=*/true));
  std::string_view p = prefix;
  if (p.starts_with('/')) p.remove_prefix(1);
  const auto slash = p.rfind('/');
  std::string start = m.root;
  if (slash != std::string_view::npos) {
    DLOCK_ASSIGN_OR_RETURN(start, LockPath(m.options.chroot, p.substr(0, slash)));
  }
  const std::string_view partial = slash == std::string_view::npos ? p : p.substr(slash + 1);
  // The reads after a sync, pipelined: the member this session reads from
  // may lag the one another client wrote through, and the count must see
  // every write made before it was asked for (IsDone reads the same way).
  auto sync = live.session->Sync(m.root);
  DLOCK_ASSIGN_OR_RETURN(auto locks, m.ChildrenFor(live, start, partial));
  DLOCK_ASSIGN_OR_RETURN(auto records, m.ChildrenFor(live, DoneDir(m.options.chroot), p));
  DLOCK_ASSIGN_OR_RETURN(auto markers, m.ChildrenFor(live, DelayDir(m.options.chroot), p));
  locks.insert(locks.end(), records.begin(), records.end());
  locks.insert(locks.end(), markers.begin(), markers.end());
  DLOCK_ASSIGN_OR_RETURN(const std::uint64_t breaks, m.CountBreaks(live, p));
  DLOCK_ASSIGN_OR_RETURN(const std::uint64_t kept, m.CountSubtrees(live, std::move(locks)));
  return kept + breaks;
}

}  // namespace dlock::zookeeper
