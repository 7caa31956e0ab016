// cublas_matmul.hpp — matmul's CUDA body (engine/tensor/matmul.hpp): one cuBLAS GEMM on the op's stream.
//
// Row-major operands go to column-major cuBLAS as their transposes: out^T = op(b)^T @ op(a)^T, so b is
// cuBLAS's A and a its B, with no copy. The compute type is CUBLAS_COMPUTE_32F: f32 operands take
// plain f32 FMAs, bf16 operands take tensor cores with f32 accumulation (CUBLAS_MATH_DISALLOW_REDUCED_
// PRECISION_REDUCTION keeps split-K partial sums in f32 too), and a bf16 out is rounded once, at the end,
// as the host body does.
//
// No TF32: it would round f32 operands to 10 mantissa bits before multiplying, so a cuda run would stop
// matching the sim device's f32 GEMM (the tests compare them at 1e-5), and PyTorch eager does not use it
// for matmul by default either (torch.backends.cuda.matmul.allow_tf32 is False), which is what the lab's
// numbers are compared with. bf16 operands already run on tensor cores.
//
// A GEMM with an epilogue (a Linear's bias, GELU or skip connection: MatmulEpilogue in engine/tensor/matmul.hpp)
// runs as one cuBLASLt matmul with the epilogue in its kernel, the residual as its C matrix; see [Note: the GEMM
// epilogue on cuBLASLt] in cublas_matmul.cpp.
//
// Each host thread (a rank) has its own cuBLAS handle per GPU, and each GEMM its own workspace from
// the device's caching allocator (op_scratch.hpp; 32 MiB on sm_90, tagged workspace): cuBLAS's default
// workspace pool is shared by the streams of a handle, which makes results depend on which streams ran
// concurrently; a workspace from the op's stream pool keeps a GEMM bitwise reproducible. Under an SM split
// (sm_partition.hpp) cuBLAS and cuBLASLt are told the share's SM count, for which their heuristics then plan;
// a GEMM's algorithm, and so its last bits, may differ between a split and an unsplit run.
#pragma once
#include <cstdint>

#include "engine/runtime/dtype.hpp"

struct CUstream_st;

namespace fsdplab::cuda {

// out[m, n] = alpha * op(a) @ op(b) + beta * out over contiguous row-major device memory, a stored
// [k, m] when trans_a and b [n, k] when trans_b. a and b share in_dtype (f32 or bf16); out_dtype is f32
// or bf16. beta == 0 never reads out. Dimensions fit an int (the front-end checks).
struct Gemm {
  std::int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  float alpha = 1, beta = 0;
};

// The epilogue's operands, device pointers of out_dtype, null where absent: out = residual + (p + bias), or
// gelu_pre = p + bias and out = gelu(p + bias), on the f32 product p (engine/tensor/matmul.hpp's formulas). With
// any of them, alpha is 1 and beta 0 (the front-end checks).
struct GemmEpilogue {
  const void* bias = nullptr;      // [n]
  const void* residual = nullptr;  // [m, n]
  void* gelu_pre = nullptr;        // [m, n]
  bool empty() const { return bias == nullptr && residual == nullptr && gelu_pre == nullptr; }
};

// Enqueues the GEMM on `stream` and returns; a cuBLAS failure is an Error naming the call and shapes.
void gemm(CUstream_st* stream, DType in_dtype, DType out_dtype, const void* a, const void* b, void* out,
          const Gemm& g, const GemmEpilogue& epilogue = {});

}  // namespace fsdplab::cuda
