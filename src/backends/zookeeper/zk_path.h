// Names in ZooKeeper: lock keys to znode paths, and the lock nodes under them.
//
// A key is a '/'-separated path under the URI's chroot: key "jobs/nightly"
// with chroot /dlock is the znode /dlock/jobs/nightly, which is exactly the
// path a Curator InterProcessMutex on "/dlock/jobs/nightly" uses. One leading
// '/' is ignored ("/jobs/nightly" is the same lock). Within each segment, the
// bytes ZooKeeper's path rules forbid (controls, non-ASCII) and '%' itself
// are written %XX; segments that would break the rules or be mistaken for
// something else are escaped whole: "" -> "%", "." -> "%2E", ".." ->
// "%2E%2E", a leading "_c_" -> "%5Fc_" (lock nodes start with it), and a
// first segment "zookeeper" at the root -> "%7Aookeeper" (ZooKeeper's own).
// The mapping is reversible, so List reports the key that was locked.
//
// Lock nodes follow Curator's protected ephemeral-sequential layout:
// "_c_" + guid (a UUID, 8-4-4-4-12 hex digits) + "-lock-" + 10-digit
// sequence. dlock's guid is the acquisition's OwnerId, so a client finds
// its own node again after a lost reply, and `dlock status` shows owners.
//
// Run-once records (`dlock once`) live apart from every lock, in one flat
// directory: <chroot>/%dlock-done/<name>, a container znode per key holding
// its records (DoneRecordName), one per marking. (A record of the dlock
// before retentions is that znode's own data, kept for ever.) The
// directory's name is no encoding EncodeSegment produces (a '%' there is
// always followed by two hex digits, or stands alone for an empty segment),
// so no key's lock path is it or under it; and being a child of the chroot,
// which is never a lock path itself, it is no lock node either. <name> is
// the key (one leading '/' dropped, as for LockPath) with '/', '%', controls
// and non-ASCII bytes written %XX, and "." / ".." escaped whole: one node per
// key, no parents to create per key, reversible.
#ifndef DLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_PATH_H_
#define DLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_PATH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dlock/status.h"
#include "dlock/types.h"

namespace dlock::zookeeper {

// "" or "/" (the root) or an absolute ZooKeeper path; kInvalidArgument
// naming the rule it breaks otherwise. Returns the normalised chroot: "" for
// the root, else the path without a trailing '/'.
Result<std::string> NormalizeChroot(std::string_view chroot);

// The znode path of `key` under `chroot` (normalised). kInvalidArgument for
// an empty key.
Result<std::string> LockPath(std::string_view chroot, std::string_view key);

// The directory of run-once records under `chroot` (normalised), and the
// node of `key`'s records in it. DonePath: kInvalidArgument for an empty
// key.
inline constexpr std::string_view kDoneDirName = "%dlock-done";
std::string DoneDir(std::string_view chroot);
Result<std::string> DonePath(std::string_view chroot, std::string_view key);

// One run-once record, a child of DonePath: "<keep until>-<owner>", the end
// of its retention in Unix ms by the writer's clock ("ever": kept for
// ever), and the 32 hex digits of the holder that marked it. The owner
// makes each name unique (owner ids are never reused), so a record past its
// end is deleted by its name, and never a newer one in its place.
struct DoneRecordName {
  std::optional<std::int64_t> keep_until_unix_ms;  // nullopt: for ever
  OwnerId owner;
};
std::string FormatDoneRecord(const DoneRecordName& record);
std::optional<DoneRecordName> ParseDoneRecord(std::string_view name);

// Break records (Backend::RecordBreak) live in one flat directory too,
// <chroot>/%dlock-breaks, one persistent sequential znode per record named
// <name>%-<keep until>-<sequence>: <name> as for run-once records, <keep
// until> the end of its retention in Unix ms by the writer's clock ("ever":
// kept for ever). A '%' in <name> is always followed by two hex digits, so
// "%-" ends it.
inline constexpr std::string_view kBreaksDirName = "%dlock-breaks";
std::string BreaksDir(std::string_view chroot);
// What BreakNodePrefix(key, keep_until) + the sequence ZooKeeper appends
// (ten digits) is made of; ParseBreakNode reads it back (nullopt: not such
// a name).
struct BreakNodeName {
  std::string key;
  std::optional<std::int64_t> keep_until_unix_ms;  // nullopt: for ever
};
Result<std::string> BreakNodePrefix(std::string_view key,
                                    std::optional<std::int64_t> keep_until_unix_ms);
std::optional<BreakNodeName> ParseBreakNode(std::string_view name);

// Lock-delay markers: DelayPath(chroot, key) is a directory holding one
// marker per holding with a lock-delay, named as its lock node.
inline constexpr std::string_view kDelayDirName = "%dlock-delay";
std::string DelayDir(std::string_view chroot);
Result<std::string> DelayPath(std::string_view chroot, std::string_view key);

// The key of the lock at znode `path` under `chroot`, or nullopt when `path`
// is not under it or a segment is not an encoding LockPath produces.
std::optional<std::string> KeyOfPath(std::string_view chroot, std::string_view path);

// One key segment, encoded / decoded (nullopt: not a valid encoding).
std::string EncodeSegment(std::string_view segment, bool first_at_root);
std::optional<std::string> DecodeSegment(std::string_view segment);

// "0123abcd-..." for an owner: its 32 hex digits as a UUID.
std::string GuidOf(const OwnerId& owner);
// "_c_<guid>-lock-": what a lock node's name starts with. A sharing
// acquisition (limit != 1: a reader, a semaphore permit) says its limit in
// the name, "_c_<guid>-n<limit>-lock-", so that one getChildren tells every
// contender's limit; to Curator's InterProcessMutex it is one more
// contender in sequence order, so Curator and dlock still exclude each other.
// An acquisition with a lock-delay says it too, "...-d<ms>-lock-", so that
// a waiter knows, from the names ahead of it, whether the holder it follows
// may have left a lock-delay behind.
std::string LockNodePrefix(const OwnerId& owner, std::uint32_t limit = 1,
                           std::uint32_t delay_ms = 0);

// A child of a lock path that contends for the lock: its name ends in
// "lock-" and a 10-digit sequence (Curator's InterProcessMutex nodes, with
// or without protection, and dlock's).
struct LockNode {
  std::string name;
  std::int64_t sequence = 0;
  std::string guid;  // empty unless the name is "_c_<guid>-[n<limit>-]lock-<seq>"
  std::uint32_t limit = 1;  // from "n<limit>-"; 1 for every other node
  std::uint32_t delay_ms = 0;  // from "d<ms>-"
};
std::optional<LockNode> ParseLockNode(std::string_view name);

// The contenders among `children`, in the order the lock grants them
// (Curator's: by sequence).
std::vector<LockNode> SortedContenders(const std::vector<std::string>& children);
// How many of `sorted` hold the lock: node i holds iff i + 1 <= the smallest
// limit among nodes 0..i (holders are always a prefix of the queue).
std::size_t HolderCount(const std::vector<LockNode>& sorted);

// The owner a guid names (a UUID's 32 hex digits), or an empty OwnerId.
OwnerId OwnerOfGuid(std::string_view guid);

}  // namespace dlock::zookeeper

#endif  // DLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_PATH_H_
