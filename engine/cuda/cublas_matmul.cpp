#include "engine/cuda/cublas_matmul.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <ostream>
#include <utility>
#include <vector>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/matmul_kernels.hpp"
#include "engine/cuda/op_scratch.hpp"

namespace fsdplab::cuda {
namespace {

// What a failure message says of the GEMM; formatted only when one fails.
struct Described {
  const Gemm& g;
  DType in, out;
};

std::ostream& operator<<(std::ostream& s, const Described& d) {
  const Gemm& g = d.g;
  s << "matmul on cuBLAS, out [" << g.m << ", " << g.n << "] " << dtype_name(d.out) << " = op(a) [" << g.m << ", "
    << g.k << "] @ op(b) [" << g.k << ", " << g.n << "] " << dtype_name(d.in) << (g.trans_a ? ", a transposed" : "")
    << (g.trans_b ? ", b transposed" : "") << ", alpha " << g.alpha << ", beta " << g.beta;
  return s;
}

void check_cublas(cublasStatus_t status, const char* call, const Described& what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail(what, ": ", call, " failed: ", cublasGetStatusName(status), " (", cublasGetStatusString(status), ")");
}

// One host thread's cuBLAS handles, one per GPU (cuBLAS handles are not to be shared between threads
// that change their stream); destroyed at thread exit (process exit for the main thread), when there is
// nothing to report an error to.
class ThreadBlas {
 public:
  ThreadBlas() = default;
  ThreadBlas(const ThreadBlas&) = delete;
  ThreadBlas& operator=(const ThreadBlas&) = delete;
  ~ThreadBlas() {
    for (const Handle& h : handles_) cublasDestroy(h.handle);
  }

  // The current GPU's handle, set to run on `stream` with a workspace of the op's own (op_scratch.hpp):
  // cuBLAS's default workspace pool is shared by the streams of a handle, which makes results depend on
  // which streams ran concurrently; the op's scratch comes from its stream's pool, so a GEMM is bitwise
  // reproducible, and the workspace shows in the ledger.
  cublasHandle_t bind(cudaStream_t stream, const Described& what) {
    int gpu = 0;
    check_cuda(cudaGetDevice(&gpu), what, ": cudaGetDevice");
    const Handle& h = on_gpu(gpu, what);
    void* workspace = op_scratch(static_cast<std::int64_t>(h.workspace_bytes), "the cuBLAS workspace");
    // cublasSetStream resets the handle to cuBLAS's shared workspace pool: the op's own goes after it.
    check_cublas(cublasSetStream(h.handle, stream), "cublasSetStream", what);
    check_cublas(cublasSetWorkspace(h.handle, workspace, h.workspace_bytes), "cublasSetWorkspace", what);
    return h.handle;
  }

 private:
  struct Handle {
    int gpu = -1;
    cublasHandle_t handle = nullptr;
    std::size_t workspace_bytes = 0;
  };

  const Handle& on_gpu(int gpu, const Described& what) {
    for (const Handle& h : handles_) {
      if (h.gpu == gpu) return h;
    }
    Handle h;
    h.gpu = gpu;
    int major = 0;
    check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, gpu), what,
               ": the compute capability of GPU ", gpu);
    // cuBLAS's own default workspace sizes: 32 MiB from Hopper on, 4 MiB before.
    h.workspace_bytes = std::size_t{major >= 9 ? 32u : 4u} << 20;
    // Fails cleanly (CUBLAS_STATUS_NOT_INITIALIZED) where there is no GPU or driver.
    check_cublas(cublasCreate(&h.handle), "cublasCreate", what);
    // Split-K partial sums stay in f32 even when out is bf16: the result is rounded once, as on the host.
    const cublasStatus_t mode = cublasSetMathMode(
        h.handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    if (mode != CUBLAS_STATUS_SUCCESS) cublasDestroy(h.handle);
    check_cublas(mode, "cublasSetMathMode", what);
    handles_.push_back(h);
    return handles_.back();
  }

  std::vector<Handle> handles_;
};

cudaDataType_t cuda_type(DType dtype) { return dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F; }

// Row-major out = op(a) @ op(b) is column-major out^T = op(b)^T @ op(a)^T: b stored row-major [k, n]
// reads column-major as n x k with leading dimension n (its row length as stored), so it goes first,
// untransposed, and likewise for a. Leading dimensions are at least 1, as BLAS wants.
void gemm_ex(cudaStream_t stream, DType in, const void* a, const void* b, cudaDataType_t out_type, void* out,
             float alpha, float beta, const Gemm& g, const Described& what) {
  static thread_local ThreadBlas blas;
  const cublasHandle_t handle = blas.bind(stream, what);
  const int m = static_cast<int>(g.m), n = static_cast<int>(g.n), k = static_cast<int>(g.k);
  const int ld_a = std::max(1, g.trans_a ? m : k);
  const int ld_b = std::max(1, g.trans_b ? k : n);
  check_cublas(cublasGemmEx(handle, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n,
                            m, k, &alpha, b, cuda_type(in), ld_b, a, cuda_type(in), ld_a, &beta, out, out_type,
                            std::max(1, n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx", what);
}

}  // namespace

void gemm(CUstream_st* stream, DType in_dtype, DType out_dtype, const void* a, const void* b, void* out,
          const Gemm& g) {
  if (g.m == 0 || g.n == 0) return;
  const std::int64_t mn = g.m * g.n;
  const Described what{g, in_dtype, out_dtype};
  if (g.k == 0) {
    // An empty sum: out = beta * out, and zeros for beta == 0, as BLAS defines it (cuBLAS is not asked).
    if (g.beta != 1) gemm_epilogue(stream, out_dtype, out, nullptr, g.beta, mn);
    return;
  }
  if (in_dtype == DType::f32 && out_dtype == DType::bf16) {
    // cuBLAS has no f32 x f32 -> bf16 GEMM: the f32 product goes to scratch, then is rounded once.
    auto* product = static_cast<float*>(op_scratch(mn * static_cast<std::int64_t>(sizeof(float)), "the f32 product"));
    gemm_ex(stream, in_dtype, a, b, CUDA_R_32F, product, g.alpha, 0.f, g, what);
    gemm_epilogue(stream, out_dtype, out, product, g.beta, mn);
    return;
  }
  gemm_ex(stream, in_dtype, a, b, cuda_type(out_dtype), out, g.alpha, g.beta, g, what);
}

}  // namespace fsdplab::cuda
