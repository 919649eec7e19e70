// Where the etcd backend keeps things, and how its URI reads. Pure functions,
// no network: the key layout is the contract with etcd's own lock, so it is
// tested on its own (tests/backends/etcd/etcd_keys_test.cc).
//
// Layout (the same as etcd's concurrency.Mutex and `etcdctl lock`): the lock
// named N under root R has one queue, the keys with prefix R + N + "/". Each
// client session puts one key there, R + N + "/" + <its lease id in lowercase
// hex>, attached to its lease; the key with the lowest create_revision holds
// the lock, and that create_revision is the fencing token.
//
// dlock's own members (this version): the first acquisition of a name by a
// session takes that key; another acquisition of the same name by the same
// session (another owner in one client: readers, semaphore permits) takes
// R + N + "/" + <lease hex> + "-" + <owner id hex>. The value is the owner id
// (32 hex digits), then, for the sharing rule, "\n" + limit + "\n" + label
// (older dlock wrote the owner id alone: limit 1, no label; Go writes "":
// no owner, limit 1).
//
// Lock names that extend each other ("a" and "a/b") share key space: every
// key of "a/b" also starts with "a/". etcd's Mutex counts them into "a"'s
// queue; dlock counts only the direct members of a queue (no '/' after the
// prefix), so that "a" and "a/b" are independent locks.
//
// Run-once records (`dlock once`): the done mark of lock N is the key
// R + ".dlock-done:" + N', where N' is N with '%' written %25 and '/' written
// %2F, so that the part after R holds no '/'. Every key of every lock queue
// (dlock's, etcdctl's, Go's Mutex) is R + N + "/" + ..., with a '/' after R,
// so a done key is never a queue member, never inside any queue's range
// (R + N + "/" for any N), and LockNameOf says it names no lock. The record
// has no lease (it is permanent); its value is the marking owner's id (32 hex
// digits), "\n", and the token (create_revision) it held the lock with.
//
// Lock-delay markers: a holding granted with a lock-delay D has, beside its
// queue member, the key R + ".dlock-delay:" + N'' + ":" + <member leaf>,
// where N'' is N with '%', '/' and ':' written %25, %2F and %3A, and the
// leaf is the member key after the queue prefix (<lease hex>[-<owner hex>]).
// It hangs on a lease of its own whose TTL is the session's plus D, kept
// alive with the session, so it outlives a member that ends uncleanly by D;
// a clean release deletes both. Like the done mark, it has no '/' after R,
// so it is in no queue's range and names no lock; the escaped ':' makes
// DelayPrefix(R, N) the range of N's markers alone (not of "N:x"'s). Its
// value is the member's create_revision (decimal), "\n", and the member's
// value (owner, limit, label), so that a marker whose member is gone (a
// delayed holding) still says what it held.
//
// Break records (Backend::RecordBreak): R + ".dlock-breaks:" + N'' + ":" +
// <the break's Unix ms, 16 hex digits> + "-" + <evicted owner hex>, N''
// escaped as for markers: in no queue's range, naming no lock, and sorted
// oldest first within N. Each hangs on a lease of its own with the record's
// retention (none: kept for ever). The value is "owner\ntoken\nbreak_token\n
// by\nlabel" (labels hold no control characters).
#ifndef DLOCK_SRC_BACKENDS_ETCD_ETCD_KEYS_H_
#define DLOCK_SRC_BACKENDS_ETCD_ETCD_KEYS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tls_files.h"
#include "core/uri.h"
#include "dlock/clock.h"
#include "dlock/status.h"

namespace dlock::etcd {

inline constexpr int kDefaultPort = 2379;

// The wake-ups Acquisition::Notify arranged, as one client's watch streams
// hold them (tests): registered and not yet fired, the watches etcd has
// open for them, and the streams not done yet.
struct NoticeCounts {
  std::size_t registered = 0;
  std::size_t open_at_store = 0;
  std::size_t streams = 0;
};

// How the client proves itself and checks the server (etcds://).
struct EtcdSecurity {
  bool tls = false;              // etcds://: TLS, the server's name checked
  internal::TlsFiles tls_files;  // read when the client connects
  // Empty: no authentication (or, on an etcd with --client-cert-auth, the
  // client certificate's CN is the user). Else etcd's Auth API with
  // `password`, which is never printed.
  std::string user;
  std::string password;
};

struct EtcdOptions {
  std::vector<std::string> endpoints;  // "host:port", tried in this order
  std::string root;                    // "" or ends with '/'
  EtcdSecurity security;
  // Bounds one store operation, retries on other members included.
  std::chrono::milliseconds request_timeout{5000};
  // Bounds the first contact in Open.
  std::chrono::milliseconds connect_timeout{5000};
  // The client's clock: the backend keeps its own view of which leases the
  // client still believes in, on the same clock as the core.
  std::shared_ptr<Clock> clock;
};

// etcd://h1:2379,h2:2379[/root][?timeout=5s], or etcds://[user@]... with
// TLS (?cacert=&cert=&key=, core/tls_files.h) and, given a user, etcd's
// authentication (the password from the URI or password_file= /
// password_env=, resolved before). The port defaults to 2379.
// kInvalidArgument for no host, a bad port, a user without a password, TLS
// files on etcd://, a root with NUL, control or non-UTF-8 bytes, or an
// unknown parameter.
Result<EtcdOptions> OptionsFromUri(const internal::Uri& uri);

// R + N + "/": the queue of lock `name`.
std::string QueuePrefix(std::string_view root, std::string_view name);
// The queue member key of a session: prefix + lease id as Go's %x prints it.
std::string MemberKey(std::string_view queue_prefix, std::int64_t lease_id);
std::string LeaseHex(std::int64_t lease_id);
// The member key of a second acquisition of the name by the same session.
std::string MemberKey(std::string_view queue_prefix, std::int64_t lease_id,
                      std::string_view owner_hex);

// What a member's value says (see the layout above).
struct MemberValue {
  std::string owner_hex;  // "" for a Go / etcdctl member
  std::uint32_t limit = 1;
  std::string label;
};
std::string EncodeValue(std::string_view owner_hex, std::uint32_t limit, std::string_view label);
MemberValue DecodeValue(std::string_view value);
// True if `key` is a direct member of the queue (not of a longer name's).
bool IsQueueMember(std::string_view queue_prefix, std::string_view key);
// etcd's range_end for a range of every key starting with `prefix`: the
// first key after them all, or "\0" (etcd's "to the end of the keyspace")
// when none exists (an empty prefix, or one of 0xff bytes only).
std::string PrefixRangeEnd(std::string_view prefix);
// The run-once record of lock `name` (see the layout above).
std::string DoneKey(std::string_view root, std::string_view name);
// The range of lock `name`'s lock-delay markers (see the layout above):
// every marker of `name` starts with it, and no other key does.
std::string DelayPrefix(std::string_view root, std::string_view name);
// The range of the markers of every lock whose name starts with `name_prefix`.
std::string DelayListPrefix(std::string_view root, std::string_view name_prefix);
// The marker of queue member `member_key` (a key of the queue `queue_prefix`).
std::string DelayKey(std::string_view delay_prefix, std::string_view queue_prefix,
                     std::string_view member_key);
// For a marker key, the lock name it belongs to; nullopt for any other key.
std::optional<std::string> DelayLockNameOf(std::string_view root, std::string_view key);
struct MarkerValue {
  std::int64_t member_revision = 0;  // 0: unreadable
  MemberValue member;
};
std::string EncodeMarker(std::int64_t member_revision, std::string_view member_value);
MarkerValue DecodeMarker(std::string_view value);

// The break records of every lock whose name starts with `name_prefix`
// (see the layout above); a record of lock `name` evicting `owner_hex` at
// `at_unix_ms`; and the lock name of a record's key (nullopt for any other).
std::string BreaksListPrefix(std::string_view root, std::string_view name_prefix);
std::string BreakKey(std::string_view root, std::string_view name, std::int64_t at_unix_ms,
                     std::string_view owner_hex);
std::optional<std::string> BreakLockNameOf(std::string_view root, std::string_view key);

// For a key R + N + "/" + <hex> (or <hex>-<32 hex>), the lock name N;
// nullopt for any other key.
std::optional<std::string> LockNameOf(std::string_view root, std::string_view key);

}  // namespace dlock::etcd

#endif  // DLOCK_SRC_BACKENDS_ETCD_ETCD_KEYS_H_
