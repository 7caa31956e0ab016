// matmul.hpp — the GEMM every linear layer, attention projection and their backward passes run on.
//
//   out[M, N] = alpha * op(a) @ op(b) + beta * out,   op(x) = x or x^T as the options say
//
// Operands are 2-D (callers fold batch dimensions into rows first). a and b share a dtype, f32 or
// bf16; out may be either. Products always accumulate in f32, as cuBLAS does for bf16 with
// CUBLAS_COMPUTE_32F, and a bf16 out is rounded once, at the end. As in BLAS, beta == 0 means out
// is not read, so stale or NaN contents never leak into the result.
//
// The backward of y = a @ b is two more matmuls that ADD into the gradients (beta = 1, callers
// zero the buffers first):  da += dy @ b^T  (trans_b),  db += a^T @ dy  (trans_a).
//
// An epilogue applies a Linear's bias, GELU or skip connection to the f32 product before that one
// rounding, inside the GEMM ([Note: fused epilogues] in engine/nn/layers.hpp).
#pragma once
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

struct MatmulOptions {
  bool trans_a = false;  // a is stored [K, M]
  bool trans_b = false;  // b is stored [N, K]
  float alpha = 1;
  float beta = 0;
};

// What the GEMM does to each f32 element of the product p = op(a) @ op(b) before it rounds it into out.
// Every tensor is of out's dtype; an undefined one is not there.
//   bias only                  out = p + bias
//   residual (bias or not)     out = residual + (p + bias)
//   gelu_pre (bias or not)     gelu_pre = p + bias, out = gelu(p + bias), the tanh form; gelu_pre is what
//                              gelu_backward_in_place reads, and out is the GELU of the unrounded sum
// With an epilogue, alpha is 1 and beta 0, and no tensor written overlaps another operand.
struct MatmulEpilogue {
  Tensor bias;      // [N]: added to every row
  Tensor residual;  // [M, N]: the skip connection added last
  Tensor gelu_pre;  // [M, N]: receives the GELU's input
  bool empty() const { return !bias.defined() && !residual.defined() && !gelu_pre.defined(); }
};

// Cost: 2*M*N*K FLOPs at the matmul peak of a's dtype, and the bytes of every operand. out must not
// overlap a or b.
void matmul(Stream s, const Tensor& a, const Tensor& b, const Tensor& out, MatmulOptions opt = {},
            const MatmulEpilogue& epilogue = {});

}  // namespace fsdplab
