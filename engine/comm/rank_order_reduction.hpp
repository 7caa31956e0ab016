// rank_order_reduction.hpp — the sum over ranks that every host-side collective computes.
//
// LocalComm (ranks as threads) and MpiComm (ranks as processes) both reduce with these, so the same
// inputs give bit-identical results whichever carries them: accumulate in f32 whatever the dtype, in
// group-rank order, divide by the group size for avg, and round to the tensor's dtype once at the end.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/comm/communicator.hpp"

namespace fsdplab {

// The sum (or average) of `count` elements of each input, read from `offset` bytes in, inputs in
// group-rank order.
std::vector<float> reduce_in_rank_order(const std::vector<const std::byte*>& inputs, std::size_t offset,
                                        std::int64_t count, DType dtype, ReduceOp op);

// Writes `values` as `dtype` (bf16: the one rounding, to nearest even).
void store_reduced(std::byte* dst, const std::vector<float>& values, DType dtype);

}  // namespace fsdplab
