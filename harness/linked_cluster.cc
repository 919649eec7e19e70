#include "harness/linked_cluster.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>

#include "harness/child_process.h"

namespace dlock::harness {
namespace {

// The member an etcd peer request comes from: its X-Server-From header.
std::optional<std::string> EtcdSender(std::string_view head) {
  const std::size_t end = head.find("\r\n\r\n");
  const std::string_view headers = head.substr(0, end);
  constexpr std::string_view kName = "\r\nX-Server-From: ";
  if (const std::size_t at = headers.find(kName); at != std::string_view::npos) {
    const std::size_t from = at + kName.size();
    return std::string(headers.substr(from, headers.find("\r\n", from) - from));
  }
  if (end == std::string_view::npos) return std::nullopt;  // more to come
  return std::string();
}

}  // namespace

Result<std::unique_ptr<LinkedCluster>> LinkedCluster::Start(const std::string& script,
                                                            const std::string& dir,
                                                            const Check& check) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return UnavailableError("cannot create " + dir + ": " + ec.message());
  std::unique_ptr<LinkedCluster> c(new LinkedCluster(script, dir));
  DLOCK_RETURN_IF_ERROR(c->Script({"configure-linked", dir}));
  DLOCK_RETURN_IF_ERROR(c->ReadLinks());
  if (check) DLOCK_RETURN_IF_ERROR(check(*c));
  DLOCK_RETURN_IF_ERROR(c->Script({"launch", dir}, &c->uri_));
  while (!c->uri_.empty() && (c->uri_.back() == '\n' || c->uri_.back() == ' ')) c->uri_.pop_back();
  if (c->uri_.empty()) return UnavailableError(script + " launch printed no URI");
  const bool tagged = std::any_of(c->links_.begin(), c->links_.end(),
                                  [](const Link& l) { return l.from == 0; });
  for (int n = 1; tagged && n <= c->members_; ++n) {
    std::string id;
    DLOCK_RETURN_IF_ERROR(c->Script({"member-id", dir, std::to_string(n)}, &id));
    while (!id.empty() && id.back() == '\n') id.pop_back();
    c->ids_.push_back(id);
  }
  return c;
}

LinkedCluster::~LinkedCluster() {
  links_.clear();  // the proxies first: a stopping member need not wait on a cut link
  (void)Script({"stop", dir_});
}

Status LinkedCluster::CopyLogsTo(const std::string& dest) const {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dest, ec);
  if (ec) return UnavailableError("cannot create " + dest + ": " + ec.message());
  const auto copy = [&](const fs::path& from, const fs::path& to) {
    fs::create_directories(to.parent_path(), ec);
    if (!ec) fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  };
  copy(dir_ + ".log", fs::path(dest) / "script.log");
  for (fs::recursive_directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec) && it->path().extension() == ".log") {
      copy(it->path(), dest / fs::relative(it->path(), dir_, ec));
    }
  }
  if (ec) return UnavailableError("copying the cluster's logs to " + dest + ": " + ec.message());
  return Status::Ok();
}

Status LinkedCluster::Script(std::vector<std::string> args, std::string* out) const {
  args.insert(args.begin(), {"/bin/bash", script_});
  return RunToLog(std::move(args), dir_ + ".log", out);
}

// DIR/links: "FROM TO LISTEN TARGET" per line; a proxy on each LISTEN port.
// DIR/members, if there, names a count of members the links do not.
Status LinkedCluster::ReadLinks() {
  if (std::ifstream count(dir_ + "/members"); count && !(count >> members_)) {
    return InvalidArgumentError(dir_ + "/members: not a number of members");
  }
  std::ifstream in(dir_ + "/links");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    Link link;
    int listen = 0, target = 0;
    if (!(words >> link.from >> link.to >> listen >> target) || link.from < 0 || link.to < 1) {
      return InvalidArgumentError(dir_ + "/links: not \"FROM TO LISTEN TARGET\": " + line);
    }
    DLOCK_ASSIGN_OR_RETURN(link.proxy,
                           FaultProxy::Start("127.0.0.1", target, listen,
                                             link.from == 0 ? EtcdSender : FaultProxy::Tagger()));
    members_ = std::max({members_, link.from, link.to});
    links_.push_back(std::move(link));
  }
  if (members_ < 2) {
    return InvalidArgumentError(script_ + " configure-linked named fewer than 2 members");
  }
  return Status::Ok();
}

Result<int> LinkedCluster::ClientPort(int member) const {
  std::string out;
  DLOCK_RETURN_IF_ERROR(Script({"port", dir_, std::to_string(member)}, &out));
  const int port = std::atoi(out.c_str());
  if (port <= 0) return UnavailableError(script_ + " port printed '" + out + "'");
  return port;
}

Result<int> LinkedCluster::Leader() const {
  std::string out;
  DLOCK_RETURN_IF_ERROR(Script({"leader", dir_}, &out));
  const int n = std::atoi(out.c_str());
  if (n < 1 || n > members_) return UnavailableError(script_ + " leader printed '" + out + "'");
  return n;
}

void LinkedCluster::CutLinks(int member, bool cut) {
  const FaultProxy::Mode mode = cut ? FaultProxy::Mode::kPartition : FaultProxy::Mode::kPass;
  for (auto& link : links_) {
    if (link.to == member || link.from == member) {
      link.proxy->SetMode(mode);
    } else if (link.from == 0 && static_cast<std::size_t>(member) <= ids_.size()) {
      link.proxy->SetTagMode(ids_[static_cast<std::size_t>(member) - 1],
                             cut ? std::optional(mode) : std::nullopt);
    }
  }
}

void LinkedCluster::Isolate(int member) {
  CutLinks(member, true);
  isolated_.insert(member);
}

// One member is cut off at a time (MemberFaults), so a rejoin restores all
// of its links.
void LinkedCluster::Rejoin(int member) {
  isolated_.erase(member);
  CutLinks(member, false);
}

Status LinkedCluster::Pause(int member) {
  DLOCK_RETURN_IF_ERROR(Script({"pause", dir_, std::to_string(member)}));
  paused_.insert(member);
  return Status::Ok();
}

Status LinkedCluster::Resume(int member) {
  paused_.erase(member);
  return Script({"resume", dir_, std::to_string(member)});
}

Status LinkedCluster::Kill(int member) {
  DLOCK_RETURN_IF_ERROR(Script({"kill", dir_, std::to_string(member)}));
  killed_.insert(member);
  return Status::Ok();
}

Status LinkedCluster::Restart(int member) {
  killed_.erase(member);
  return Script({"restart", dir_, std::to_string(member)});
}

Result<int> LinkedCluster::HoldBack() {
  std::string out;
  DLOCK_RETURN_IF_ERROR(Script({"hold-back", dir_}, &out));
  const int n = std::atoi(out.c_str());
  if (n < 1 || n > members_) return UnavailableError(script_ + " hold-back printed '" + out + "'");
  paused_.insert(n);
  return n;
}

Status LinkedCluster::SetKey(const std::string& key) {
  std::ofstream out(dir_ + "/key", std::ios::trunc);
  out << key << '\n';
  if (!out.flush()) return UnavailableError("cannot write " + dir_ + "/key");
  return Status::Ok();
}

Status LinkedCluster::Heal() {
  for (int m : std::set<int>(isolated_)) Rejoin(m);
  for (int m : std::set<int>(paused_)) DLOCK_RETURN_IF_ERROR(Resume(m));
  for (int m : std::set<int>(killed_)) DLOCK_RETURN_IF_ERROR(Restart(m));
  // A leader-follower store is whole again only once its follower follows
  // the new leader: a run started earlier would find no replica to lose.
  if (links_.empty()) return Script({"settle", dir_});
  return Status::Ok();
}

}  // namespace dlock::harness
