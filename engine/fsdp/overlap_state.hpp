// overlap_state.hpp — what task 6 remembers on one rank between calls: the recorded pass order,
// the parked buffers, and the two-buffer pool; and the queries over them that any implementation of
// task 6 needs (the order units run in, how many gathered units hold memory), given to the lab.
#pragma once
#include <array>
#include <cstddef>
#include <string_view>
#include <vector>

#include "engine/runtime/deferred_frees.hpp"
#include "engine/runtime/error.hpp"
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

  // Kept by the unit lifecycle (unit_lifecycle.cpp), which calls begin_forward and end_backward.
  Pass pass = Pass::idle;
  std::size_t post_backwards_seen = 0;
  // Kept by the lifecycle: this step's gradient reductions in the order they were issued, the order
  // the optimizer step updates the units in under ASYNC.
  std::vector<FsdpUnit*> reduction_order;

  DeferredFrees parked;  // ASYNC: buffers waiting for their last user

  // Two-buffer pool: unit.pool_slot picks one; each slot's full parameter and gradient buffer, and
  // the events their last users record.
  std::array<Tensor, 2> param_pool, grad_pool;
  std::array<Event, 2> param_pool_free{Event("param_pool.free"), Event("param_pool.free")};
  std::array<Event, 2> grad_pool_free{Event("grad_pool.free"), Event("grad_pool.free")};
};

// Whether the rate limiter counts `unit`: the units freed after their forward. The root (and every unit
// under shard_grad_op) stays gathered from forward to backward by design; counting it would only stall.
bool rate_limited(const FsdpUnit& unit);

// Gathered units holding memory now: in use or prefetched (alloc buffers only), plus the rate-limited
// buffers parked until their last user is done.
int live_gathered(const OverlapState& s);

// The unit after `unit` in the recorded forward order, or nullptr.
FsdpUnit* next_in_forward(const OverlapState& s, const FsdpUnit& unit);

// The unit whose backward comes next: backward runs units in the reverse of their post-forward order, so
// the nearest unit before `unit` in that order that has not started its backward in this pass; nullptr
// when there is none. (A unit that encloses others, the root, starts first and finishes last: at its
// post-backward every unit is done and there is nothing to fetch.)
FsdpUnit* next_in_backward(const OverlapState& s, const FsdpUnit& unit);

// A unit still `gathering` when its pass ended: after() named it, and the pass never ran it again. Its own type, so
// a catcher (the grader) tells it from other errors whatever else the message says.
class UnusedPrefetch : public Error {
 public:
  using Error::Error;
};

// end_backward's check: throws UnusedPrefetch naming the first unit of `s` still `gathering`, a prefetch this pass
// never used.
void check_prefetches_used(const OverlapState& s);

// Appends `unit` to `order` while the order is not recorded yet; once it is, checks that this pass runs
// `unit` at the same position (an Error naming both otherwise). Counts the position in `seen`.
//   record_order(s.forward_order, s.pre_forwards_seen, s.order_recorded, unit, "pre-forward");
void record_order(std::vector<FsdpUnit*>& order, std::size_t& seen, bool recorded, FsdpUnit& unit,
                  std::string_view point);

}  // namespace fsdplab
