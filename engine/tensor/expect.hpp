// expect.hpp — the operand checks of op front-ends, so every op words a mismatch the same way:
//   layernorm: weight must be [768] bf16, got 'ln1.weight' [512] bf16
#pragma once
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <string_view>

#include "engine/runtime/error.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// `t` must have exactly `shape` and `dtype`.
inline void expect_tensor(std::string_view op, std::string_view role, const Tensor& t, const Shape& shape,
                          DType dtype) {
  if (!(t.defined() && t.shape() == shape && t.dtype() == dtype))
    fail(op, ": ", role, " must be ", shape_str(shape), " ", dtype_name(dtype), ", got ",
         t.describe());
}

// `t` must be f32 or bf16 with `ndim` dimensions, described by `dims` (e.g. "[N, C]"); the sizes
// are the op's to check against its other operands.
inline void expect_float(std::string_view op, std::string_view role, const Tensor& t, int ndim,
                         std::string_view dims) {
  if (!(t.defined() && t.ndim() == ndim && (t.dtype() == DType::f32 || t.dtype() == DType::bf16)))
    fail(op, ": ", role, " must be ", dims, " f32 or bf16, got ", t.describe());
}

// `t` must be f32 or bf16, of any shape.
inline void expect_floating(std::string_view op, std::string_view role, const Tensor& t) {
  if (!(t.defined() && (t.dtype() == DType::f32 || t.dtype() == DType::bf16)))
    fail(op, ": ", role, " must be f32 or bf16, got ", t.describe());
}

// `t` must be one f32 element, of any shape (a [1] tensor, or a view of one element of a vector): a scalar an op
// writes or reads on the device.
inline void expect_scalar_f32(std::string_view op, std::string_view role, const Tensor& t) {
  if (!(t.defined() && t.numel() == 1 && t.dtype() == DType::f32))
    fail(op, ": ", role, " must be a 1-element f32 tensor, got ", t.describe());
}

// `t` must have the shape and dtype of `ref`, which the op calls `ref_role`.
inline void expect_like(std::string_view op, std::string_view role, const Tensor& t, std::string_view ref_role,
                        const Tensor& ref) {
  if (!(t.defined() && t.shape() == ref.shape() && t.dtype() == ref.dtype()))
    fail(op, ": ", role, " must have the shape and dtype of ", ref_role, " ", ref.describe(), ", got ", t.describe());
}

// `t` must be [N] i32, indices such as token ids or class targets; returns N.
inline std::int64_t expect_indices(std::string_view op, std::string_view role, const Tensor& t) {
  if (!(t.defined() && t.ndim() == 1 && t.dtype() == DType::i32))
    fail(op, ": ", role, " must be [N] i32, got ", t.describe());
  return t.dim(0);
}

// An operand and what the op calls it, for expect_disjoint.
struct Operand {
  std::string_view role;
  const Tensor* tensor;
};

// No tensor in `writes` shares a byte with another operand, read or written. The kernels write
// outputs while still reading inputs (a row's statistics, another head's q, k and v), so an alias
// would silently corrupt the result. An op that may work in place checks that one pair with
// expect_in_place_or_disjoint instead.
inline void expect_disjoint(std::string_view op, std::initializer_list<Operand> reads,
                            std::initializer_list<Operand> writes) {
  for (auto w = writes.begin(); w != writes.end(); ++w) {
    auto clash = [&](const Operand& other) {
      if (w->tensor->overlaps(*other.tensor))
        fail(op, ": ", w->role, " ", w->tensor->describe(), " shares memory with ", other.role, " ",
             other.tensor->describe(), "; what an op writes must not alias its other operands");
    };
    for (const Operand& r : reads) clash(r);
    for (auto other = std::next(w); other != writes.end(); ++other) clash(*other);
  }
}

// For the ops that may work in place: `out` is either the very elements of `in` (same storage, offset, dtype and
// count: element i of the output overwrites element i of the input, read just before) or shares no byte with it.
// Any other overlap would make the op read elements it has already overwritten.
inline void expect_in_place_or_disjoint(std::string_view op, std::string_view out_role, const Tensor& out,
                                        std::string_view in_role, const Tensor& in) {
  const bool same = out.storage_ptr() == in.storage_ptr() && out.offset() == in.offset() && out.dtype() == in.dtype() &&
                    out.numel() == in.numel();
  if (!(same || !out.overlaps(in)))
    fail(op, ": ", out_role, " ", out.describe(), " partly overlaps ", in_role, " ", in.describe(),
         "; it must be the very same elements (in place) or disjoint");
}

}  // namespace fsdplab
