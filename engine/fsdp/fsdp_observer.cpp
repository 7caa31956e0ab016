#include "engine/fsdp/fsdp_observer.hpp"

#include <array>

#include "engine/fsdp/fsdp_tasks.hpp"

namespace fsdplab {

std::string_view fsdp_event_name(FsdpEventKind kind) {
  constexpr std::array<std::string_view, kFsdpEventKindCount> names = {
      "pre-forward",       "post-forward",    "pre-backward",  "post-backward",
      "collective issued", "collective done", "optimizer step"};
  return names[static_cast<std::size_t>(kind)];
}

bool task_reports_events(int task, OverlapMode mode, int replica_ranks) {
  return task >= 1 && task <= kTaskCount && why_task_reports_no_events(task, mode, replica_ranks).empty();
}

std::string_view why_task_reports_no_events(int task, OverlapMode mode, int replica_ranks) {
  switch (task) {
    case 1:
      return "task 1 (meta-device init) runs once, before the first step";
    case 2:
      return "task 2 (the FlatParameter's layout) runs once, before the first step";
    case 6:
      if (mode == OverlapMode::sync) return "task 6 (prefetch and overlap) issues nothing under SYNC (no prefetch)";
      return "";
    case 8:
      if (replica_ranks <= 1)
        return "task 8 (hybrid shard) all-reduces across replica groups, and this run has none of more than one rank "
               "(--strategy hybrid --hybrid-group S, with S below --world, makes them)";
      return "";
    case 9:
      return "task 9's copies (CPU offload) run inside the gathers, reductions and optimizer step of other tasks, "
             "whose events they are";
    default:
      return "";
  }
}

}  // namespace fsdplab
