#include "engine/tensor/softmax.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "engine/cuda/row_kernels.hpp"
#include "engine/tensor/expect.hpp"
#include "engine/tensor/float_io.hpp"
#include "engine/tensor/launch.hpp"

namespace fsdplab {
namespace {
namespace cpu {

template <class F>
void softmax_forward(F* y, const F* x, std::int64_t N, std::int64_t C) {
  for (std::int64_t n = 0; n < N; ++n) {
    const F* xn = x + n * C;
    float max = -std::numeric_limits<float>::infinity();
    for (std::int64_t i = 0; i < C; ++i) max = std::max(max, load_f32(xn[i]));
    float sum = 0.f;
    for (std::int64_t i = 0; i < C; ++i) sum += std::exp(load_f32(xn[i]) - max);
    // exp is evaluated again rather than kept in y: a bf16 y would round the unnormalised values.
    const float inv = 1.f / sum;
    F* yn = y + n * C;
    for (std::int64_t i = 0; i < C; ++i) store_f32(yn[i], std::exp(load_f32(xn[i]) - max) * inv);
  }
}

template <class F>
void softmax_backward(F* dx, const F* y, const F* dy, std::int64_t N, std::int64_t C) {
  for (std::int64_t n = 0; n < N; ++n) {
    const F* yn = y + n * C;
    const F* gn = dy + n * C;
    float y_dot_dy = 0.f;
    for (std::int64_t i = 0; i < C; ++i) y_dot_dy += load_f32(yn[i]) * load_f32(gn[i]);
    F* dxn = dx + n * C;
    for (std::int64_t i = 0; i < C; ++i) {
      store_f32(dxn[i], load_f32(dxn[i]) + load_f32(yn[i]) * (load_f32(gn[i]) - y_dot_dy));
    }
  }
}

}  // namespace cpu
}  // namespace

void softmax(Stream s, const Tensor& x, const Tensor& y) {
  constexpr std::string_view op = "softmax";
  expect_float(op, "x", x, 2, "[N, C]");
  const std::int64_t N = x.dim(0);
  const std::int64_t C = x.dim(1);
  const DType dt = x.dtype();
  expect_tensor(op, "y", y, {N, C}, dt);
  expect_disjoint(op, {{"x", &x}}, {{"y", &y}});

  const double nc = static_cast<double>(N * C);
  // Per element: max, subtract and exp (twice: the sum, then the output), sum, scale.
  const OpCost cost{.flops = 7 * nc, .bytes = 2 * nc * static_cast<double>(dtype_size(dt)), .dtype = dt};
  launch_op(s, std::string(op), cost, {{&x}, {&y}},
            {.host =
                 [&] {
                   dispatch_float(dt, [&](auto zero) {
                     using F = decltype(zero);
                     cpu::softmax_forward(y.data<F>(), x.data<F>(), N, C);
                   });
                 },
             .cuda = FSDPLAB_CUDA_BODY(
                 [&](CUstream_st* stream) { cuda::softmax_forward(stream, dt, y.raw(), x.raw(), N, C); })});
}

void softmax_backward(Stream s, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  constexpr std::string_view op = "softmax_backward";
  expect_float(op, "y", y, 2, "[N, C]");
  const std::int64_t N = y.dim(0);
  const std::int64_t C = y.dim(1);
  const DType dt = y.dtype();
  expect_tensor(op, "dy", dy, {N, C}, dt);
  expect_tensor(op, "dx", dx, {N, C}, dt);
  expect_disjoint(op, {{"y", &y}, {"dy", &dy}}, {{"dx", &dx}});

  const double nc = static_cast<double>(N * C);
  // Per element: the row's dot product (2), subtract, multiply, accumulate. Bytes: y and dy read,
  // dx read and written.
  const OpCost cost{.flops = 5 * nc, .bytes = 4 * nc * static_cast<double>(dtype_size(dt)), .dtype = dt};
  // dx is read-modify-write: listing it as a write covers the read for the race detector.
  launch_op(s, std::string(op), cost, {{&y, &dy}, {&dx}},
            {.host =
                 [&] {
                   dispatch_float(dt, [&](auto zero) {
                     using F = decltype(zero);
                     cpu::softmax_backward(dx.data<F>(), y.data<F>(), dy.data<F>(), N, C);
                   });
                 },
             .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
               cuda::softmax_backward(stream, dt, dx.raw(), y.raw(), dy.raw(), N, C);
             })});
}

}  // namespace fsdplab
