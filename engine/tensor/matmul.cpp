#include "engine/tensor/matmul.hpp"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <semaphore>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/cuda/cublas_matmul.hpp"
#include "engine/runtime/error.hpp"
#include "engine/tensor/bf16.hpp"
#include "engine/tensor/expect.hpp"
#include "engine/tensor/float_io.hpp"
#include "engine/tensor/gelu_tanh.hpp"
#include "engine/tensor/launch.hpp"

namespace fsdplab {
namespace {
namespace cpu {

struct Gemm {
  int m, n, k;
  bool trans_a, trans_b;
  float alpha, beta;
};

// Ranks are threads of one process: OpenBLAS's own thread pool would oversubscribe the cores, and
// its split of the work (hence the summation order) would depend on the machine. One thread per
// call keeps every run on one machine bitwise identical; fsdplab also names OpenBLAS's kernels, so that
// its runs are identical across machines ([Note: the same digits on every machine], app/host_blas_kernel.cpp).
void use_one_blas_thread() {
  static const bool done = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

// [Note: OpenBLAS's memory regions]
// Each OpenBLAS call takes a work buffer from a table built for a fixed number of threads (Debian's: MAX_THREADS=64
// in openblas_get_config()), and gives it back when it returns. Ranks are threads: 512 ranks of the streams demo
// computing at once ran past the table, and OpenBLAS printed "you tried to allocate too many memory regions" and
// crashed the process. At most kMaxBlasCallsAtOnce calls are inside OpenBLAS at a time; the others wait their turn,
// which costs nothing on a host with fewer cores than that.
constexpr std::ptrdiff_t kMaxBlasCallsAtOnce = 32;

class BlasCallSlot {
 public:
  BlasCallSlot() { slots().acquire(); }
  ~BlasCallSlot() { slots().release(); }
  BlasCallSlot(const BlasCallSlot&) = delete;
  BlasCallSlot& operator=(const BlasCallSlot&) = delete;

 private:
  static std::counting_semaphore<kMaxBlasCallsAtOnce>& slots() {
    static std::counting_semaphore<kMaxBlasCallsAtOnce> free_slots(kMaxBlasCallsAtOnce);
    return free_slots;
  }
};

// Row-major sgemm with the leading dimensions of the operands as stored. BLAS wants them >= 1
// even when a dimension is 0.
void sgemm(const float* a, const float* b, float* out, const Gemm& g) {
  use_one_blas_thread();
  const BlasCallSlot slot;  // See [Note: OpenBLAS's memory regions]
  const int lda = std::max(1, g.trans_a ? g.m : g.k);
  const int ldb = std::max(1, g.trans_b ? g.k : g.n);
  cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans, g.m, g.n,
              g.k, g.alpha, a, lda, b, ldb, g.beta, out, std::max(1, g.n));
}

// An f32 pointer to n elements: the data itself, or a widened copy of bf16 data held in `scratch`.
const float* as_f32(const float* x, std::int64_t, std::vector<float>&) { return x; }
const float* as_f32(const std::uint16_t* x, std::int64_t n, std::vector<float>& scratch) {
  scratch.resize(static_cast<std::size_t>(n));
  std::transform(x, x + n, scratch.begin(), bf16_to_float);
  return scratch.data();
}

// The epilogue's tensors as the host body reads them: null where the epilogue has none.
template <class Out>
struct Epilogue {
  const Out* bias = nullptr;
  const Out* residual = nullptr;
  Out* gelu_pre = nullptr;
  bool empty() const { return bias == nullptr && residual == nullptr && gelu_pre == nullptr; }
};

// MatmulEpilogue's formulas on the f32 product, element by element, then the one rounding into out. For an
// f32 out, product may be out itself.
template <class Out>
void apply_epilogue(const float* product, Out* out, const Epilogue<Out>& e, const Gemm& g) {
  for (std::int64_t i = 0; i < g.m; ++i) {
    for (std::int64_t j = 0; j < g.n; ++j) {
      const std::int64_t at = i * g.n + j;
      float v = product[at];
      if (e.bias != nullptr) v += load_f32(e.bias[j]);
      if (e.gelu_pre != nullptr) {
        store_f32(e.gelu_pre[at], v);
        v = gelu_tanh(v);
      } else if (e.residual != nullptr) {
        v = load_f32(e.residual[at]) + v;
      }
      store_f32(out[at], v);
    }
  }
}

// bf16 GEMMs run as sgemm on widened copies, so products accumulate in f32 as on a tensor core, and a bf16
// out is rounded once at the end rather than after every partial sum. An epilogue works on that f32 product.
template <class In, class Out>
void gemm(const In* a, const In* b, Out* out, const Gemm& g, const Epilogue<Out>& e) {
  std::vector<float> a32, b32;
  const float* pa = as_f32(a, std::int64_t{g.m} * g.k, a32);
  const float* pb = as_f32(b, std::int64_t{g.k} * g.n, b32);
  if constexpr (std::is_same_v<Out, float>) {
    sgemm(pa, pb, out, g);
    if (!e.empty()) apply_epilogue(out, out, e, g);
  } else {
    const std::int64_t mn = std::int64_t{g.m} * g.n;
    std::vector<float> c32(static_cast<std::size_t>(mn), 0.f);
    if (g.beta != 0) std::transform(out, out + mn, c32.begin(), bf16_to_float);  // beta == 0 never reads out
    sgemm(pa, pb, c32.data(), g);
    apply_epilogue(c32.data(), out, e, g);
  }
}

}  // namespace cpu

bool is_float(const Tensor& t) { return t.dtype() == DType::f32 || t.dtype() == DType::bf16; }

// The epilogue's tensors: each of out's dtype and of the shape MatmulEpilogue gives it, alpha 1 and beta 0, a GELU
// or a residual but not both, and nothing written overlapping another operand.
void check_epilogue(const Tensor& a, const Tensor& b, const Tensor& out, const MatmulOptions& opt,
                    const MatmulEpilogue& e) {
  constexpr std::string_view op = "matmul";
  if (!(opt.alpha == 1 && opt.beta == 0))
    fail("matmul: an epilogue takes alpha 1 and beta 0 (it replaces them), got alpha ", opt.alpha, ", beta ",
         opt.beta);
  if (e.residual.defined() && e.gelu_pre.defined())
    fail("matmul: an epilogue adds a residual or applies a GELU, not both (residual ", e.residual.describe(),
         ", gelu_pre ", e.gelu_pre.describe(), ")");
  if (e.bias.defined()) expect_tensor(op, "epilogue bias", e.bias, {out.dim(1)}, out.dtype());
  if (e.residual.defined()) expect_tensor(op, "epilogue residual", e.residual, out.shape(), out.dtype());
  if (e.gelu_pre.defined()) expect_tensor(op, "epilogue gelu_pre", e.gelu_pre, out.shape(), out.dtype());
  expect_disjoint(op, {{"a", &a}, {"b", &b}, {"bias", &e.bias}, {"residual", &e.residual}},
                  {{"out", &out}, {"gelu_pre", &e.gelu_pre}});
}

}  // namespace

void matmul(Stream s, const Tensor& a, const Tensor& b, const Tensor& out, MatmulOptions opt,
            const MatmulEpilogue& epilogue) {
  if (!(a.ndim() == 2 && b.ndim() == 2 && out.ndim() == 2))
    fail("matmul: expected 2-D operands (fold batch dimensions into rows), got a = ", a.describe(),
         ", b = ", b.describe(), ", out = ", out.describe());
  if (!(is_float(a) && a.dtype() == b.dtype()))
    fail("matmul: expected a and b of one float dtype (f32 or bf16), got a = ", a.describe(), ", b = ", b.describe());
  if (!(is_float(out))) fail("matmul: expected out of dtype f32 or bf16, got ", out.describe());

  const std::int64_t m = opt.trans_a ? a.dim(1) : a.dim(0);
  const std::int64_t k = opt.trans_a ? a.dim(0) : a.dim(1);
  const std::int64_t kb = opt.trans_b ? b.dim(1) : b.dim(0);
  const std::int64_t n = opt.trans_b ? b.dim(0) : b.dim(1);
  const char* ta = opt.trans_a ? " transposed" : "";
  const char* tb = opt.trans_b ? " transposed" : "";
  if (!(k == kb))
    fail("matmul: inner dimensions differ: op(a) is ", shape_str({m, k}), " (a = ", a.describe(), ta, ") but op(b) is ",
         shape_str({kb, n}), " (b = ", b.describe(), tb, ")");
  if (!(out.shape() == Shape{m, n}))
    fail("matmul: expected out ", shape_str({m, n}), " for op(a) ", shape_str({m, k}), " @ op(b) ", shape_str({k, n}),
         ", got ", out.describe());
  if (!(std::max({m, n, k}) <= INT_MAX))
    fail("matmul: ", shape_str({m, k}), " @ ", shape_str({k, n}), " has a dimension beyond BLAS's 32-bit int");
  if (!(!out.overlaps(a) && !out.overlaps(b)))
    fail("matmul: out ", out.describe(), " overlaps an input (a = ", a.describe(), ", b = ", b.describe(),
         "); a GEMM cannot write over its own operands");

  if (!epilogue.empty()) check_epilogue(a, b, out, opt, epilogue);

  const bool reads_out = opt.beta != 0;
  const auto bytes_of = [](const Tensor& t) { return t.defined() ? static_cast<double>(t.nbytes()) : 0.0; };
  // The epilogue's few FLOPs an element ride on the GEMM's; its operands' bytes count.
  const OpCost cost{.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k),
                    .bytes = static_cast<double>(a.nbytes() + b.nbytes() + out.nbytes() * (reads_out ? 2 : 1)) +
                             bytes_of(epilogue.bias) + bytes_of(epilogue.residual) + bytes_of(epilogue.gelu_pre),
                    .dtype = a.dtype(),
                    .matmul = true};
  const cpu::Gemm g{
      static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), opt.trans_a, opt.trans_b, opt.alpha, opt.beta};
  const OpBody body{
      .host =
          [&] {
            dispatch_float(a.dtype(), [&](auto in_zero) {
              dispatch_float(out.dtype(), [&](auto out_zero) {
                using In = decltype(in_zero);
                using Out = decltype(out_zero);
                const cpu::Epilogue<Out> e{
                    .bias = epilogue.bias.defined() ? epilogue.bias.data<Out>() : nullptr,
                    .residual = epilogue.residual.defined() ? epilogue.residual.data<Out>() : nullptr,
                    .gelu_pre = epilogue.gelu_pre.defined() ? epilogue.gelu_pre.data<Out>() : nullptr};
                cpu::gemm(a.data<In>(), b.data<In>(), out.data<Out>(), g, e);
              });
            });
          },
      .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
        cuda::gemm(stream, a.dtype(), out.dtype(), a.raw(), b.raw(), out.raw(),
                   {.m = m, .n = n, .k = k, .trans_a = opt.trans_a, .trans_b = opt.trans_b, .alpha = opt.alpha,
                    .beta = opt.beta},
                   {.bias = epilogue.bias.defined() ? epilogue.bias.raw() : nullptr,
                    .residual = epilogue.residual.defined() ? epilogue.residual.raw() : nullptr,
                    .gelu_pre = epilogue.gelu_pre.defined() ? epilogue.gelu_pre.raw() : nullptr});
      })};
  OpTensors tensors{{&a, &b}, {&out}};
  if (reads_out) tensors.reads.push_back(&out);
  for (const Tensor* t : {&epilogue.bias, &epilogue.residual})
    if (t->defined()) tensors.reads.push_back(t);
  if (epilogue.gelu_pre.defined()) tensors.writes.push_back(&epilogue.gelu_pre);
  launch_op(s, "matmul", cost, std::move(tensors), body);
}

}  // namespace fsdplab
