// matmul_kernels.hpp — the one kernel matmul needs besides cuBLAS: an epilogue for the cases cuBLAS
// does not cover (an f32 GEMM into a bf16 out, and an empty inner dimension). Used by cublas_matmul.cpp.
#pragma once
#include <cstdint>

#include "engine/runtime/dtype.hpp"

struct CUstream_st;

namespace fsdplab::cuda {

// out[i] = acc[i] + beta * out[i] over n contiguous elements, in f32, rounded once to out_dtype (f32 or
// bf16). acc == nullptr counts as zeros; beta == 0 never reads out (stale NaNs stay out of the result).
void gemm_epilogue(CUstream_st* stream, DType out_dtype, void* out, const float* acc, float beta, std::int64_t n);

}  // namespace fsdplab::cuda
