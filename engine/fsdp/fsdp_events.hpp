// fsdp_events.hpp — how FSDP code reports to FsdpRank::observer (fsdp_observer.hpp): which task's code
// is running (ActivityScope), and the events of a unit's hooks and of the optimizer step, each with a
// plain sentence of what happened.
//
// Attribution. The unit lifecycle (unit_lifecycle.cpp) and the trainer put an ActivityScope around each
// hook and step, naming the task whose decisions it runs and the implementation's class (file and line);
// a collective issued inside is reported as that code's (ObservedCommunicator). The unit's own gather in
// pre-forward is task 3's, the gather again in pre-backward and the reduction in post-backward task 4's,
// a gather of another unit ahead of its use task 6's (OverlapTask::after chose it), the optimizer's
// collectives task 5's.
// Nothing here runs while no observer is set.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "engine/fsdp/fsdp_observer.hpp"
#include "engine/fsdp/fsdp_task.hpp"

namespace fsdplab {

struct CodeSite {
  int task = 0;
  std::string
      code;  // "ForwardTask::all_gather, wait_for_unshard (in the class at engine/fsdp/forward_reference.cpp:8)"
};

// `methods` of task `task`, as implemented by `impl`, with the file and line of its class.
CodeSite task_site(int task, std::string_view methods, const FsdpTask& impl);

// Whether the collectives issued inside a scope are its own (a hook's: its event lists them), or also
// the enclosing activity's (a prefetch inside a hook: the hook's event says what it fetched ahead).
enum class IssuedTo { this_scope, enclosing };

// Makes `site` the rank's current activity, for the hook of `unit` (-1: outside the hooks), until the
// scope ends; then the previous activity is back. Does nothing without an observer, and builds nothing.
class ActivityScope {
 public:
  ActivityScope(FsdpRank& rank, int task, std::string_view methods, const FsdpTask& impl, int unit = -1,
                IssuedTo issued = IssuedTo::this_scope);
  ActivityScope(FsdpRank& rank, CodeSite site, int unit = -1);
  ~ActivityScope();
  ActivityScope(const ActivityScope&) = delete;
  ActivityScope& operator=(const ActivityScope&) = delete;

 private:
  void enter(CodeSite site, int unit);

  FsdpRank* rank_ = nullptr;  // null when no observer listens
  FsdpActivity saved_;
  IssuedTo issued_ = IssuedTo::this_scope;
};

// An event of `kind` by the code of `task` saying `what`; the caller adds what else it knows (the unit,
// the collective) and report() the rest.
FsdpEvent make_event(FsdpEventKind kind, int task, std::string code, std::string what);
// Stamps `event` with the rank, the step (the ops' label) and the host time, and tells the observer.
void report(FsdpRank& rank, FsdpEvent event);

// After `kind`'s task call of `unit`'s hook, inside its ActivityScope: tells the observer, saying what the
// call did from the unit's state `before` it, the state after, and the collectives it issued.
void report_unit_event(FsdpRank& rank, const FsdpUnit& unit, FsdpEventKind kind, UnitState before);

// After ShardedOptimizerTask::step returned, inside its ActivityScope; max_grad_norm > 0 when the step clipped.
void report_optimizer_step(FsdpRank& rank, std::span<FsdpUnit* const> units, std::string_view optimizer,
                           double max_grad_norm);

// "unit 2 'transformer.h.1'" for a unit index of this rank; "" for -1.
std::string unit_title(const FsdpRank& rank, int unit);
// "1.80 MB bf16", "96.0 kB f32": format_bytes (byte_text.hpp) and the dtype.
std::string size_text(std::int64_t bytes, DType dtype);

}  // namespace fsdplab
