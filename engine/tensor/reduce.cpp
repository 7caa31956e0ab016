#include "engine/tensor/reduce.hpp"

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/cuda/loss_kernels.hpp"
#include "engine/runtime/error.hpp"
#include "engine/tensor/expect.hpp"
#include "engine/tensor/float_io.hpp"
#include "engine/tensor/launch.hpp"

namespace fsdplab {
namespace {
namespace cpu {

template <class F>
void sum(float* out, const F* x, std::int64_t n, bool squares) {
  double total = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = load_f32(x[i]);
    total += squares ? v * v : v;
  }
  *out = static_cast<float>(total);
}

}  // namespace cpu

// sum and sum_of_squares: one front-end, the term (x or x^2) the only difference.
void reduce_to_scalar(Stream s, std::string_view op, const Tensor& x, const Tensor& out, bool squares) {
  expect_floating(op, "x", x);
  expect_scalar_f32(op, "out", out);
  const double n = static_cast<double>(x.numel());
  const OpCost cost{
      .flops = squares ? 2 * n : n, .bytes = static_cast<double>(x.nbytes() + out.nbytes()), .dtype = x.dtype()};
  // out may lie inside x: every element is read before the one write.
  launch_op(s, std::string(op), cost, {{&x}, {&out}},
            {.host =
                 [&] {
                   dispatch_float(x.dtype(), [&](auto zero) {
                     using F = decltype(zero);
                     cpu::sum(out.f32(), x.data<F>(), x.numel(), squares);
                   });
                 },
             .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
               if (squares) {
                 cuda::sum_of_squares(stream, x.dtype(), out.f32(), x.raw(), x.numel());
               } else {
                 cuda::sum(stream, x.dtype(), out.f32(), x.raw(), x.numel());
               }
             })});
}

}  // namespace

void sum(Stream s, const Tensor& x, const Tensor& out) { reduce_to_scalar(s, "sum", x, out, /*squares=*/false); }

void sum_of_squares(Stream s, const Tensor& x, const Tensor& out) {
  reduce_to_scalar(s, "sum_of_squares", x, out, /*squares=*/true);
}

}  // namespace fsdplab
