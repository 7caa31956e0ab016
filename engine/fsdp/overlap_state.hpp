// overlap_state.hpp — what task 6 remembers on one rank between calls: the recorded pass order,
// the parked buffers, and the two-buffer pool.
#pragma once
#include <array>
#include <vector>

#include "engine/runtime/deferred_frees.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

struct FsdpUnit;

enum class Pass { idle, forward, backward };

struct OverlapState {
  std::vector<FsdpUnit*> units;  // every unit of the model, by index

  // The order units ran their pre-forward and post-forward in, recorded in the first forward and
  // checked in every later one (prefetch assumes a static graph, as PyTorch's does).
  std::vector<FsdpUnit*> forward_order, post_forward_order;
  bool order_recorded = false;
  std::size_t pre_forwards_seen = 0, post_forwards_seen = 0;  // in this pass
  std::vector<const FsdpUnit*> backward_started;               // in this pass, in pre-backward order

  // Kept by the glue (fully_sharded_model.cpp), which calls begin_forward and end_backward.
  Pass pass = Pass::idle;
  std::size_t post_backwards_seen = 0;

  DeferredFrees parked;  // ASYNC: buffers waiting for their last user

  // Two-buffer pool: unit.pool_slot picks one; each slot's full parameter and gradient buffer, and
  // the events their last users record.
  std::array<Tensor, 2> param_pool, grad_pool;
  std::array<Event, 2> param_pool_free{Event("param_pool.free"), Event("param_pool.free")};
  std::array<Event, 2> grad_pool_free{Event("grad_pool.free"), Event("grad_pool.free")};
};

}  // namespace fsdplab
