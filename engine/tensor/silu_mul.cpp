#include "engine/tensor/silu_mul.hpp"

#include <cmath>
#include <cstdint>

#include "engine/cuda/pointwise_kernels.hpp"
#include "engine/tensor/expect.hpp"
#include "engine/tensor/float_io.hpp"
#include "engine/tensor/launch.hpp"

namespace fsdplab {
namespace {
namespace cpu {

float sigmoid(float g) { return 1.f / (1.f + std::exp(-g)); }

template <class F>
void silu_mul(F* out, const F* gate, const F* up, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = load_f32(gate[i]);
    store_f32(out[i], g * sigmoid(g) * load_f32(up[i]));
  }
}

template <class F>
void silu_mul_backward(F* dgate, F* dup, const F* gate, const F* up, const F* dout, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = load_f32(gate[i]);
    const float sg = sigmoid(g);
    const float d = load_f32(dout[i]);
    store_f32(dgate[i], d * load_f32(up[i]) * sg * (1.f + g * (1.f - sg)));
    store_f32(dup[i], d * g * sg);
  }
}

}  // namespace cpu

}  // namespace

void silu_mul(Stream s, const Tensor& gate, const Tensor& up, const Tensor& out) {
  constexpr std::string_view op = "silu_mul";
  expect_floating(op, "gate", gate);
  expect_tensor(op, "up", up, gate.shape(), gate.dtype());
  expect_tensor(op, "out", out, gate.shape(), gate.dtype());
  expect_disjoint(op, {{"gate", &gate}, {"up", &up}}, {{"out", &out}});
  const double n = static_cast<double>(gate.numel());
  const double es = static_cast<double>(dtype_size(gate.dtype()));
  // Per element: the exponential, a sum, a division and two products (~6). Bytes: gate and up read,
  // out written.
  const OpCost cost{.flops = 6 * n, .bytes = 3 * n * es, .dtype = gate.dtype()};
  launch_op(s, std::string(op), cost, {{&gate, &up}, {&out}}, {.host = [&] {
    dispatch_float(gate.dtype(), [&](auto zero) {
      using F = decltype(zero);
      cpu::silu_mul(out.data<F>(), gate.data<F>(), up.data<F>(), gate.numel());
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::silu_mul(stream, gate.dtype(), out.raw(), gate.raw(), up.raw(), gate.numel());
  })});
}

void silu_mul_backward(Stream s, const Tensor& gate, const Tensor& up, const Tensor& dout, const Tensor& dgate,
                       const Tensor& dup) {
  constexpr std::string_view op = "silu_mul_backward";
  expect_floating(op, "gate", gate);
  expect_tensor(op, "up", up, gate.shape(), gate.dtype());
  expect_tensor(op, "dout", dout, gate.shape(), gate.dtype());
  expect_tensor(op, "dgate", dgate, gate.shape(), gate.dtype());
  expect_tensor(op, "dup", dup, gate.shape(), gate.dtype());
  expect_disjoint(op, {{"gate", &gate}, {"up", &up}, {"dout", &dout}}, {{"dgate", &dgate}, {"dup", &dup}});
  const double n = static_cast<double>(gate.numel());
  const double es = static_cast<double>(dtype_size(gate.dtype()));
  // Per element: the sigmoid (~4), silu' (~3) and five products. Bytes: gate, up and dout read; dgate and
  // dup written.
  const OpCost cost{.flops = 12 * n, .bytes = 5 * n * es, .dtype = gate.dtype()};
  launch_op(s, std::string(op), cost, {{&gate, &up, &dout}, {&dgate, &dup}}, {.host = [&] {
    dispatch_float(gate.dtype(), [&](auto zero) {
      using F = decltype(zero);
      cpu::silu_mul_backward(dgate.data<F>(), dup.data<F>(), gate.data<F>(), up.data<F>(), dout.data<F>(),
                             gate.numel());
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::silu_mul_backward(stream, gate.dtype(), dgate.raw(), dup.raw(), gate.raw(), up.raw(), dout.raw(),
                            gate.numel());
  })});
}

}  // namespace fsdplab
