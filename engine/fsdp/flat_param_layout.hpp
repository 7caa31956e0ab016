// flat_param_layout.hpp — what a FlatParameter looks like, shared by the tasks that read it: where each
// parameter lives in a unit's flat buffer, and which slice of which parameter a rank's shard holds.
// Task 2 (flat_parameter.hpp) computes these; tasks 1 and 7 and the engine read them.
//
//   flat:  | fc1.weight ....... |gap| ln.weight | ln.bias | fc2.weight ...... |padding|
//   rank:  |<---- shard 0 ---->|<---- shard 1 ---->|<---- shard 2 ---->|<-- shard 3 -->|
//   gap: to the next multiple of align (an alignment gap); padding: to a multiple of W, at the end only
#pragma once
#include <cstdint>
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

}  // namespace fsdplab
