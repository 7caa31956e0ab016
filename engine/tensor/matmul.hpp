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
#pragma once
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

struct MatmulOptions {
  bool trans_a = false;  // a is stored [K, M]
  bool trans_b = false;  // b is stored [N, K]
  float alpha = 1;
  float beta = 0;
};

// Cost: 2*M*N*K FLOPs at the matmul peak of a's dtype. out must not overlap a or b.
void matmul(Stream s, const Tensor& a, const Tensor& b, const Tensor& out, MatmulOptions opt = {});

}  // namespace fsdplab
