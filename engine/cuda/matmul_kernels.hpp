// matmul_kernels.hpp — the one kernel matmul needs besides cuBLAS: an epilogue for the cases cuBLAS
// does not cover (an f32 GEMM into a bf16 out, an empty inner dimension, and an epilogue cuBLASLt has no
// algorithm for). Used by cublas_matmul.cpp.
#pragma once
#include <cstdint>

#include "engine/cuda/cublas_matmul.hpp"
#include "engine/runtime/dtype.hpp"

struct CUstream_st;

namespace fsdplab::cuda {

// Over out [m, n]: p = acc + beta * out in f32, then the epilogue's formulas on p (cublas_matmul.hpp), rounded
// once to out_dtype (f32 or bf16). acc == nullptr counts as zeros; beta == 0 never reads out (stale NaNs stay
// out of the result).
void gemm_epilogue(CUstream_st* stream, DType out_dtype, void* out, const float* acc, float beta, std::int64_t m,
                   std::int64_t n, const GemmEpilogue& epilogue = {});

}  // namespace fsdplab::cuda
