// The demo, step by step (times for the default 2 s lease):
//
//   0.0 s  worker A acquires the key (token n), reads balance=100, starts work
//   0.0 s  the demo freezes A with SIGSTOP, as a long GC pause would
//   2.0 s  the store expires A's lease; worker B acquires (token n+1), reads
//          100, writes 120 through the fence (accepted), releases
//   2.1 s  the demo resumes A with SIGCONT; A cannot tell it was paused and
//          writes 110 with token n: the fence rejects it (or, --no-fence, the
//          write lands and B's update is lost)
//
// Workers are this same binary run as `dlock demo-worker`; they report events
// as JSON lines on a pipe, and the demo stamps them with its own clock.
#include "cli/command.h"
#include "cli/demo_cmd.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "core/duration.h"
#include "harness/child_process.h"
#include "dlock/fence.h"

extern char** environ;

namespace dlock::cli {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

constexpr const char* kLedger = "ledger.txt";

// ---- worker ---------------------------------------------------------------

void Emit(json event) { std::cout << event.dump() << std::endl; }

int ReadBalance(const std::string& dir) {
  std::ifstream in(dir + "/" + kLedger);
  std::string line;
  std::getline(in, line);
  return line.starts_with("balance=") ? std::atoi(line.c_str() + 8) : -1;
}

Status WritePlain(const std::string& dir, const std::string& content) {
  const std::string tmp = dir + "/." + kLedger + ".unfenced";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << content;
    if (!out) return UnavailableError("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, dir + "/" + kLedger, ec);
  return ec ? UnavailableError("cannot replace ledger: " + ec.message()) : Status::Ok();
}

// ---- orchestrator ---------------------------------------------------------

struct Worker {
  std::string name;
  pid_t pid = -1;
  FILE* events = nullptr;  // the read end of its stdout

  Worker() = default;
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::kill(pid, SIGCONT);
      ::waitpid(pid, nullptr, 0);
    }
    if (events) std::fclose(events);
  }

  // The next event, or null at end of stream.
  json Next() {
    char* line = nullptr;
    size_t cap = 0;
    ssize_t n = ::getline(&line, &cap, events);
    json j = n > 0 ? json::parse(std::string(line, static_cast<size_t>(n)), nullptr, false)
                   : json();
    std::free(line);
    return j.is_discarded() ? json() : j;
  }

  int Wait() {
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

// A worker gets the store's URI in its environment (private to this user),
// never on its argv (which `ps` shows everyone), and no descriptor of ours
// but its stdout.
Status Spawn(Worker& w, std::vector<std::string> args, const std::string& store_uri) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return InternalError("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
  std::vector<std::string> env = harness::EnvironmentWithStore(store_uri);
  int rc = ::posix_spawn(&w.pid, "/proc/self/exe", &actions, nullptr,
                         harness::NullEnded(args).data(), harness::NullEnded(env).data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    w.pid = -1;
    return InternalError(std::string("cannot start demo worker: ") + std::strerror(rc));
  }
  w.events = ::fdopen(fds[0], "r");
  return Status::Ok();
}

class Timeline {
 public:
  Timeline() : start_(MonotonicClock::now()) {}

  void Add(const std::string& who, json event, const std::string& text) {
    const double t = std::chrono::duration<double>(MonotonicClock::now() - start_).count();
    event["t_ms"] = static_cast<std::int64_t>(t * 1000);
    event["actor"] = who;
    event["text"] = text;
    events_.push_back(event);
    if (!quiet_) {
      std::cout << "  " << std::fixed << std::setprecision(3) << std::setw(7) << t << "s  "
                << std::left << std::setw(3) << who << std::right << "  " << text << std::endl;
    }
  }
  void set_quiet(bool q) { quiet_ = q; }
  const json& events() const { return events_; }

 private:
  TimePoint start_;
  bool quiet_ = false;
  json events_ = json::array();
};

// Turns one worker event into a timeline line.
std::string Describe(const json& e, const std::string& key, bool fenced) {
  const std::string ev = e.value("event", "");
  if (ev == "acquired") {
    return "acquired " + key + " with fencing token " + std::to_string(e.value("token", 0ULL));
  }
  if (ev == "read") {
    return "read balance=" + std::to_string(e.value("balance", 0)) + ", computing balance+" +
           std::to_string(e.value("add", 0)) + " ...";
  }
  if (ev == "write") {
    std::string s = "wrote balance=" + std::to_string(e.value("balance", 0)) + " with token " +
                    std::to_string(e.value("token", 0ULL));
    if (!fenced) return s + " (no fence: nothing checks the token)";
    return s + (e.value("accepted", false) ? ": accepted by the fence"
                                           : ": REJECTED, " + e.value("detail", std::string()));
  }
  if (ev == "lease_check") {
    return e.value("ok", false) ? "its own lease check says: still held"
                                : "its own lease check now says: lost (" +
                                      e.value("detail", std::string()) + ")";
  }
  if (ev == "released") return "released " + key;
  if (ev == "error") return "error: " + e.value("detail", std::string());
  return ev;
}

}  // namespace

int RunDemoWorker(const DemoWorkerFlags& f) {
  auto ttl = internal::ParseDuration(f.ttl);
  auto wait = internal::ParseDuration(f.wait);
  auto work = internal::ParseDuration(f.work);
  if (!ttl.ok() || !wait.ok() || !work.ok()) return Fail(kExitUsage, "demo-worker: bad duration");
  auto client = Client::Connect("");  // $DLOCK_BACKEND, set by the demo
  if (!client.ok()) {
    Emit({{"event", "error"}, {"detail", client.status().message()}});
    return ExitCodeFor(client.status());
  }
  AcquireOptions options;
  options.ttl = *ttl;
  options.wait = *wait;
  auto lease = (*client)->Acquire(f.key, options);
  if (!lease.ok()) {
    Emit({{"event", "error"}, {"detail", lease.status().message()}});
    return ExitCodeFor(lease.status());
  }
  Emit({{"event", "acquired"}, {"token", lease->token()}});
  const int balance = ReadBalance(f.dir);
  Emit({{"event", "read"}, {"balance", balance}, {"add", f.add}});
  // The work. A paused process cannot tell a pause from slow work: when it
  // runs again it simply carries on.
  std::this_thread::sleep_for(*work);
  const int updated = balance + f.add;
  const std::string content = "balance=" + std::to_string(updated) + "\n";
  Status written = f.no_fence
                       ? WritePlain(f.dir, content)
                       : fence::Directory(f.dir).Write(f.key, lease->token(), kLedger, content);
  Emit({{"event", "write"},
        {"balance", updated},
        {"token", lease->token()},
        {"accepted", written.ok()},
        {"detail", written.message()}});
  Status check = lease->Check();
  Emit({{"event", "lease_check"}, {"ok", check.ok()}, {"detail", check.message()}});
  (void)lease->Release();
  Emit({{"event", "released"}});
  return kExitOk;
}

namespace {

// One demo: worker A is frozen holding the lock, B is granted it after A's
// lease expires, then A wakes and writes.
struct DemoRun {
  const DemoFlags& flags;
  const Store& store;
  milliseconds ttl;
  bool fenced;
  std::string dir;  // the ledger's
  Timeline timeline;
  Worker a, b;
  FencingToken token_a = 0, token_b = 0;
  bool a_rejected = false;  // A's late write was refused by the fence

  std::vector<std::string> WorkerArgs(const std::string& name, int add, const std::string& work,
                                      const std::string& wait) const {
    std::vector<std::string> args = {"dlock", "demo-worker", "--name", name,
                                     "--key", flags.key,     "--ttl",  flags.ttl,
                                     "--wait", wait,         "--dir",  dir,
                                     "--add", std::to_string(add), "--work", work};
    if (!fenced) args.push_back("--no-fence");
    return args;
  }
};

Status DemoError(const std::string& why) { return InternalError("demo: " + why); }

// A acquires, reads, and is frozen in the middle of its work.
Status StartAndFreezeA(DemoRun& run) {
  DLOCK_RETURN_IF_ERROR(Spawn(run.a, run.WorkerArgs("A", 10, "300ms", "30s"), run.store.uri));
  for (json e = run.a.Next(); !e.is_null(); e = run.a.Next()) {
    if (e["event"] == "error") return DemoError("worker A: " + e.value("detail", std::string()));
    if (e["event"] == "acquired") run.token_a = e.value("token", 0ULL);
    run.timeline.Add("A", e, Describe(e, run.flags.key, run.fenced));
    if (e["event"] == "read") break;
  }
  if (run.token_a == 0) return DemoError("worker A did not acquire the lock");
  ::kill(run.a.pid, SIGSTOP);
  run.timeline.Add("--", {{"event", "pause"}},
                   "A is frozen (SIGSTOP), as by a long GC pause, in the middle of its work");
  return Status::Ok();
}

// B waits until the store expires A's lease, then does its update.
Status RunB(DemoRun& run) {
  DLOCK_RETURN_IF_ERROR(Spawn(run.b,
                              run.WorkerArgs("B", 20, "0ms", internal::FormatDuration(run.ttl * 10)),
                              run.store.uri));
  for (json e = run.b.Next(); !e.is_null(); e = run.b.Next()) {
    if (e["event"] == "error") return DemoError("worker B: " + e.value("detail", std::string()));
    std::string text = Describe(e, run.flags.key, run.fenced);
    if (e["event"] == "acquired") {
      run.token_b = e.value("token", 0ULL);
      text += " (the store expired A's lease)";
    }
    if (e["event"] == "lease_check") continue;
    run.timeline.Add("B", e, text);
  }
  if (run.b.Wait() != 0 || run.token_b <= run.token_a) {
    return DemoError("worker B did not complete its update");
  }
  return Status::Ok();
}

void ResumeA(DemoRun& run) {
  ::kill(run.a.pid, SIGCONT);
  run.timeline.Add("--", {{"event", "resume"}},
                   "A resumes (SIGCONT); from inside, the pause is invisible");
  for (json e = run.a.Next(); !e.is_null(); e = run.a.Next()) {
    if (e["event"] == "write") run.a_rejected = !e.value("accepted", false);
    run.timeline.Add("A", e, Describe(e, run.flags.key, run.fenced));
  }
  run.a.Wait();
}

std::string Outcome(const DemoRun& run, int final_balance) {
  std::ostringstream out;
  out << "A was frozen longer than its " << internal::FormatDuration(run.ttl)
      << " lease, so the store gave the lock to B with token " << run.token_b
      << ". A woke up still believing it held the lock and wrote with token " << run.token_a
      << ". ";
  if (run.fenced) {
    out << "The fence had already accepted token " << run.token_b << " for " << run.flags.key
        << " and rejected the stale write: final balance=" << final_balance
        << ", B's update survived. The lease could not prevent two holders; the fencing "
           "token stopped the damage.";
  } else {
    out << "Nothing checked the token, so A's write landed on top of B's: final balance="
        << final_balance << ", B's +20 is lost. Run 'dlock demo' without --no-fence to see "
           "the fence reject the stale write.";
  }
  return out.str();
}

int Conclude(const DemoRun& run) {
  const int final_balance = ReadBalance(run.dir);
  const bool lost_update = final_balance != 120;
  const std::string outcome = Outcome(run, final_balance);
  if (run.flags.json) {
    json out = {{"store", run.store.client->Describe()},
                {"key", run.flags.key},
                {"ttl_ms", run.ttl.count()},
                {"fenced", run.fenced},
                {"token_a", run.token_a},
                {"token_b", run.token_b},
                {"stale_write_rejected", run.a_rejected},
                {"lost_update", lost_update},
                {"final_balance", final_balance},
                {"events", run.timeline.events()},
                {"outcome", outcome}};
    std::cout << out.dump(2) << '\n';
  } else {
    std::cout << "\n" << outcome << "\n";
  }
  const bool as_designed = run.fenced ? (run.a_rejected && !lost_update) : lost_update;
  if (!as_designed) return Fail(DemoError("the story did not play out as expected (see the timeline)"));
  return kExitOk;
}

// A private directory for the ledger, removed when the demo ends.
class LedgerDir {
 public:
  Status Create() {
    std::error_code ec;
    path_ = (std::filesystem::temp_directory_path(ec) / "dlock-demo.XXXXXX").string();
    if (ec || !::mkdtemp(path_.data())) {
      path_.clear();
      return PermissionDeniedError("cannot create a temporary directory (check TMPDIR)");
    }
    std::ofstream(path_ + "/" + kLedger) << "balance=100\n";
    return Status::Ok();
  }
  ~LedgerDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

Result<milliseconds> DemoTtl(const DemoFlags& flags) {
  auto ttl = internal::ParseDuration(flags.ttl);
  if (!ttl.ok()) return ttl.status().WithContext("--ttl");
  if (Status s = ValidateTtl(*ttl); !s.ok()) return s.WithContext("--ttl");
  if (*ttl > std::chrono::minutes(1)) {
    return InvalidArgumentError("--ttl " + flags.ttl + " is too long for a demo: use 100ms to 1m");
  }
  return *ttl;
}

}  // namespace

int RunDemo(const DemoFlags& flags) {
  auto ttl = DemoTtl(flags);
  if (!ttl.ok()) return Fail(ttl.status());
  if (Status s = ValidateKey(flags.key); !s.ok()) return Fail(s.WithContext("--key"));
  auto store = OpenStore(flags.backend);
  if (!store.ok()) return Fail(store.status());
  LedgerDir ledger;
  if (Status s = ledger.Create(); !s.ok()) return Fail(kExitCantCreate, s.message());

  DemoRun run{flags, *store, *ttl, !flags.no_fence, ledger.path()};
  if (!flags.json) {
    std::cout << "dlock demo: a paused lock holder writes after its lease expired\n"
              << "store " << store->client->Describe() << ", key " << flags.key << ", lease "
              << internal::FormatDuration(*ttl) << ", "
              << (run.fenced ? "writes go through a fence" : "NO fence (--no-fence)") << "\n"
              << "the resource: " << run.dir << "/" << kLedger << ", balance=100\n\n";
  }
  run.timeline.set_quiet(flags.json);
  if (Status s = StartAndFreezeA(run); !s.ok()) return Fail(s);
  if (Status s = RunB(run); !s.ok()) return Fail(s);
  ResumeA(run);
  return Conclude(run);
}

void AddDemoCommands(CLI::App& app, Commands& commands) {
  auto demo = std::make_shared<DemoFlags>();
  CLI::App* cmd = app.add_subcommand(
      "demo", "Play the stale-writer story live: a paused holder, an expired lease, a fence");
  cmd->add_option("--backend", demo->backend, kBackendHelp);
  cmd->add_option("--ttl", demo->ttl, "lease of the two workers")->capture_default_str();
  cmd->add_option("--key", demo->key, "lock key the workers use")->capture_default_str();
  cmd->add_flag("--no-fence", demo->no_fence,
                "write without the fence, and watch an update get lost");
  cmd->add_flag("--json", demo->json, "print the events and the outcome as JSON");
  commands.push_back({cmd, [demo] { return RunDemo(*demo); }});

  // One worker of the demo; the store comes in $DLOCK_BACKEND, never argv.
  auto worker = std::make_shared<DemoWorkerFlags>();
  cmd = app.add_subcommand("demo-worker", "one worker of 'dlock demo'");
  cmd->group("");  // hidden
  cmd->add_option("--name", worker->name)->required();
  cmd->add_option("--key", worker->key)->required();
  cmd->add_option("--ttl", worker->ttl)->required();
  cmd->add_option("--wait", worker->wait);
  cmd->add_option("--dir", worker->dir)->required();
  cmd->add_option("--add", worker->add);
  cmd->add_option("--work", worker->work);
  cmd->add_flag("--no-fence", worker->no_fence);
  commands.push_back({cmd, [worker] { return RunDemoWorker(*worker); }});
}

}  // namespace dlock::cli
