#include "harness/runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <semaphore.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string_view>

#include "core/uri.h"
#include "dlock/clock.h"
#include "harness/child_process.h"
#include "harness/member_faults.h"
#include "harness/proxy.h"
#include "harness/resource.h"

extern char** environ;

namespace dlock::harness {
namespace {

using std::chrono::milliseconds;

constexpr const char* kFaketimeLib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

std::int64_t NowNs() { return MonotonicClock::now().time_since_epoch().count(); }

std::atomic<bool> stop_requested{false};  // lock-free: set from a signal handler

struct WorkerProc {
  int id = 0;
  int incarnation = 0;
  pid_t pid = -1;
  int to_worker = -1;    // its stdin
  int from_worker = -1;  // its stdout
  std::string buffer;
  bool paused = false;
  std::string faketime_file;
  std::unique_ptr<FaultProxy> proxy;
  std::string backend;  // through its proxy, when it has one
  int member = 0;       // on a LinkedCluster: the member it talks to
};

// Where the workers' proxies forward to: the store's one host:port, and the
// backend URI around it (a worker's URI names its proxy instead).
struct ProxyTarget {
  std::string host;
  int port = 0;
  std::string uri_prefix, uri_suffix;
};

class Run {
 public:
  explicit Run(const RunOptions& o) : o_(o) {}
  // Prepare, StartWorkers, Supervise, then Collect.
  Result<RunResult> Execute();

 private:
  // The run's files, the resource's schema, and the fault plan; refuses
  // faults this store or machine cannot inject.
  Status Prepare();
  void LogPlan();
  // Whether the run injects faults of this kind.
  bool Wants(std::string_view kind) const {
    return std::find(o_.faults.begin(), o_.faults.end(), kind) != o_.faults.end();
  }
  // The store's address for the proxies, when a fault needs them.
  Result<std::optional<ProxyTarget>> FindProxyTarget() const;
  Status StartWorkers(const std::optional<ProxyTarget>& proxy_target);
  // On a LinkedCluster: worker w's proxy and URI lead to one member.
  Status AttachToMember(WorkerProc& w);
  // Until the run has ended and every worker has stopped: fires the timers
  // and the faults not tied to a critical section, and reads the workers'
  // events.
  Status Supervise();
  // At the end of the run: resumes and heals everyone, and closes the
  // workers' stdin so that they stop after their current operation.
  void BeginEnding();
  // Resumes, restarts and heals that are due at `now`.
  Status FireTimers(std::int64_t now);
  // The planned faults not tied to a critical section that are due.
  void InjectDueFaults(std::int64_t now);
  void Inject(const PlannedFault& f);
  // A member fault, due while `w` holds the key; false if it must wait.
  bool InjectMemberFault(const PlannedFault& f, WorkerProc& w);
  // When Supervise must look again at the latest.
  std::int64_t NextWake() const;
  // The events `w` has written, and its exit.
  void ReadWorker(WorkerProc& w);
  void KillStragglers();
  // The history, sorted, with the resource's log, and the checkers' verdicts.
  Result<RunResult> Collect();

  Status Spawn(WorkerProc& w);
  void Record(Event e);
  void Nemesis(std::string op, int target, std::int64_t duration_ns = 0,
               std::string note = {});
  void OnEvent(WorkerProc& w, const Event& e);
  void CloseWorker(WorkerProc& w);
  void Go(WorkerProc& w);

  const RunOptions& o_;
  std::string backend_;
  std::string resource_;
  std::vector<WorkerProc> workers_;
  std::vector<PlannedFault> plan_;
  std::size_t next_fault_ = 0;
  std::int64_t start_ns_ = 0;
  std::int64_t end_ns_ = 0;    // the run's end: no new faults, workers told to stop
  std::int64_t drain_ns_ = 0;  // workers still running then are killed
  bool ending_ = false;
  std::map<int, std::int64_t> resume_at_;   // worker id -> ns
  std::map<int, std::int64_t> restart_at_;  // worker id -> ns
  std::map<int, std::int64_t> heal_at_;     // worker id -> ns (proxy back to pass)
  std::map<int, bool> go_on_heal_;          // partitioned inside its critical section
  // A pause meant to outlive the lease (>= 1 ttl) lasts until another
  // worker has written under a newer grant, and at most kOutliveTtls ttls:
  // on a loaded machine the next holder can take longer than the pause,
  // and the stale write the pause is there to provoke would not happen.
  struct Outliving {
    std::int64_t until_ns = 0;
    bool overtaken = false;
  };
  static constexpr int kOutliveTtls = 10;
  std::map<int, Outliving> outliving_;      // paused worker id ->
  // Record and Nemesis are called from the member faults' thread too.
  std::mutex record_mu_;
  std::vector<Event> events_;       // guarded by record_mu_
  std::ofstream history_file_;      // guarded by record_mu_
  std::ofstream faults_file_;       // guarded by record_mu_
  // Last: destroyed first, while what it records into still exists.
  std::optional<MemberFaults> member_faults_;  // with o_.cluster
};

void Run::Record(Event e) {
  std::lock_guard lock(record_mu_);
  history_file_ << ToJsonLine(e) << '\n';
  events_.push_back(std::move(e));
}

void Run::Nemesis(std::string op, int target, std::int64_t duration_ns, std::string note) {
  Event e;
  e.t_ns = NowNs();
  e.worker = -1;
  e.op = op;
  e.value = target;
  e.duration_ns = duration_ns;
  e.error = note;
  const bool member_op = op == "isolate" || op == "rejoin" || op.starts_with("member-");
  std::unique_lock lock(record_mu_);
  faults_file_ << "+" << (e.t_ns - start_ns_) / 1'000'000 << "ms " << op
               << (member_op ? " member " : " worker ") << target
               << (duration_ns ? " " + std::to_string(duration_ns / 1'000'000) + "ms" : "")
               << (note.empty() ? "" : " " + note) << std::endl;
  lock.unlock();
  Record(std::move(e));
}

Status Run::Spawn(WorkerProc& w) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
    return InternalError("chaos: pipe failed");
  }
  std::vector<std::string> args = {"dlock",        "chaos-worker",
                                    "--id",         std::to_string(w.id),
                                    "--incarnation", std::to_string(w.incarnation),
                                    "--key",        o_.key,
                                    "--resource",   resource_,
                                    "--ttl",        std::to_string(o_.ttl.count()) + "ms"};
  if (!o_.fenced) args.push_back("--unfenced");
  // The store, password included, goes in the environment: argv is
  // readable by every user of the machine.
  std::vector<std::string> env =
      EnvironmentWithStore(w.backend.empty() ? backend_ : w.backend);
  if (!w.faketime_file.empty()) {
    // Only CLOCK_REALTIME is faked; dlock never reads it, which is the point.
    env.push_back(std::string("LD_PRELOAD=") + kFaketimeLib);
    env.push_back("FAKETIME_TIMESTAMP_FILE=" + w.faketime_file);
    env.push_back("FAKETIME_NO_CACHE=1");
    env.push_back("FAKETIME_DONT_FAKE_MONOTONIC=1");
  }
  std::vector<char*> argv = NullEnded(args), envp = NullEnded(env);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  // Proxies' sockets and other workers' pipes are not the worker's.
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
  int rc = ::posix_spawn(&w.pid, o_.self_exe.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]);
  ::close(out[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    return InternalError(std::string("chaos: cannot start a worker: ") + std::strerror(rc));
  }
  w.to_worker = in[1];
  w.from_worker = out[0];
  ::fcntl(w.from_worker, F_SETFL, O_NONBLOCK);
  // A worker that dies must not kill us with SIGPIPE when we write 'g'.
  return Status::Ok();
}

void Run::Go(WorkerProc& w) {
  if (w.to_worker >= 0) (void)!::write(w.to_worker, "g", 1);
}

void Run::CloseWorker(WorkerProc& w) {
  if (w.to_worker >= 0) ::close(w.to_worker);
  if (w.from_worker >= 0) ::close(w.from_worker);
  w.to_worker = w.from_worker = -1;
  if (w.pid > 0) {
    ::kill(w.pid, SIGCONT);
    ::waitpid(w.pid, nullptr, 0);
    // libfaketime names its shared memory after the process and removes it
    // at exit, which a killed worker never reaches: /dev/shm would fill.
    if (!w.faketime_file.empty()) {
      const std::string pid = std::to_string(w.pid);
      ::shm_unlink(("/faketime_shm_" + pid).c_str());
      ::sem_unlink(("/faketime_sem_" + pid).c_str());
    }
  }
  w.pid = -1;
}

void Run::OnEvent(WorkerProc& w, const Event& e) {
  Record(e);
  if (e.op == "write" && e.type == EventType::kOk) {
    for (auto& [id, outliving] : outliving_) outliving.overtaken |= id != e.worker;
  }
  if (!(e.op == "read" && e.type == EventType::kOk)) return;
  // Inside the critical section, waiting for our go-ahead.
  // Clock steps come due on their own timer; pauses and kills wait for a
  // worker to be here.
  const std::int64_t elapsed_ms = (NowNs() - start_ns_) / 1'000'000;
  if (!ending_ && next_fault_ < plan_.size() && plan_[next_fault_].at.count() <= elapsed_ms &&
      InCriticalSection(plan_[next_fault_].kind)) {
    const PlannedFault& f = plan_[next_fault_];
    if (!IsMemberFault(f.kind)) ++next_fault_;
    if (f.kind == "pause") {
      const auto pause_ns = static_cast<std::int64_t>(
          f.ttl_factor * static_cast<double>(o_.ttl.count()) * 1e6);
      ::kill(w.pid, SIGSTOP);
      w.paused = true;
      Nemesis("pause", w.id, pause_ns);
      resume_at_[w.id] = NowNs() + pause_ns;
      if (f.ttl_factor >= 1.0) {
        outliving_[w.id] = {NowNs() + kOutliveTtls * std::chrono::nanoseconds(o_.ttl).count()};
      }
      Go(w);  // read when it runs again
      return;
    }
    if (f.kind == "kill") {
      ::kill(w.pid, SIGKILL);
      Nemesis("kill", w.id);
      CloseWorker(w);
      restart_at_[w.id] = NowNs() + 50'000'000;
      return;
    }
    if (IsMemberFault(f.kind)) {
      // The holder goes on at once: finding the leader takes a while, and a
      // holder kept waiting past its ttl would be a pause, not this fault.
      // The fault lands on its write, its release or the hand-off after.
      Go(w);
      if (InjectMemberFault(f, w)) ++next_fault_;
      return;
    }
    if (f.kind == "partition" && w.proxy) {
      // Cut off from the store while it keeps working: its go-ahead (and so
      // its write) comes only when the partition heals.
      const auto length_ns = static_cast<std::int64_t>(
          f.ttl_factor * static_cast<double>(o_.ttl.count()) * 1e6);
      w.proxy->SetMode(FaultProxy::Mode::kPartition);
      Nemesis("partition", w.id, length_ns);
      heal_at_[w.id] = NowNs() + length_ns;
      go_on_heal_[w.id] = true;
      return;
    }
  }
  Go(w);
}

Result<RunResult> Run::Execute() {
  ::signal(SIGPIPE, SIG_IGN);
  DLOCK_RETURN_IF_ERROR(Prepare());
  std::optional<ProxyTarget> proxy_target;
  if (o_.cluster != nullptr) {
    member_faults_.emplace(*o_.cluster, [this](const std::string& op, int member,
                                               std::int64_t length_ns, const std::string& note) {
      Nemesis(op, member, length_ns, note);
    });
  } else if (std::any_of(o_.faults.begin(), o_.faults.end(), IsMemberFault)) {
    return InvalidArgumentError(
        "member faults need a cluster the run starts itself (dlock chaos --server-script "
        "scripts/servers/zookeeper.sh)");
  } else {
    DLOCK_ASSIGN_OR_RETURN(proxy_target, FindProxyTarget());
  }
  if (Wants("store-restart") && (o_.server_script.empty() || o_.server_dir.empty())) {
    return InvalidArgumentError(
        "the store-restart fault needs the store's server script and directory "
        "(--server-script scripts/servers/<store>.sh --server-dir DIR)");
  }
  DLOCK_RETURN_IF_ERROR(StartWorkers(proxy_target));
  DLOCK_RETURN_IF_ERROR(Supervise());
  return Collect();
}

Status Run::Prepare() {
  resource_ = o_.dir + "/resource.db";
  backend_ = o_.backend.empty() ? "sqlite://" + o_.dir + "/locks.db" : o_.backend;
  history_file_.open(o_.dir + "/history.jsonl");
  faults_file_.open(o_.dir + "/faults.log");
  // Creates the schema once, before the workers open it.
  DLOCK_RETURN_IF_ERROR(CounterResource::Open(resource_, o_.fenced).status());
  if (Wants("clock-step") && ::access(kFaketimeLib, R_OK) != 0) {
    return UnavailableError(std::string("the clock-step fault needs libfaketime (") +
                            kFaketimeLib + "): apt-get install faketime");
  }
  plan_ = PlanFaults(o_);
  LogPlan();
  return Status::Ok();
}

void Run::LogPlan() {
  for (const auto& f : plan_) {
    faults_file_ << "planned +" << f.at.count() << "ms " << f.kind;
    if (f.kind == "pause") faults_file_ << " " << f.ttl_factor << "x ttl";
    if (f.kind == "clock-step") {
      faults_file_ << " worker " << f.target << " " << f.clock_offset_s << "s";
    }
    faults_file_ << '\n';
  }
}

Result<std::optional<ProxyTarget>> Run::FindProxyTarget() const {
  if (std::none_of(o_.faults.begin(), o_.faults.end(),
                   [](const std::string& k) { return NeedsProxy(k); })) {
    return std::optional<ProxyTarget>();
  }
  auto uri = internal::ParseUri(backend_);
  const std::size_t colon = uri.ok() ? uri->hosts.rfind(':') : std::string::npos;
  if (!uri.ok() || uri->hosts.empty() || uri->hosts.find(',') != std::string::npos ||
      colon == std::string::npos) {
    return InvalidArgumentError(
        "the partition, delay and drop faults need a network store with one host:port "
        "(e.g. --backend redis://127.0.0.1:6379/0), not " +
        (uri.ok() ? uri->Redacted() : std::string("this URI")));
  }
  ProxyTarget target;
  target.host = uri->hosts.substr(0, colon);
  target.port = std::atoi(uri->hosts.c_str() + colon + 1);
  const std::size_t at = backend_.find(uri->hosts, backend_.find("://") + 3);
  target.uri_prefix = backend_.substr(0, at);
  target.uri_suffix = backend_.substr(at + uri->hosts.size());
  return std::optional<ProxyTarget>(std::move(target));
}

Status Run::StartWorkers(const std::optional<ProxyTarget>& proxy_target) {
  start_ns_ = NowNs();
  end_ns_ = start_ns_ + std::chrono::nanoseconds(o_.duration).count();
  drain_ns_ = end_ns_ + std::chrono::nanoseconds(o_.ttl * 6 + std::chrono::seconds(5)).count();
  workers_.resize(static_cast<std::size_t>(o_.workers));
  for (int i = 0; i < o_.workers; ++i) {
    WorkerProc& w = workers_[static_cast<std::size_t>(i)];
    w.id = i;
    if (o_.cluster != nullptr) {
      DLOCK_RETURN_IF_ERROR(AttachToMember(w));
    } else if (proxy_target) {
      DLOCK_ASSIGN_OR_RETURN(w.proxy, FaultProxy::Start(proxy_target->host, proxy_target->port));
      // A store named "localhost" keeps that name through its proxy (which
      // listens on 127.0.0.1): a TLS certificate for it still matches.
      const std::string proxy_host =
          proxy_target->host == "localhost" ? "localhost" : "127.0.0.1";
      w.backend = proxy_target->uri_prefix + proxy_host + ":" + std::to_string(w.proxy->port()) +
                  proxy_target->uri_suffix;
    }
    if (Wants("clock-step")) {
      w.faketime_file = o_.dir + "/faketime." + std::to_string(i);
      std::ofstream(w.faketime_file) << "+0\n";
    }
    DLOCK_RETURN_IF_ERROR(Spawn(w));
  }
  return Status::Ok();
}

Status Run::AttachToMember(WorkerProc& w) {
  // A leader-follower store's clients find the leader themselves (through
  // the sentinels, or libpq's list of hosts): the whole URI, no proxy.
  if (!o_.cluster->has_links()) {
    w.backend = backend_;
    return Status::Ok();
  }
  w.member = w.id % o_.cluster->members() + 1;
  DLOCK_ASSIGN_OR_RETURN(const int port, o_.cluster->ClientPort(w.member));
  DLOCK_ASSIGN_OR_RETURN(w.proxy, FaultProxy::Start("127.0.0.1", port));
  // The cluster's URI with this one member (through the proxy) as its hosts.
  auto uri = internal::ParseUri(backend_);
  if (!uri.ok()) return uri.status();
  const std::size_t at = backend_.find(uri->hosts, backend_.find("://") + 3);
  w.backend = backend_.substr(0, at) + "127.0.0.1:" + std::to_string(w.proxy->port()) +
              backend_.substr(at + uri->hosts.size());
  Event e;
  e.t_ns = NowNs();
  e.worker = w.id;
  e.op = "member";
  e.value = w.member;
  Record(std::move(e));
  return Status::Ok();
}

bool Run::InjectMemberFault(const PlannedFault& f, WorkerProc& w) {
  return member_faults_ && member_faults_->TryStart(f.kind, f.ttl_factor, o_.ttl, w.member);
}

Status Run::Supervise() {
  for (;;) {
    const std::int64_t now = NowNs();
    if (!ending_ && (now >= end_ns_ || StopRequested())) BeginEnding();
    DLOCK_RETURN_IF_ERROR(FireTimers(now));
    InjectDueFaults(now);

    std::vector<pollfd> fds;
    std::vector<WorkerProc*> owners;
    for (auto& w : workers_) {
      if (w.from_worker >= 0) {
        fds.push_back({w.from_worker, POLLIN, 0});
        owners.push_back(&w);
      }
    }
    if (ending_ && fds.empty()) return Status::Ok();
    if (ending_ && now >= drain_ns_) {
      KillStragglers();
      return Status::Ok();
    }
    const int timeout_ms =
        static_cast<int>(std::clamp<std::int64_t>((NextWake() - now) / 1'000'000 + 1, 0, 1000));
    ::poll(fds.data(), fds.size(), timeout_ms);
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents) ReadWorker(*owners[i]);
    }
  }
}

void Run::BeginEnding() {
  ending_ = true;
  for (auto& w : workers_) {
    if (w.paused) {
      ::kill(w.pid, SIGCONT);
      w.paused = false;
      Nemesis("resume", w.id);
    }
    if (w.to_worker >= 0) {
      ::close(w.to_worker);
      w.to_worker = -1;
    }
  }
  if (member_faults_) member_faults_->EndAll();
  resume_at_.clear();
  outliving_.clear();
  restart_at_.clear();
  for (auto& [id, t] : heal_at_) {
    WorkerProc& w = workers_[static_cast<std::size_t>(id)];
    if (w.proxy) w.proxy->SetMode(FaultProxy::Mode::kPass);
    Nemesis("heal", id);
  }
  heal_at_.clear();
  go_on_heal_.clear();
}

Status Run::FireTimers(std::int64_t now) {
  if (member_faults_) member_faults_->EndDue(now);
  for (auto it = resume_at_.begin(); it != resume_at_.end();) {
    const auto outliving = outliving_.find(it->first);
    if (it->second <= now && outliving != outliving_.end() && !outliving->second.overtaken &&
        now < outliving->second.until_ns) {
      it->second = now + std::chrono::nanoseconds(o_.ttl).count() / 10;  // look again
      ++it;
      continue;
    }
    if (it->second <= now) {
      if (outliving != outliving_.end()) outliving_.erase(outliving);
      WorkerProc& w = workers_[static_cast<std::size_t>(it->first)];
      ::kill(w.pid, SIGCONT);
      w.paused = false;
      Nemesis("resume", w.id);
      it = resume_at_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = restart_at_.begin(); it != restart_at_.end();) {
    if (it->second <= now) {
      WorkerProc& w = workers_[static_cast<std::size_t>(it->first)];
      ++w.incarnation;
      DLOCK_RETURN_IF_ERROR(Spawn(w));
      Nemesis("restart", w.id);
      it = restart_at_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = heal_at_.begin(); it != heal_at_.end();) {
    if (it->second <= now) {
      WorkerProc& w = workers_[static_cast<std::size_t>(it->first)];
      if (w.proxy) w.proxy->SetMode(FaultProxy::Mode::kPass);
      Nemesis("heal", w.id);
      if (go_on_heal_[w.id]) Go(w);
      go_on_heal_.erase(w.id);
      it = heal_at_.erase(it);
    } else {
      ++it;
    }
  }
  return Status::Ok();
}

void Run::InjectDueFaults(std::int64_t now) {
  while (!ending_ && next_fault_ < plan_.size() && !InCriticalSection(plan_[next_fault_].kind) &&
         start_ns_ + plan_[next_fault_].at.count() * 1'000'000 <= now) {
    Inject(plan_[next_fault_++]);
  }
}

void Run::Inject(const PlannedFault& f) {
  WorkerProc& w = workers_[static_cast<std::size_t>(f.target % o_.workers)];
  if (f.kind == "clock-step") {
    std::ofstream(w.faketime_file, std::ios::trunc)
        << (f.clock_offset_s >= 0 ? "+" : "") << f.clock_offset_s << "\n";
    Nemesis("clock-step", w.id, f.clock_offset_s * 1'000'000'000,
            "wall clock " + std::string(f.clock_offset_s >= 0 ? "+" : "") +
                std::to_string(f.clock_offset_s) + "s");
  } else if (f.kind == "delay" && w.proxy) {
    const auto delay = std::chrono::milliseconds(static_cast<std::int64_t>(
        static_cast<double>(o_.ttl.count()) * (0.25 + 0.75 * (f.ttl_factor - 0.5) / 2.5)));
    w.proxy->SetMode(FaultProxy::Mode::kDelay, delay);
    Nemesis("delay", w.id, std::chrono::nanoseconds(o_.ttl * 2).count(),
            "store traffic delayed " + std::to_string(delay.count()) + "ms");
    heal_at_[w.id] = NowNs() + std::chrono::nanoseconds(o_.ttl * 2).count();
  } else if (f.kind == "drop" && w.proxy) {
    w.proxy->SetMode(FaultProxy::Mode::kDrop);
    Nemesis("drop", w.id, 100'000'000, "store connections reset");
    heal_at_[w.id] = NowNs() + 100'000'000;
  } else if (f.kind == "store-restart") {
    Nemesis("store-down", -1, 0, "restarting the store server");
    const Status restarted =
        RunToLog({o_.server_script, "restart", o_.server_dir}, o_.dir + "/store-restart.log");
    Nemesis("store-up", -1, 0,
            restarted.ok() ? "" : "restart script failed: " + restarted.message());
  }
}

std::int64_t Run::NextWake() const {
  std::int64_t wake = ending_ ? drain_ns_ : end_ns_;
  for (auto& [id, t] : resume_at_) wake = std::min(wake, t);
  for (auto& [id, t] : restart_at_) wake = std::min(wake, t);
  for (auto& [id, t] : heal_at_) wake = std::min(wake, t);
  if (member_faults_) wake = std::min(wake, member_faults_->NextEnd());
  if (next_fault_ < plan_.size() && !InCriticalSection(plan_[next_fault_].kind)) {
    wake = std::min(wake, start_ns_ + plan_[next_fault_].at.count() * 1'000'000);
  }
  return wake;
}

void Run::ReadWorker(WorkerProc& w) {
  char buf[4096];
  ssize_t n;
  while ((n = ::read(w.from_worker, buf, sizeof buf)) > 0) {
    w.buffer.append(buf, static_cast<std::size_t>(n));
  }
  std::size_t nl;
  while ((nl = w.buffer.find('\n')) != std::string::npos) {
    auto e = ParseJsonLine(std::string_view(w.buffer).substr(0, nl));
    w.buffer.erase(0, nl + 1);
    if (e.ok()) OnEvent(w, *e);
    if (w.from_worker < 0) break;  // killed while handling
  }
  if (n == 0 && w.from_worker >= 0) {  // the worker exited
    const bool expected = ending_;
    CloseWorker(w);
    if (!expected) {
      Nemesis("exit", w.id, 0, "worker exited on its own; restarting");
      restart_at_[w.id] = NowNs() + 100'000'000;
    }
  }
}

void Run::KillStragglers() {
  for (auto& w : workers_) {
    if (w.pid > 0) {
      ::kill(w.pid, SIGKILL);
      Nemesis("kill", w.id, 0, "did not stop at the end of the run");
    }
    CloseWorker(w);
  }
}

Result<RunResult> Run::Collect() {
  RunResult result;
  result.dir = o_.dir;
  result.history.events = std::move(events_);
  std::stable_sort(result.history.events.begin(), result.history.events.end(),
                   [](const Event& a, const Event& b) { return a.t_ns < b.t_ns; });
  result.history.ttl_ms = o_.ttl.count();
  result.history.fenced = o_.fenced;
  DLOCK_RETURN_IF_ERROR(CounterResource::Load(resource_, &result.history.log,
                                              &result.history.final_counter));
  result.checks = RunCheckers(result.history, CheckOptions{});
  result.counts = Count(result.history);
  for (const auto& c : result.checks) {
    if (c.verdict != Verdict::kFail) continue;
    if (c.safety) ++result.violations;
    else ++result.recovery_failures;
  }
  return result;
}

}  // namespace

bool NeedsProxy(std::string_view kind) {
  return kind == "partition" || kind == "delay" || kind == "drop";
}

bool InCriticalSection(std::string_view kind) {
  return kind == "pause" || kind == "kill" || kind == "partition" || IsMemberFault(kind);
}

std::vector<PlannedFault> PlanFaults(const RunOptions& o) {
  std::vector<PlannedFault> plan;
  if (o.faults.empty()) return plan;
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const milliseconds spacing = std::max(o.ttl * 4, milliseconds(400));
  milliseconds at = o.ttl;  // let the workers warm up
  while (at + o.ttl * 2 < o.duration) {
    PlannedFault f;
    f.at = at;
    f.kind = o.faults[rng() % o.faults.size()];
    f.ttl_factor = 0.5 + 2.5 * unit(rng);
    f.target = static_cast<int>(rng() % static_cast<std::uint64_t>(std::max(o.workers, 1)));
    const std::int64_t magnitude = 60 + static_cast<std::int64_t>(rng() % 7200);
    f.clock_offset_s = (rng() % 2) ? magnitude : -magnitude;
    plan.push_back(f);
    // A pause needs time to play out before the next fault.
    const double stretch =
        (f.kind == "pause" || f.kind == "partition" || IsMemberFault(f.kind))
            ? f.ttl_factor / 2 + 0.75
            : 0.75;
    at += milliseconds(static_cast<std::int64_t>(
        static_cast<double>(spacing.count()) * (stretch + 0.5 * unit(rng))));
  }
  return plan;
}

Result<RunResult> RunOnce(const RunOptions& options) { return Run(options).Execute(); }

void RequestStop() { stop_requested = true; }
bool StopRequested() { return stop_requested; }

}  // namespace dlock::harness
