// embedding.hpp — a lookup table, as nn.Embedding: out[n] = table[ids[n]].
//
// table, out, dout and dtable share one dtype (f32 or bf16); ids are i32. An id outside [0, V) is
// an Error naming it; ids live in device memory, so that is found when the op runs, not before.
//
// What an op writes must not share memory with its other operands (an Error): no op here works in
// place.
#pragma once
#include "engine/runtime/device.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// table: [V, C]; ids: [N] i32; out: [N, C].
void embedding(Stream s, const Tensor& table, const Tensor& ids, const Tensor& out);

// ADDS dout's rows into dtable's rows [V, C] (callers zero it first), as autograd accumulates. An id
// that occurs several times gets its rows summed in position order, so the result is deterministic,
// and then added once, so a bf16 table is rounded once per element.
void embedding_backward(Stream s, const Tensor& dout, const Tensor& ids, const Tensor& dtable);

}  // namespace fsdplab
