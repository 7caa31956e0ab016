// flat_parameter.hpp — task 2 of the lab: one flat buffer per FSDP unit.
//
// A unit's parameters are concatenated into one buffer, so a unit is gathered and reduced with one
// collective instead of one per tensor. Each parameter starts at a multiple of `align` elements (so
// its view is aligned for vector loads, as PyTorch pads to 16 bytes), and the whole is padded to a
// multiple of the world size W, so it splits into W equal chunks: rank r owns chunk r, its shard.
// A chunk boundary may cut a parameter in two, and a rank may own no element of a small parameter;
// shard_slices says, for one rank, which slice of which parameter its shard holds (flat_param_layout.hpp
// draws it). Parameters are views into the unsharded buffer, never copies (point_views): a write through
// a parameter changes the flat buffer, and gathering the buffer updates every parameter.
// Exercise: labs/02-flat-parameter.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/fsdp/flat_param_layout.hpp"
#include "engine/fsdp/fsdp_task.hpp"

namespace fsdplab {

class FlatParameterTask : public FsdpTask {
 public:
  // The implementing class's file and line, for step-through (fsdp_task.hpp).
  explicit FlatParameterTask(std::source_location origin = std::source_location::current()) : FsdpTask(origin) {}

  // Lays out `params` (a unit's, each once) for `world` ranks. An Error for an empty unit, world < 1,
  // align < 1, or a parameter given twice.
  virtual FlatParamLayout plan(std::span<Parameter* const> params, int world, std::int64_t align) const = 0;
  // Rank `rank`'s slices, in flat order; empty for a rank whose shard is all padding. An Error for a rank
  // outside [0, layout.world).
  virtual std::vector<ShardSlice> shard_slices(const FlatParamLayout& layout, int rank) const = 0;
  // Points every parameter's `field` (&Parameter::value or &Parameter::grad) at its view of `flat`, a
  // tensor of layout.padded_numel elements: the parameter's shape, the flat buffer's storage and dtype.
  virtual void point_views(const FlatParamLayout& layout, const Tensor& flat, Tensor Parameter::*field) const = 0;
};

// The reference implementation (flat_parameter_reference.cpp).
const FlatParameterTask& reference_flat_parameter();

}  // namespace fsdplab
