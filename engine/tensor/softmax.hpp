// softmax.hpp — softmax over the last dimension of [N, C], as torch.softmax(x, dim=-1).
//
// x, y, dy and dx share one dtype (f32 or bf16; computed in f32). The backward needs only the
// output y: dx = y * (dy - sum(y * dy)) per row.
//
// What an op writes must not share memory with its other operands (an Error): no op here works in
// place.
#pragma once
#include "engine/runtime/device.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// y = exp(x - max(x)) / sum(exp(x - max(x))) per row; subtracting the row's max keeps exp from
// overflowing and changes nothing else. x, y: [N, C].
void softmax(Stream s, const Tensor& x, const Tensor& y);

// ADDS the gradient into dx [N, C] (callers zero it first), as autograd accumulates.
void softmax_backward(Stream s, const Tensor& y, const Tensor& dy, const Tensor& dx);

}  // namespace fsdplab
