// embedding.hpp — a lookup table, as nn.Embedding: out[n] = table[ids[n]].
//
// table, out, dout and dtable share one dtype (f32 or bf16); a slice is f32; ids are i32. An id outside [0, V)
// is an Error naming it; ids live in device memory, so that is found when the op runs, not before.
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

// The same sums, added into a slice of a [V, C] table rather than the whole: slice [n] f32 holds the table's
// elements [first, first + n), flattened row after row (an FSDP shard's part of the table, which may begin and
// end mid-row). Each element in the slice gets alpha times its id's sum, added once (in f32, whatever dout's
// dtype); rows outside it are skipped. C is dout's width; an id outside [0, V) is an Error, as above.
void embedding_backward_slice(Stream s, const Tensor& dout, const Tensor& ids, std::int64_t V, std::int64_t first,
                              float alpha, const Tensor& slice);

}  // namespace fsdplab
