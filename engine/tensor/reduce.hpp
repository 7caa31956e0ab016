// reduce.hpp — reductions to a scalar: the sum of a tensor, exact to f32 (the ops' tests read other ops' sums with
// it), and the sum of its squares (a gradient's squared 2-norm, for clipping: optimizer_ops.hpp).
#pragma once
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// out[0] = sum of all elements of x (f32 or bf16, any shape); out is a 1-element f32 tensor and is
// overwritten. Sums in double, in element order, so the result is deterministic and exact to f32
// precision however many elements there are (an f32 running sum stops growing once it is 2^24 times
// its terms).
void sum(Stream s, const Tensor& x, const Tensor& out);
// out[0] = the sum of the squares of x's elements, accumulated in double as sum(); out as sum's.
void sum_of_squares(Stream s, const Tensor& x, const Tensor& out);

}  // namespace fsdplab
