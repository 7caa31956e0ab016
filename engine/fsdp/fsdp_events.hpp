// fsdp_events.hpp — how FSDP code reports to FsdpRank::observer (fsdp_observer.hpp): which task's code
// is running (ActivityScope), and the events of a unit's hooks and of the optimizer step, each with a
// plain sentence of what happened.
//
// Attribution. The hooks (fully_sharded_model.cpp) and the trainer put an ActivityScope around each task
// call naming the task and its code; a collective issued inside is reported as that code's
// (ObservedCommunicator) — with one exception: an all-gather of another unit than the hook's own is a
// prefetch, which task 6 decides (OverlapTask::after calls ForwardTask::prefetch from inside a task 3 or 4
// call), so it is reported as task 6's. The unit's own gather in pre-forward is task 3's, the gather again
// in pre-backward and the reduction in post-backward task 4's, the optimizer's collectives task 5's.
// Nothing here runs while no observer is set.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "engine/fsdp/fsdp_observer.hpp"

namespace fsdplab {

// The places FSDP code runs from, each one interface method of one task.
enum class FsdpCode {
  begin_forward,   // OverlapTask::begin_forward, task 6
  pre_forward,     // ForwardTask::pre_forward, task 3
  post_forward,    // ForwardTask::post_forward, task 3
  pre_backward,    // BackwardTask::pre_backward, task 4
  post_backward,   // BackwardTask::post_backward, task 4
  end_backward,    // OverlapTask::end_backward, task 6
  prefetch,        // OverlapTask::after -> ForwardTask::prefetch, task 6
  optimizer_step,  // ShardedOptimizerTask::step, task 5
};

struct CodeSite {
  int task = 0;
  std::string code;  // "ForwardTask::pre_forward (engine/fsdp/forward_reference.cpp)"
};

// The task of `site`, and its method with the file of the implementation `rank` runs ("a non-reference
// implementation" for one that is not the reference, such as a lab skeleton).
CodeSite code_site(const FsdpRank& rank, FsdpCode site);

// Makes `site` the rank's current activity, for the hook of `unit` (-1: outside the hooks), with nothing
// issued yet, until the scope ends; then the previous activity is back. Does nothing without an observer.
class ActivityScope {
 public:
  ActivityScope(FsdpRank& rank, FsdpCode site, int unit = -1);
  ActivityScope(FsdpRank& rank, CodeSite site, int unit = -1);
  ~ActivityScope();
  ActivityScope(const ActivityScope&) = delete;
  ActivityScope& operator=(const ActivityScope&) = delete;

 private:
  FsdpRank* rank_ = nullptr;  // null when no observer listens
  FsdpActivity saved_;
};

// An event of `kind` by the code of `task` saying `what`; the caller adds what else it knows (the unit,
// the collective) and report() the rest.
FsdpEvent make_event(FsdpEventKind kind, int task, std::string code, std::string what);
// Stamps `event` with the rank, the step (the ops' label) and the host time, and tells the observer.
void report(FsdpRank& rank, FsdpEvent event);

// After `kind`'s task call of `unit`'s hook, inside its ActivityScope: tells the observer, saying what the
// call did from the unit's state `before` it, the state after, and the collectives it issued.
void report_unit_event(FsdpRank& rank, const FsdpUnit& unit, FsdpEventKind kind, UnitState before);

// After ShardedOptimizerTask::step returned, inside its ActivityScope.
void report_optimizer_step(FsdpRank& rank, std::span<FsdpUnit* const> units, std::string_view optimizer);

// "unit 2 'transformer.h.1'" for a unit index of this rank; "" for -1.
std::string unit_title(const FsdpRank& rank, int unit);
// "1.8 MB bf16", "96.0 KB f32": decimal units, as the example sentences of fsdp_observer.hpp.
std::string size_text(std::int64_t bytes, DType dtype);

}  // namespace fsdplab
