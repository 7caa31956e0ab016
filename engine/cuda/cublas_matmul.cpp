#include "engine/cuda/cublas_matmul.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <ostream>
#include <type_traits>
#include <vector>

#include "engine/cuda/cublas_library.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/matmul_kernels.hpp"
#include "engine/cuda/op_scratch.hpp"

namespace fsdplab::cuda {
namespace {

// ---- a failed call, named --------------------------------------------------------------------------

// What a failure message says of the GEMM; formatted only when one fails.
struct Described {
  const Gemm& g;
  DType in, out;
  const GemmEpilogue& epilogue;
};

std::ostream& operator<<(std::ostream& s, const Described& d) {
  const Gemm& g = d.g;
  const GemmEpilogue& e = d.epilogue;
  s << "matmul on cuBLAS, out [" << g.m << ", " << g.n << "] " << dtype_name(d.out) << " = op(a) [" << g.m << ", "
    << g.k << "] @ op(b) [" << g.k << ", " << g.n << "] " << dtype_name(d.in) << (g.trans_a ? ", a transposed" : "")
    << (g.trans_b ? ", b transposed" : "") << ", alpha " << g.alpha << ", beta " << g.beta;
  if (!e.empty())
    s << ", epilogue" << (e.bias != nullptr ? " bias" : "") << (e.gelu_pre != nullptr ? " gelu" : "")
      << (e.residual != nullptr ? " residual" : "");
  return s;
}

void check_cublas(cublasStatus_t status, const char* call, const Described& what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail(what, ": ", call, " failed: ", cublas_library().cublasGetStatusName(status), " (",
       cublas_library().cublasGetStatusString(status), ")");
}

// ---- a thread's cuBLAS handles ---------------------------------------------------------------------

// One host thread's cuBLAS handles, one per GPU (cuBLAS handles are not to be shared between threads
// that change their stream); destroyed at thread exit (process exit for the main thread), when there is
// nothing to report an error to.
class ThreadBlas {
 public:
  ThreadBlas() = default;
  ThreadBlas(const ThreadBlas&) = delete;
  ThreadBlas& operator=(const ThreadBlas&) = delete;
  ~ThreadBlas() {
    for (const Handle& h : handles_) cublas_library().cublasDestroy(h.handle);
  }

  struct Bound {
    cublasHandle_t handle;
    void* workspace;
    std::size_t workspace_bytes;
    int sm_count;  // the SMs the stream runs on, 0 for every SM (op_scratch.hpp)
  };

  // The current GPU's handle, set to run on `stream` with a workspace of the op's own (op_scratch.hpp):
  // cuBLAS's default workspace pool is shared by the streams of a handle, which makes results depend on
  // which streams ran concurrently; the op's scratch comes from its stream's pool, so a GEMM is bitwise
  // reproducible, and the workspace shows in the ledger. A cuBLASLt matmul is given the same workspace.
  Bound bind(cudaStream_t stream, const Described& what) {
    int gpu = 0;
    check_cuda(cudaGetDevice(&gpu), what, ": cudaGetDevice");
    const Handle& h = on_gpu(gpu, what);
    void* workspace = op_scratch(static_cast<std::int64_t>(h.workspace_bytes), "the cuBLAS workspace");
    // cublasSetStream resets the handle to cuBLAS's shared workspace pool: the op's own goes after it.
    check_cublas(cublas_library().cublasSetStream(h.handle, stream), "cublasSetStream", what);
    check_cublas(cublas_library().cublasSetWorkspace(h.handle, workspace, h.workspace_bytes), "cublasSetWorkspace",
                 what);
    // A thread's ops all run on its rank's streams, so this is the same value every call after the first.
    const int sm_count = op_sm_count();
    check_cublas(cublas_library().cublasSetSmCountTarget(h.handle, sm_count), "cublasSetSmCountTarget", what);
    return {h.handle, workspace, h.workspace_bytes, sm_count};
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
    check_cublas(cublas_library().cublasCreate(&h.handle), "cublasCreate", what);
    // Split-K partial sums stay in f32 even when out is bf16: the result is rounded once, as on the host.
    const cublasStatus_t mode = cublas_library().cublasSetMathMode(
        h.handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    if (mode != CUBLAS_STATUS_SUCCESS) cublas_library().cublasDestroy(h.handle);
    check_cublas(mode, "cublasSetMathMode", what);
    handles_.push_back(h);
    return handles_.back();
  }

  std::vector<Handle> handles_;
};

// ---- cuBLAS's GEMM ---------------------------------------------------------------------------------

cudaDataType_t cuda_type(DType dtype) { return dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F; }

// Row-major out = op(a) @ op(b) is column-major out^T = op(b)^T @ op(a)^T: b stored row-major [k, n]
// reads column-major as n x k with leading dimension n (its row length as stored), so it goes first,
// untransposed, and likewise for a. Leading dimensions are at least 1, as BLAS wants.
void gemm_ex(cublasHandle_t handle, DType in, const void* a, const void* b, cudaDataType_t out_type, void* out,
             float alpha, float beta, const Gemm& g, const Described& what) {
  const int m = static_cast<int>(g.m), n = static_cast<int>(g.n), k = static_cast<int>(g.k);
  const int ld_a = std::max(1, g.trans_a ? m : k);
  const int ld_b = std::max(1, g.trans_b ? k : n);
  check_cublas(cublas_library().cublasGemmEx(handle, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                             g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, cuda_type(in),
                                             ld_b, a, cuda_type(in), ld_a, &beta, out, out_type, std::max(1, n),
                                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx", what);
}

// ---- cuBLASLt's GEMM with an epilogue --------------------------------------------------------------

// [Note: the GEMM epilogue on cuBLASLt]
// A Linear's bias, GELU and skip connection run inside the GEMM's kernel: cuBLASLt applies an epilogue to the
// f32 accumulator before it stores D. The bias is CUBLASLT_EPILOGUE_BIAS, the GELU CUBLASLT_EPILOGUE_GELU_AUX_BIAS
// (the aux matrix receives p + bias, which the GELU's backward reads), and the skip connection is C with beta 1:
// D = p + C + bias. So a Linear's forward is one kernel where it was a GEMM and an elementwise pass that read the
// product back, and a bf16 out is rounded once, as the host body does.
//
// Layouts are those of gemm_ex: row-major out = op(a) @ op(b) is column-major out^T = op(b)^T @ op(a)^T, so b is
// cuBLASLt's A and a its B, and the bias, one value per column of the row-major out, is one per row of D, which is what
// cuBLASLt broadcasts. Where cuBLASLt has no algorithm (a leading dimension or pointer it cannot align), a bias or
// GELU aux pointer is not 16-byte aligned (which no preference can tell the heuristic), a GELU's width is not a
// multiple of 8 (its aux matrix's rule), or a and out differ in dtype (no Linear does), the GEMM
// runs on cublasGemmEx into an f32 scratch product and the epilogue as matmul_kernels.cu's kernel: the same
// formulas, in one more pass. Split-K partial sums stay in f32, as with
// CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION on the cuBLAS path, and the heuristic's pick depends only on the
// shapes, types, alignments and the SMs it is told the stream has, so a run is reproducible bit for bit. On a GPU,
// `fsdplab bench --what kernels --device cuda` names which ran: cuBLASLt's kernels, or gemm_epilogue's
// epilogue_kernel.

// cuBLASLt's descriptors, destroyed when they go out of scope.
template <auto CublasLibrary::*destroy>
struct LtDestroy {
  template <class P>
  void operator()(P p) const {
    (cublas_library().*destroy)(p);
  }
};
using LtDesc =
    std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>, LtDestroy<&CublasLibrary::cublasLtMatmulDescDestroy>>;
using LtLayout = std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>,
                                 LtDestroy<&CublasLibrary::cublasLtMatrixLayoutDestroy>>;
using LtPreference = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                                     LtDestroy<&CublasLibrary::cublasLtMatmulPreferenceDestroy>>;

template <class V>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const V& value,
                   const Described& what) {
  check_cublas(cublas_library().cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)),
               "cublasLtMatmulDescSetAttribute", what);
}

template <class V>
void set_preference(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attribute, const V& value,
                    const Described& what) {
  check_cublas(cublas_library().cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof(value)),
               "cublasLtMatmulPreferenceSetAttribute", what);
}

// A column-major rows x cols matrix with leading dimension rows, at least 1 as BLAS wants.
LtLayout lt_layout(cudaDataType_t type, std::int64_t rows, std::int64_t cols, const Described& what) {
  cublasLtMatrixLayout_t layout = nullptr;
  check_cublas(
      cublas_library().cublasLtMatrixLayoutCreate(&layout, type, static_cast<std::uint64_t>(rows),
                                                  static_cast<std::uint64_t>(cols), std::max<std::int64_t>(1, rows)),
      "cublasLtMatrixLayoutCreate", what);
  return LtLayout(layout);
}

// The largest power of two, at most 256, that the address is a multiple of: what the heuristic may assume of it.
std::uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

// The GEMM and its epilogue as one cuBLASLt matmul ([Note: the GEMM epilogue on cuBLASLt]). Returns false, having
// enqueued nothing, where cuBLASLt has no algorithm for it.
bool lt_gemm(cudaStream_t stream, const ThreadBlas::Bound& bound, DType in, DType out_dtype, const void* a,
             const void* b, void* out, const Gemm& g, const GemmEpilogue& e, const Described& what) {
  // A cublasHandle_t holds a cuBLASLt context and may be used as one (cuBLAS's documentation of
  // cublasLtHandle_t), so each thread's GEMMs share one handle per GPU.
  const auto lt = reinterpret_cast<cublasLtHandle_t>(bound.handle);
  // The GELU's aux matrix (gelu_pre, column-major n x m) needs a leading dimension divisible by 8 (cublasLt.h,
  // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD); other widths take the fallback.
  if (e.gelu_pre != nullptr && g.n % 8 != 0) return false;
  // The alignment preferences below describe A, B, C and D only: the heuristic knows nothing of the bias and aux
  // pointers, and may pick a kernel that loads them 16 bytes at a time, which faults ("misaligned address", and
  // the context is lost) on one that is not. A bias is a view into its unit's flat buffer, where FSDP's alignment
  // of 4 elements leaves bf16 views 8 bytes aligned; such a bias, or aux matrix, takes the fallback.
  if (alignment_of(e.bias) < 16 || alignment_of(e.gelu_pre) < 16) return false;
  const cudaDataType_t in_type = cuda_type(in), out_type = cuda_type(out_dtype);

  cublasLtMatmulDesc_t raw_desc = nullptr;
  check_cublas(cublas_library().cublasLtMatmulDescCreate(&raw_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
               "cublasLtMatmulDescCreate", what);
  const LtDesc desc(raw_desc);
  set_attribute(raw_desc, CUBLASLT_MATMUL_DESC_TRANSA, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, what);
  set_attribute(raw_desc, CUBLASLT_MATMUL_DESC_TRANSB, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, what);
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (e.gelu_pre != nullptr) {
    epilogue = e.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    set_attribute(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, e.gelu_pre, what);
    set_attribute(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, std::int64_t{g.n}, what);
  } else if (e.bias != nullptr) {
    epilogue = CUBLASLT_EPILOGUE_BIAS;
  }
  set_attribute(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, what);
  set_attribute(raw_desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, std::int32_t{bound.sm_count}, what);
  if (e.bias != nullptr) {
    set_attribute(raw_desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, e.bias, what);
    set_attribute(raw_desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, out_type, what);
  }

  // b stored [k, n] (or [n, k] transposed) is column-major n x k (k x n); a likewise; C and D are n x m.
  const LtLayout a_layout = lt_layout(in_type, g.trans_b ? g.k : g.n, g.trans_b ? g.n : g.k, what);
  const LtLayout b_layout = lt_layout(in_type, g.trans_a ? g.m : g.k, g.trans_a ? g.k : g.m, what);
  const LtLayout cd_layout = lt_layout(out_type, g.n, g.m, what);
  const void* c = e.residual != nullptr ? e.residual : out;

  cublasLtMatmulPreference_t raw_pref = nullptr;
  check_cublas(cublas_library().cublasLtMatmulPreferenceCreate(&raw_pref), "cublasLtMatmulPreferenceCreate", what);
  const LtPreference pref(raw_pref);
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, std::uint64_t{bound.workspace_bytes}, what);
  // Partial sums of a split K reduced in f32 only (in place for an f32 out), never in bf16.
  std::uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  if (out_dtype == DType::f32) reductions |= CUBLASLT_REDUCTION_SCHEME_INPLACE;
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reductions, what);
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(b), what);
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(a), what);
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(c), what);
  set_preference(raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(out), what);

  cublasLtMatmulHeuristicResult_t choice{};
  int found = 0;
  const cublasStatus_t heuristic = cublas_library().cublasLtMatmulAlgoGetHeuristic(
      lt, raw_desc, a_layout.get(), b_layout.get(), cd_layout.get(), cd_layout.get(), raw_pref, 1, &choice, &found);
  // A result is usable only where its own state says so (cublasLt.h, cublasLtMatmulAlgoGetHeuristic).
  if (heuristic == CUBLAS_STATUS_NOT_SUPPORTED ||
      (heuristic == CUBLAS_STATUS_SUCCESS && (found == 0 || choice.state != CUBLAS_STATUS_SUCCESS)))
    return false;
  check_cublas(heuristic, "cublasLtMatmulAlgoGetHeuristic", what);

  const float alpha = 1.f, beta = e.residual != nullptr ? 1.f : 0.f;
  check_cublas(cublas_library().cublasLtMatmul(lt, raw_desc, &alpha, b, a_layout.get(), a, b_layout.get(), &beta, c,
                                               cd_layout.get(), out, cd_layout.get(), &choice.algo, bound.workspace,
                                               bound.workspace_bytes, stream),
               "cublasLtMatmul", what);
  return true;
}

}  // namespace

// ---- gemm: an epilogue on cuBLASLt where it can, else cuBLAS and the epilogue kernel ---------------

void gemm(CUstream_st* stream, DType in_dtype, DType out_dtype, const void* a, const void* b, void* out,
          const Gemm& g, const GemmEpilogue& epilogue) {
  if (g.m == 0 || g.n == 0) return;
  const std::int64_t mn = g.m * g.n;
  const Described what{g, in_dtype, out_dtype, epilogue};
  if (g.k == 0) {
    // An empty sum: out = beta * out, and zeros for beta == 0, as BLAS defines it (cuBLAS is not asked), then
    // the epilogue.
    if (g.beta != 1 || !epilogue.empty()) gemm_epilogue(stream, out_dtype, out, nullptr, g.beta, g.m, g.n, epilogue);
    return;
  }
  static thread_local ThreadBlas blas;
  const ThreadBlas::Bound bound = blas.bind(stream, what);
  // cuBLASLt is asked for one dtype in and out, the Linears' case.
  if (!epilogue.empty() && in_dtype == out_dtype &&
      lt_gemm(stream, bound, in_dtype, out_dtype, a, b, out, g, epilogue, what))
    return;
  if (!epilogue.empty() || (in_dtype == DType::f32 && out_dtype == DType::bf16)) {
    // cuBLAS has no f32 x f32 -> bf16 GEMM, and cuBLASLt no algorithm for this epilogue: the f32 product goes
    // to scratch, then the epilogue kernel rounds it once.
    auto* product = static_cast<float*>(op_scratch(mn * static_cast<std::int64_t>(sizeof(float)), "the f32 product"));
    gemm_ex(bound.handle, in_dtype, a, b, CUDA_R_32F, product, g.alpha, 0.f, g, what);
    gemm_epilogue(stream, out_dtype, out, product, g.beta, g.m, g.n, epilogue);
    return;
  }
  gemm_ex(bound.handle, in_dtype, a, b, cuda_type(out_dtype), out, g.alpha, g.beta, g, what);
}

}  // namespace fsdplab::cuda
