// step_comparison.hpp — SYNC against ASYNC from the step times a trace store holds: the averages the
// step-time panel draws as lines and the headless default job prints, with bench_overlap's definitions:
//   compute  |union of compute| on rank 0 per step (what a step would take with a free link)
//   comm     rank 0's link busy time per step (what it would take with infinitely fast compute)
//   ideal    max(compute, comm): perfect overlap
//   eta      (T_sync − T_async) / (T_sync − ideal): the share of what perfect overlap would save that
//            ASYNC does save; undefined where T_sync ≤ ideal (nothing to hide)
// SYNC steps come from the first source whose steps ran SYNC, ASYNC ones from the first whose steps ran
// ASYNC; an A/B source provides both. Step 0 (warm-up: first allocations, the recorded forward order)
// is left out; the averages cover the latest `window` steps of each series.
#pragma once
#include <optional>
#include <vector>

#include "app/dashboard/trace_store.hpp"

namespace fsdplab::app {

struct StepSeries {
  int source = -1;
  std::vector<const StepTime*> steps;  // in step order
};

struct StepComparison {
  StepSeries sync, async;
  int compared = 0;  // steps averaged in each series (the smaller count)
  double t_sync_ms = 0, t_async_ms = 0, compute_ms = 0, comm_ms = 0;
  double ideal_ms() const { return compute_ms > comm_ms ? compute_ms : comm_ms; }
  std::optional<double> eta() const;
};

StepComparison compare_steps(const TraceStore& store, int window = 10);

// The headless default job's table: each step's SYNC and ASYNC times side by side, then the averages
// and eta, on stdout.
void print_step_comparison(const TraceStore& store);

}  // namespace fsdplab::app
