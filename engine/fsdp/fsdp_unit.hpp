// fsdp_unit.hpp — what the task implementations work on: one FSDP unit's buffers and state, and
// the rank they run on.
//
// A unit is a module subtree (a GPT-2 Block, or the root with whatever no inner unit took) whose
// parameters form one FlatParameter. Its buffers, per rank:
//   master      f32 [shard_numel]   this rank's shard, what the optimizer updates     param_shard
//   replica     f32 [padded_numel]  the whole parameters, kept between steps by the
//                                   replicated strategies (no_shard, zero1, zero2);
//                                   `master` is then chunk r of it, a view             param_shard / param_full
//   full        param_dtype [padded] gathered for forward and backward; the parameter
//                                   views point here. May be `replica` itself (f32)   param_full
//   grad_full   param_dtype [padded] the unit's gradient, accumulated by backward    grad_full
//   grad_shard  f32 [shard_numel]   this rank's chunk of the averaged gradient        grad_shard
//   grad_replica f32 [padded]       the whole averaged gradient (no_shard, zero1);
//                                   `grad_shard` is then chunk r of it, a view         grad_shard / grad_full
// `full` and `grad_full` keep one Storage each, freed and allocated again as the unit is resharded
// and gathered, so the parameter views survive (tensor.hpp). With the two-buffer pool they are views
// of the pool's buffer for the unit's slot instead.
#pragma once
#include <string>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/fsdp/flat_param_layout.hpp"
#include "engine/fsdp/overlap_state.hpp"
#include "engine/fsdp/sharding.hpp"
#include "engine/nn/module.hpp"
#include "engine/runtime/event.hpp"

namespace fsdplab {

class FsdpObserver;

enum class UnitState {
  sharded,    // only the shard is held; the parameter views point at freed memory (or a pool buffer)
  gathering,  // the gather is issued (by a prefetch, or by unshard before it waits); compute has not waited yet
  unsharded,  // `full` holds the whole unit and the views point into it
};

struct FsdpUnit {
  int index = 0;       // in pre-order of the module tree: the root unit is 0
  std::string name;    // the module's dotted name; "(root)" for the root
  Module* module = nullptr;
  FlatParamLayout layout;
  bool reshard_after_forward = true;
  UnitState state = UnitState::sharded;
  // The two-buffer pool's buffer this unit is gathered into (set before each gather); -1 outside the pool.
  int pool_slot = -1;
  // Gradient accumulation: grad_full holds gradients of earlier micro-batches, not yet reduced.
  bool grad_accumulated = false;

  Tensor master, replica, full;
  Tensor grad_full, grad_shard, grad_replica;

  Event gathered{"gathered"};  // recorded on the all-gather stream when `full` is ready
  Event reduced{"reduced"};    // recorded when `grad_shard` is ready: on the reduce-scatter stream, on the memcpy
                               // stream under CPU offload (the shard's copy to the host finishes it)
};

// A collective FSDP code issued while an FsdpActivity was current, as the hook's event describes it.
struct IssuedCollective {
  std::string collective;  // "all_gather", "reduce_scatter", "all_reduce", "broadcast"
  int unit = -1;           // the unit it moves (the ops' label), -1 for none
  bool prefetch = false;   // a gather of another unit than the hook's own: task 6 fetching ahead
  std::string size;        // "1.80 MB bf16"
};

// Which task's code runs on this rank now, for the FSDP events (fsdp_observer.hpp). Set around each task
// call by the hooks and the trainer (ActivityScope, fsdp_events.hpp) while an observer listens, and read
// by ObservedCommunicator when a collective is issued, so the collective is reported as that code's.
struct FsdpActivity {
  int task = 7;      // the lab task: 3 forward, 4 backward, 5 sharded optimizer, 6 prefetch/overlap, 7 glue, 8 hybrid
  std::string
      code;  // "ForwardTask::all_gather, wait_for_unshard (in the class at engine/fsdp/forward_reference.cpp:8)"
  int unit = -1;     // the unit whose hook runs; -1 outside the hooks
  std::vector<IssuedCollective> issued;  // by this code so far
};

// One rank's FSDP runtime: its device, its groups and the options. The task implementations are not here:
// the unit lifecycle (unit_lifecycle.hpp) holds them and calls them during a step (fsdp_tasks.hpp says who
// else does, before and after).
struct FsdpRank {
  Device& device;
  Communicator& world;          // all W ranks
  Communicator& shard_group;    // the S ranks a unit is sharded over
  Communicator& replica_group;  // the W / S ranks holding the same shard
  FsdpOptions options;
  OverlapState schedule{};  // task 6's memory between calls
  // False in the micro-batches of gradient accumulation before the last: backward keeps each unit's
  // full gradient and adds the next micro-batch's into it, with no reduction (PyTorch's no_sync).
  bool reduce_gradients = true;
  FsdpActivity activity{};  // kept only while `observer` is set
  // Told every FSDP event of this rank (fsdp_observer.hpp) on the rank's thread; none when null, and
  // then nothing is built to tell.
  FsdpObserver* observer = nullptr;

  bool async() const { return options.mode == OverlapMode::async; }
};

}  // namespace fsdplab
