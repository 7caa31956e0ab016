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

bool task_reports_events(int task) {
  return task >= 1 && task <= kTaskCount && why_task_reports_no_events(task).empty();
}

std::string_view why_task_reports_no_events(int task) {
  switch (task) {
    case 1:
      return "task 1 (meta-device init) runs once, before the first step";
    case 2:
      return "task 2 (the FlatParameter's layout) runs once, before the first step";
    case 9:
      return "task 9's copies (CPU offload) run inside the gathers, reductions and optimizer step of other tasks, "
             "whose events they are";
    default:
      return "";
  }
}

bool task_reports_events(int task, const FsdpOptions& options, int world) {
  return task >= 1 && task <= kTaskCount && why_task_reports_no_events(task, options, world).empty();
}

std::string why_task_reports_no_events(int task, const FsdpOptions& options, int world) {
  if (const std::string_view never = why_task_reports_no_events(task); !never.empty()) return std::string(never);
  const std::string strategy = "--strategy " + std::string(strategy_name(options.strategy));
  const PrefetchPolicy& prefetch = options.prefetch;
  switch (task) {
    case 6:
      // What the reference's `after` and the lifecycle's next-step gather can issue (overlap_reference.cpp).
      if (options.mode == OverlapMode::sync)
        return "task 6 (prefetch and overlap) issues nothing under SYNC (no prefetch)";
      if (parameters_replicated(options.strategy))
        return "task 6 (prefetch and overlap) gathers units ahead of their use, and " + strategy +
               " keeps the whole parameters on every rank: it gathers none";
      if (!prefetch.forward && prefetch.backward == BackwardPrefetch::none && !prefetch.next_step)
        return "task 6 (prefetch and overlap) issues nothing with --prefetch none";
      if (!reshards_after_forward(options.strategy) && !prefetch.forward && !prefetch.next_step)
        return "task 6 (prefetch and overlap) fetches ahead in the backward only (--prefetch " +
               prefetch_name(prefetch) + "), and under " + strategy +
               " the backward's units stay gathered from the forward";
      return "";
    case 8:
      if (replica_group_size(options, world) <= 1)
        return "task 8 (hybrid shard) all-reduces across replica groups, and this run has none of more than one rank "
               "(--strategy hybrid --hybrid-group S, with S below --world, makes them)";
      return "";
    default:
      return "";
  }
}

}  // namespace fsdplab
