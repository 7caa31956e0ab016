// kernel_breakdown.cpp — a rank's device work grouped and summed per step, and two such sums compared.
#include "engine/trace/kernel_breakdown.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>

#include "engine/runtime/error.hpp"

namespace fsdplab {

KernelBreakdown kernel_breakdown(std::span<const TraceEvent> events, int rank, int first_step, int steps,
                                 const std::function<std::string(const TraceEvent&)>& key) {
  check(steps >= 1, "kernel_breakdown: ", steps, " steps; expected at least 1");
  struct Sum {
    std::int64_t calls = 0;
    SimTime time = 0;  // integer nanoseconds: the sums are exact, whatever the order of the events
  };
  std::map<std::string, Sum> sums;
  SimTime total = 0;
  for (const TraceEvent& e : events) {
    if (e.rank != rank || e.lane == Lane::host || e.step < first_step || e.step >= first_step + steps) continue;
    check(e.end >= e.begin, "kernel_breakdown: '", e.name, "' on rank ", e.rank, " ends at ", e.end,
          " ns, before it begins at ", e.begin, " ns");
    Sum& sum = sums[key(e)];
    ++sum.calls;
    sum.time += e.end - e.begin;
    total += e.end - e.begin;
  }
  KernelBreakdown out;
  const double n = static_cast<double>(steps);
  for (const auto& [name, sum] : sums) {
    out.groups.push_back({name, static_cast<double>(sum.calls) / n, ns_to_ms(sum.time) / n,
                          total > 0 ? static_cast<double>(sum.time) / static_cast<double>(total) : 0.0});
  }
  // The map gave them by key: a stable sort by time keeps equal times in that order.
  std::stable_sort(out.groups.begin(), out.groups.end(),
                   [](const KernelGroup& a, const KernelGroup& b) { return a.ms_per_step > b.ms_per_step; });
  out.gpu_ms_per_step = ns_to_ms(total) / n;
  return out;
}

std::string op_group(const TraceEvent& e) {
  return is_communication(e.category) ? std::string(category_name(e.category)) : e.name;
}

std::vector<KernelChange> kernel_changes(const KernelBreakdown& before, const KernelBreakdown& after) {
  std::map<std::string, KernelChange> by_key;
  for (const KernelGroup& g : before.groups) {
    KernelChange& c = by_key[g.key];
    c.key = g.key;
    c.before_calls = g.calls_per_step;
    c.before_ms = g.ms_per_step;
  }
  for (const KernelGroup& g : after.groups) {
    KernelChange& c = by_key[g.key];
    c.key = g.key;
    c.after_calls = g.calls_per_step;
    c.after_ms = g.ms_per_step;
  }
  std::vector<KernelChange> out;
  for (auto& [key, change] : by_key) out.push_back(std::move(change));
  // By key from the map; a stable sort by the size of the change keeps equal changes in that order.
  std::stable_sort(out.begin(), out.end(), [](const KernelChange& a, const KernelChange& b) {
    return std::abs(a.change_ms()) > std::abs(b.change_ms());
  });
  return out;
}

}  // namespace fsdplab
