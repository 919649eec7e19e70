#include "dlock/waits.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

namespace dlock {

bool RenewalsArriving(const HolderInfo& holder) {
  if (holder.ttl <= std::chrono::milliseconds(0)) return true;
  return holder.ttl - holder.ttl_remaining <= holder.ttl / 2;
}

WaitReport AnalyzeWaits(std::span<const HolderInfo> holders,
                        std::span<const WaiterInfo> waiters) {
  WaitReport report;
  std::map<std::uint64_t, WaitParty> parties;
  std::multimap<std::string, const HolderInfo*> by_key;
  for (const HolderInfo& h : holders) {
    WaitParty& p = parties[h.owner.session()];
    p.session = h.owner.session();
    if (p.label.empty()) p.label = h.label;
    p.holds.push_back(h);
    by_key.emplace(h.key, &h);
  }
  // Edges: party -> parties holding a key it waits for.
  std::map<std::uint64_t, std::set<std::uint64_t>> edges;
  for (const WaiterInfo& w : waiters) {
    WaitParty& p = parties[w.owner.session()];
    p.session = w.owner.session();
    if (p.label.empty()) p.label = w.label;
    p.waits.push_back(w);
    auto [lo, hi] = by_key.equal_range(w.key);
    for (auto it = lo; it != hi; ++it) {
      const std::uint64_t q = it->second->owner.session();
      if (q != w.owner.session()) edges[w.owner.session()].insert(q);
    }
  }

  // Tarjan's strongly connected components; every component with more than
  // one party is a cycle (self-waits are not edges, see above).
  std::map<std::uint64_t, int> index, low;
  std::set<std::uint64_t> on_stack;
  std::vector<std::uint64_t> stack;
  int next = 0;
  std::map<std::uint64_t, std::size_t> cycle_of;
  std::function<void(std::uint64_t)> visit = [&](std::uint64_t v) {
    index[v] = low[v] = next++;
    stack.push_back(v);
    on_stack.insert(v);
    for (std::uint64_t w : edges[v]) {
      if (!index.count(w)) {
        visit(w);
        low[v] = std::min(low[v], low[w]);
      } else if (on_stack.count(w)) {
        low[v] = std::min(low[v], index[w]);
      }
    }
    if (low[v] != index[v]) return;
    std::vector<std::uint64_t> component;
    std::uint64_t w;
    do {
      w = stack.back();
      stack.pop_back();
      on_stack.erase(w);
      component.push_back(w);
    } while (w != v);
    if (component.size() < 2) return;
    // Wait order: start at the smallest session, follow edges inside.
    std::set<std::uint64_t> members(component.begin(), component.end());
    std::vector<std::uint64_t> order{*members.begin()};
    std::set<std::uint64_t> seen{order.front()};
    while (order.size() < members.size()) {
      std::uint64_t from = order.back(), to = 0;
      bool found = false;
      for (std::uint64_t c : edges[from]) {
        if (members.count(c) && !seen.count(c)) {
          to = c;
          found = true;
          break;
        }
      }
      if (!found) {  // not a simple ring: list the rest in session order
        for (std::uint64_t c : members) {
          if (!seen.count(c)) order.push_back(c), seen.insert(c);
        }
        break;
      }
      order.push_back(to);
      seen.insert(to);
    }
    for (std::uint64_t m : order) cycle_of[m] = report.cycles.size();
    report.cycles.push_back(std::move(order));
  };
  for (const auto& [session, party] : parties) {
    if (!index.count(session)) visit(session);
  }

  for (const WaiterInfo& w : waiters) {
    WaitVerdict v;
    v.waiter = w;
    auto [lo, hi] = by_key.equal_range(w.key);
    bool blocker_in_my_cycle = false;
    auto mine = cycle_of.find(w.owner.session());
    for (auto it = lo; it != hi; ++it) {
      const std::uint64_t q = it->second->owner.session();
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
    report.verdicts.push_back(std::move(v));
  }
  for (auto& [session, party] : parties) report.parties.push_back(std::move(party));
  return report;
}

}  // namespace dlock
