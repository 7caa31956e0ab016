// fsdp_observer.hpp — what FSDP code tells a watcher as it runs: one event per hook of a unit, per
// collective issued and completed, and per optimizer step, each saying which lab task's code did it.
//
// This is what step-through is built on: the dashboard shows the latest events ("what just happened,
// which task's code did it") and RunControl (engine/train/run_control.hpp) can stop the world at any of
// them. Events are made only when FsdpRank::observer is set; a run without one builds nothing.
// The observer is called on the rank's own thread, in the order the rank did things:
//   [collective issued, collective done]* pre-forward   (the gather, then the unit is ready)
//   post-forward ... pre-backward ... [reduce-scatter issued, done] post-backward ... optimizer step
// A hook event comes after its task call returned, so `unit_state` is the state the task left.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/fsdp/fsdp_unit.hpp"
#include "engine/fsdp/sharding.hpp"
#include "engine/runtime/sim_time.hpp"

namespace fsdplab {

enum class FsdpEventKind {
  pre_forward,
  post_forward,
  pre_backward,
  post_backward,
  collective_issued,
  collective_done,
  optimizer_step
};
constexpr std::size_t kFsdpEventKindCount = 7;

// "pre-forward", "post-forward", "pre-backward", "post-backward", "collective issued", "collective done",
// "optimizer step".
std::string_view fsdp_event_name(FsdpEventKind kind);

// Whether the code of lab task `task` (1..9) reports events of its own in some run, so step-through can stop in
// it: tasks 3 to 8 (see FsdpEvent::task). Tasks 1 and 2 run once, before the first step (meta-device init, the
// FlatParameter's layout); task 9's copies run inside the gathers, reductions and optimizer step of other tasks,
// whose events they are.
bool task_reports_events(int task);
// Why not, for an Error ("task 2 (the FlatParameter's layout) runs once, before the first step"); empty for a
// task that reports events in some run.
std::string_view why_task_reports_no_events(int task);
// The same in a run of `options` on `world` ranks. Task 6 fetches ahead only under ASYNC, with a prefetch that
// gathers something: none where the strategy keeps the parameters whole on every rank (no_shard, zero1, zero2),
// none with `--prefetch none`, and none under grad_op with backward prefetch only (its units stay gathered from
// the forward to the backward); task 8 only where replica groups hold more than one rank (W / S > 1).
bool task_reports_events(int task, const FsdpOptions& options, int world);
std::string why_task_reports_no_events(int task, const FsdpOptions& options, int world);

struct FsdpEvent {
  int rank = 0;
  int step = -1;
  FsdpEventKind kind = FsdpEventKind::pre_forward;
  int unit = -1;          // FSDP unit index, -1 for none (optimizer step)
  std::string unit_name;  // "(root)", "transformer.h.0", ...
  // Which lab task's code did it: 3 forward, 4 backward, 5 sharded optimizer, 6 prefetch/overlap,
  // 7 integration glue (the training loop's own collectives, such as the loss all-reduce), 8 hybrid shard.
  int task = 0;
  // The methods and their implementing class, e.g.
  // "ForwardTask::all_gather, wait_for_unshard (in the class at engine/fsdp/forward_reference.cpp:8)".
  std::string code;
  std::string what;        // one plain sentence of what just happened
  std::string collective;  // collective events: "all_gather", "reduce_scatter", "all_reduce", "broadcast"; else empty
  std::int64_t bytes = 0;  // collective events: bytes of the full buffer
  SimTime host_time = 0;   // the rank's device.host_time() when it happened
  // collective_done: the collective's op on the device clock, [begin, end]; 0 otherwise.
  SimTime device_begin = 0, device_end = 0;
  // The unit's state right after the event, as its task keeps it: a collective's unit is marked
  // gathering or unsharded only once the gather has returned to the task that issued it.
  UnitState unit_state = UnitState::sharded;
};

class FsdpObserver {
 public:
  virtual ~FsdpObserver() = default;
  // On the rank's thread. May block (a paused step-through) or throw (a stopped run: the rank unwinds).
  virtual void on_fsdp_event(const FsdpEvent& event) = 0;
};

}  // namespace fsdplab
