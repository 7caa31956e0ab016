// fsdp_tasks.hpp — the six task implementations one FSDP run uses, and the reference set.
//
// Each task is an interface (meta_init.hpp, flat_parameter.hpp, forward_task.hpp, backward_task.hpp,
// sharded_optimizer.hpp, overlap_task.hpp) with its reference implementation in its own file (*_reference.cpp), so a
// lab skeleton can implement one task and run it beside the reference for all the others.
#pragma once
#include "engine/fsdp/backward_task.hpp"
#include "engine/fsdp/flat_parameter.hpp"
#include "engine/fsdp/forward_task.hpp"
#include "engine/fsdp/meta_init.hpp"
#include "engine/fsdp/overlap_task.hpp"
#include "engine/fsdp/sharded_optimizer.hpp"

namespace fsdplab {

struct FsdpTasks {
  const MetaInitTask* meta_init = nullptr;
  const FlatParameterTask* flat_parameter = nullptr;
  const ForwardTask* forward = nullptr;
  const BackwardTask* backward = nullptr;
  const ShardedOptimizerTask* optimizer = nullptr;
  const OverlapTask* overlap = nullptr;
};

const MetaInitTask& reference_meta_init();
const FlatParameterTask& reference_flat_parameter();
const ForwardTask& reference_forward();
const BackwardTask& reference_backward();
const ShardedOptimizerTask& reference_sharded_optimizer();
const OverlapTask& reference_overlap();

// Every task's reference implementation.
FsdpTasks reference_tasks();

}  // namespace fsdplab
