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
void sum(float* out, const F* x, std::int64_t n) {
  double total = 0;
  for (std::int64_t i = 0; i < n; ++i) total += load_f32(x[i]);
  *out = static_cast<float>(total);
}

}  // namespace cpu
}  // namespace

void sum(Stream s, const Tensor& x, const Tensor& out) {
  constexpr std::string_view op = "sum";
  expect_floating(op, "x", x);
  if (!(out.defined() && out.numel() == 1 && out.dtype() == DType::f32))
    fail(op, ": out must be a 1-element f32 tensor, got ", out.describe());
  const double n = static_cast<double>(x.numel());
  const OpCost cost{.flops = n, .bytes = static_cast<double>(x.nbytes() + out.nbytes()), .dtype = x.dtype()};
  // out may lie inside x: every element is read before the one write.
  launch_op(s, std::string(op), cost, {{&x}, {&out}}, {.host = [&] {
    dispatch_float(x.dtype(), [&](auto zero) {
      using F = decltype(zero);
      cpu::sum(out.f32(), x.data<F>(), x.numel());
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::sum(stream, x.dtype(), out.f32(), x.raw(), x.numel());
  })});
}

}  // namespace fsdplab
