// meta_init.hpp — task 1 of the lab: materialise only this rank's shard of a unit.
//
// The model is built as shapes only (meta), so nothing is allocated for the whole model anywhere.
// Each rank then draws just the elements its shard holds. Initial values come from the counter-based
// RNG (nn/counter_rng.hpp), a pure function of (seed, parameter name, element index), so rank r's
// shard equals the same slice of the unsharded initialisation, and FSDP at any W starts from exactly
// the values the single-rank baseline starts from.
#pragma once
#include <cstdint>

#include "engine/fsdp/flat_parameter.hpp"

namespace fsdplab {

class MetaInitTask {
 public:
  virtual ~MetaInitTask() = default;
  // Fills `shard` (f32, layout.shard_numel() elements) with rank `rank`'s chunk of the unit's initial
  // values under `seed`: each slice `flat.shard_slices` names from its parameter's ParamInit, at the
  // slice's own element indices; padding is zero. Holds at most one shard's values on the host and
  // allocates nothing on the device.
  virtual void init_shard(const FlatParameterTask& flat, const FlatParamLayout& layout, int rank, const Tensor& shard,
                          std::uint64_t seed) const = 0;
};

}  // namespace fsdplab
