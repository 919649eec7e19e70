#include "dlock/waits.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace dlock {

bool RenewalsArriving(const HolderInfo& holder) {
  if (holder.ttl <= std::chrono::milliseconds(0)) return true;
  return holder.ttl - holder.ttl_remaining <= holder.ttl / 2;
}

namespace {

using Session = std::uint64_t;
// Party -> the parties holding a key it waits for (never itself).
using Edges = std::map<Session, std::set<Session>>;
using HoldersByKey = std::multimap<std::string, const HolderInfo*>;

struct WaitGraph {
  std::map<Session, WaitParty> parties;
  HoldersByKey by_key;  // points into the holders it was built from
  Edges edges;
};

WaitParty& PartyOf(std::map<Session, WaitParty>& parties, const OwnerId& owner,
                   const std::string& label) {
  WaitParty& p = parties[owner.session()];
  p.session = owner.session();
  if (p.label.empty()) p.label = label;
  return p;
}

WaitGraph BuildGraph(std::span<const HolderInfo> holders, std::span<const WaiterInfo> waiters) {
  WaitGraph graph;
  for (const HolderInfo& h : holders) {
    PartyOf(graph.parties, h.owner, h.label).holds.push_back(h);
    graph.by_key.emplace(h.key, &h);
  }
  for (const WaiterInfo& w : waiters) {
    PartyOf(graph.parties, w.owner, w.label).waits.push_back(w);
    auto [lo, hi] = graph.by_key.equal_range(w.key);
    for (auto it = lo; it != hi; ++it) {
      const Session q = it->second->owner.session();
      if (q != w.owner.session()) graph.edges[w.owner.session()].insert(q);
    }
  }
  return graph;
}

const std::set<Session>& EdgesFrom(const Edges& edges, Session from) {
  static const std::set<Session> kNone;
  auto it = edges.find(from);
  return it == edges.end() ? kNone : it->second;
}

// The members of one cycle in wait order: start at the smallest session and
// follow edges inside the cycle.
std::vector<Session> WaitOrder(const std::vector<Session>& component, const Edges& edges) {
  std::set<Session> members(component.begin(), component.end());
  std::vector<Session> order{*members.begin()};
  std::set<Session> seen{order.front()};
  while (order.size() < members.size()) {
    std::optional<Session> to;
    for (Session c : EdgesFrom(edges, order.back())) {
      if (members.count(c) && !seen.count(c)) {
        to = c;
        break;
      }
    }
    if (!to) {  // not a simple ring: list the rest in session order
      for (Session c : members) {
        if (!seen.count(c)) order.push_back(c), seen.insert(c);
      }
      break;
    }
    order.push_back(*to);
    seen.insert(*to);
  }
  return order;
}

// Tarjan's strongly connected components; every component with more than
// one party is a cycle (a party waiting for itself is no edge).
class CycleFinder {
 public:
  explicit CycleFinder(const Edges& edges) : edges_(edges) {}

  // The cycles, each in wait order, visiting the parties in session order.
  std::vector<std::vector<Session>> Find(const std::map<Session, WaitParty>& parties) {
    for (const auto& [session, party] : parties) {
      if (!index_.count(session)) Visit(session);
    }
    return std::move(cycles_);
  }

 private:
  void Visit(Session v) {
    index_[v] = low_[v] = next_++;
    stack_.push_back(v);
    on_stack_.insert(v);
    for (Session w : EdgesFrom(edges_, v)) {
      if (!index_.count(w)) {
        Visit(w);
        low_[v] = std::min(low_[v], low_[w]);
      } else if (on_stack_.count(w)) {
        low_[v] = std::min(low_[v], index_[w]);
      }
    }
    if (low_[v] != index_[v]) return;
    std::vector<Session> component;
    Session w;
    do {
      w = stack_.back();
      stack_.pop_back();
      on_stack_.erase(w);
      component.push_back(w);
    } while (w != v);
    if (component.size() >= 2) cycles_.push_back(WaitOrder(component, edges_));
  }

  const Edges& edges_;
  std::map<Session, int> index_, low_;
  std::set<Session> on_stack_;
  std::vector<Session> stack_;
  int next_ = 0;
  std::vector<std::vector<Session>> cycles_;
};

WaitVerdict Judge(const WaiterInfo& w, const HoldersByKey& by_key,
                  const std::map<Session, std::size_t>& cycle_of) {
  WaitVerdict v;
  v.waiter = w;
  auto [lo, hi] = by_key.equal_range(w.key);
  bool blocker_in_my_cycle = false;
  auto mine = cycle_of.find(w.owner.session());
  for (auto it = lo; it != hi; ++it) {
    const Session q = it->second->owner.session();
    if (q == w.owner.session()) continue;
    v.blocked_by.push_back(*it->second);
    auto theirs = cycle_of.find(q);
    if (mine != cycle_of.end() && theirs != cycle_of.end() && theirs->second == mine->second) {
      blocker_in_my_cycle = true;
    }
  }
  if (blocker_in_my_cycle) {
    v.kind = WaitVerdict::Kind::kInCycle;
    v.cycle = mine->second;
  } else if (v.blocked_by.empty()) {
    v.kind = WaitVerdict::Kind::kBehindQueue;
  } else {
    v.kind = WaitVerdict::Kind::kBehindHolder;
  }
  return v;
}

}  // namespace

WaitReport AnalyzeWaits(std::span<const HolderInfo> holders,
                        std::span<const WaiterInfo> waiters) {
  WaitGraph graph = BuildGraph(holders, waiters);
  WaitReport report;
  report.cycles = CycleFinder(graph.edges).Find(graph.parties);
  std::map<Session, std::size_t> cycle_of;
  for (std::size_t i = 0; i < report.cycles.size(); ++i) {
    for (Session m : report.cycles[i]) cycle_of[m] = i;
  }
  for (const WaiterInfo& w : waiters) report.verdicts.push_back(Judge(w, graph.by_key, cycle_of));
  for (auto& [session, party] : graph.parties) report.parties.push_back(std::move(party));
  return report;
}

}  // namespace dlock
