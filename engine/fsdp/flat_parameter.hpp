// flat_parameter.hpp — task 2 of the lab: one flat buffer per FSDP unit.
//
// A unit's parameters are concatenated into one buffer, so a unit is gathered and reduced with one
// collective instead of one per tensor. Each parameter starts at a multiple of `align` elements (so
// its view is aligned for vector loads, as PyTorch pads to 16 bytes), and the whole is padded to a
// multiple of the world size W, so it splits into W equal chunks: rank r owns chunk r, its shard.
// A chunk boundary may cut a parameter in two, and a rank may own no element of a small parameter;
// shard_slices says, for one rank, which slice of which parameter its shard holds.
//
//   flat:  | fc1.weight ....... |pad| ln.weight | ln.bias | fc2.weight ...... |pad to W|
//   rank:  |<---- shard 0 ---->|<---- shard 1 ---->|<---- shard 2 ---->|<-- shard 3 -->|
//
// Parameters are views into the unsharded buffer, never copies (point_views): a write through a
// parameter changes the flat buffer, and gathering the buffer updates every parameter.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/nn/parameter.hpp"

namespace fsdplab {

// Where one parameter lives in the unsharded flat buffer.
struct FlatParamEntry {
  Parameter* param = nullptr;
  std::int64_t offset = 0;  // first element in the flat buffer
  std::int64_t numel = 0;
};

// The part of one parameter that one rank's shard holds: elements [param_begin, param_begin + count)
// of the parameter (flattened) are elements [shard_offset, shard_offset + count) of the shard.
struct ShardSlice {
  Parameter* param = nullptr;
  std::int64_t param_begin = 0;
  std::int64_t count = 0;
  std::int64_t shard_offset = 0;
};

struct FlatParamLayout {
  std::vector<FlatParamEntry> entries;  // in the order the parameters were given
  int world = 1;
  std::int64_t align = 1;
  std::int64_t used_numel = 0;    // up to the end of the last parameter, alignment gaps included
  std::int64_t padded_numel = 0;  // used_numel rounded up to a multiple of world
  std::int64_t shard_numel() const { return padded_numel / world; }
};

// The task's interface: a reference implementation (flat_parameter_reference.cpp) and, in the lab,
// a student's, selectable per run.
class FlatParameterTask {
 public:
  virtual ~FlatParameterTask() = default;
  // Lays out `params` (a unit's, each once) for `world` ranks. An Error for an empty unit, world < 1,
  // align < 1, or a parameter given twice.
  virtual FlatParamLayout plan(std::span<Parameter* const> params, int world, std::int64_t align) const = 0;
  // Rank `rank`'s slices, in flat order; empty for a rank whose shard is all padding.
  virtual std::vector<ShardSlice> shard_slices(const FlatParamLayout& layout, int rank) const = 0;
  // Points every parameter's `field` (&Parameter::value or &Parameter::grad) at its view of `flat`, a
  // tensor of layout.padded_numel elements: the parameter's shape, the flat buffer's storage and dtype.
  virtual void point_views(const FlatParamLayout& layout, const Tensor& flat, Tensor Parameter::*field) const = 0;
};

}  // namespace fsdplab
