#include "app/dashboard/step_comparison.hpp"

#include <algorithm>
#include <cstdio>

namespace fsdplab::app {

std::optional<double> StepComparison::eta() const {
  if (compared == 0 || t_sync_ms <= ideal_ms()) return std::nullopt;
  return (t_sync_ms - t_async_ms) / (t_sync_ms - ideal_ms());
}

StepComparison compare_steps(const TraceStore& store, int window) {
  StepComparison c;
  for (int s = 0; s < static_cast<int>(store.sources().size()); ++s) {
    for (const StepTime& t : store.source(s).steps) {
      StepSeries& series = t.sync ? c.sync : c.async;
      if (series.source < 0) series.source = s;
      if (series.source == s) series.steps.push_back(&t);
    }
  }
  // The latest `window` steps of each, step 0 left out.
  const auto recent = [&](const StepSeries& series) {
    std::vector<const StepTime*> r;
    for (const StepTime* t : series.steps)
      if (t->step > 0) r.push_back(t);
    if (r.size() > static_cast<std::size_t>(window)) r.erase(r.begin(), r.end() - window);
    return r;
  };
  const std::vector<const StepTime*> sync = recent(c.sync);
  const std::vector<const StepTime*> async = recent(c.async);
  c.compared = static_cast<int>(std::min(sync.size(), async.size()));
  if (c.compared == 0) return c;
  const auto mean = [&](const std::vector<const StepTime*>& steps, auto field) {
    double sum = 0;
    for (std::size_t i = steps.size() - static_cast<std::size_t>(c.compared); i < steps.size(); ++i)
      sum += ns_to_ms(field(*steps[i]));
    return sum / c.compared;
  };
  c.t_sync_ms = mean(sync, [](const StepTime& t) { return t.duration(); });
  c.t_async_ms = mean(async, [](const StepTime& t) { return t.duration(); });
  // Compute and comm are the schedule-free parts of a step: taken from the ASYNC steps (SYNC's are the same work).
  c.compute_ms = mean(async, [](const StepTime& t) { return t.compute; });
  c.comm_ms = mean(async, [](const StepTime& t) { return t.comm; });
  return c;
}

void print_step_comparison(const TraceStore& store) {
  const StepComparison c = compare_steps(store);
  std::printf("step   SYNC (ms)  ASYNC (ms)  compute (ms)  comm (ms)\n");
  const std::size_t n = std::max(c.sync.steps.size(), c.async.steps.size());
  for (std::size_t i = 0; i < n; ++i) {
    const StepTime* s = i < c.sync.steps.size() ? c.sync.steps[i] : nullptr;
    const StepTime* a = i < c.async.steps.size() ? c.async.steps[i] : nullptr;
    const StepTime* any = a ? a : s;
    std::printf("%4d  %10.3f  %10.3f  %12.3f  %9.3f\n", any->step, s ? ns_to_ms(s->duration()) : 0.0,
                a ? ns_to_ms(a->duration()) : 0.0, ns_to_ms(any->compute), ns_to_ms(any->comm));
  }
  if (c.compared == 0) return;
  std::printf("mean of the last %d steps (step 0 left out): T_sync %.3f ms, T_async %.3f ms, compute %.3f ms, "
              "comm %.3f ms, ideal max(compute, comm) %.3f ms: ",
              c.compared, c.t_sync_ms, c.t_async_ms, c.compute_ms, c.comm_ms, c.ideal_ms());
  if (const auto eta = c.eta()) {
    std::printf("eta = (T_sync - T_async) / (T_sync - ideal) = %.3f\n", *eta);
  } else {
    std::printf("eta undefined (T_sync <= ideal: nothing to hide)\n");
  }
}

}  // namespace fsdplab::app
