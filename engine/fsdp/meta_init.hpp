// meta_init.hpp — task 1 of the lab: materialise only this rank's shard of a unit.
//
// The model is built as shapes only (meta), so nothing is allocated for the whole model anywhere.
// Each rank then draws just the elements its shard holds. Initial values come from the counter-based
// RNG (nn/counter_rng.hpp), a pure function of (seed, parameter name, element index), so rank r's
// shard equals the same slice of the unsharded initialisation, and FSDP at any W starts from exactly
// the values the single-rank baseline starts from. Exercise: labs/01-meta-init.
#pragma once
#include <cstdint>
#include <span>

#include "engine/fsdp/flat_param_layout.hpp"
#include "engine/fsdp/fsdp_task.hpp"

namespace fsdplab {

class MetaInitTask : public FsdpTask {
 public:
  // The implementing class's file and line, for step-through (fsdp_task.hpp).
  explicit MetaInitTask(std::source_location origin = std::source_location::current()) : FsdpTask(origin) {}

  // Fills `shard` (f32, one rank's chunk of a unit's flat buffer) with the unit's initial values under
  // `seed`: each of `slices` (the chunk's pieces of parameters, ShardSlice) from its parameter's ParamInit
  // at the slice's own element indices; everything else (alignment gaps, padding) is zero. Holds at most
  // one shard's values on the host and allocates nothing on the device. On a dry-run device (no values,
  // shard.device().dry_run()) it writes nothing.
  virtual void init_shard(std::span<const ShardSlice> slices, const Tensor& shard, std::uint64_t seed) const = 0;
};

// The reference implementation (meta_init_reference.cpp).
const MetaInitTask& reference_meta_init();

}  // namespace fsdplab
