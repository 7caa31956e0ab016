#include "engine/tensor/rmsnorm.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/cuda/row_kernels.hpp"
#include "engine/tensor/expect.hpp"
#include "engine/tensor/float_io.hpp"
#include "engine/tensor/launch.hpp"

namespace fsdplab {
namespace {
namespace cpu {

template <class F>
void rmsnorm_forward(F* out, float* rstd, const F* x, const F* weight, std::int64_t N, std::int64_t C, float eps) {
  for (std::int64_t n = 0; n < N; ++n) {
    const F* xn = x + n * C;
    float sum_sq = 0.f;
    for (std::int64_t i = 0; i < C; ++i) {
      const float v = load_f32(xn[i]);
      sum_sq += v * v;
    }
    const float s = 1.f / std::sqrt(sum_sq / static_cast<float>(C) + eps);
    F* on = out + n * C;
    for (std::int64_t i = 0; i < C; ++i) store_f32(on[i], load_f32(xn[i]) * s * load_f32(weight[i]));
    rstd[n] = s;
  }
}

template <class F>
void rmsnorm_backward(F* dx, F* dweight, const F* dout, const F* x, const F* weight, const float* rstd,
                      std::int64_t N, std::int64_t C) {
  // dweight sums over all rows: summed here in f32 and added to the output once, so a bf16 gradient
  // is rounded once per element rather than once per row.
  std::vector<float> dw(static_cast<std::size_t>(C), 0.f);
  for (std::int64_t n = 0; n < N; ++n) {
    const F* xn = x + n * C;
    const F* gn = dout + n * C;
    const float s = rstd[n];
    float dnorm_norm_mean = 0.f;
    for (std::int64_t i = 0; i < C; ++i)
      dnorm_norm_mean += load_f32(weight[i]) * load_f32(gn[i]) * load_f32(xn[i]) * s;
    dnorm_norm_mean /= static_cast<float>(C);
    F* dxn = dx + n * C;
    for (std::int64_t i = 0; i < C; ++i) {
      const float g = load_f32(gn[i]);
      const float norm = load_f32(xn[i]) * s;
      const float dnorm = load_f32(weight[i]) * g;
      dw[static_cast<std::size_t>(i)] += norm * g;
      // Rounded before it is added: into a residual stream's gradient, this is bit for bit a separate add.
      store_f32(dxn[i], load_f32(dxn[i]) + round_as<F>(s * (dnorm - norm * dnorm_norm_mean)));
    }
  }
  for (std::int64_t i = 0; i < C; ++i)
    store_f32(dweight[i], load_f32(dweight[i]) + dw[static_cast<std::size_t>(i)]);
}

}  // namespace cpu
}  // namespace

void rmsnorm(Stream s, const Tensor& x, const Tensor& weight, const Tensor& out, const Tensor& rstd, float eps) {
  constexpr std::string_view op = "rmsnorm";
  expect_float(op, "x", x, 2, "[N, C]");
  const std::int64_t N = x.dim(0);
  const std::int64_t C = x.dim(1);
  const DType dt = x.dtype();
  expect_tensor(op, "weight", weight, {C}, dt);
  expect_tensor(op, "out", out, {N, C}, dt);
  expect_tensor(op, "rstd", rstd, {N}, DType::f32);
  check(eps >= 0.f && std::isfinite(eps), "rmsnorm: eps must be finite and >= 0, got ", eps);
  expect_disjoint(op, {{"x", &x}, {"weight", &weight}}, {{"out", &out}, {"rstd", &rstd}});

  const double es = static_cast<double>(dtype_size(dt));
  const double nc = static_cast<double>(N * C);
  // Per element: square and sum (2), normalise and scale (2). Bytes: x read, out written, weight read,
  // rstd written.
  const OpCost cost{.flops = 4 * nc, .bytes = es * (2 * nc + static_cast<double>(C)) + 4.0 * static_cast<double>(N),
                    .dtype = dt};
  launch_op(s, std::string(op), cost, {{&x, &weight}, {&out, &rstd}},
            {.host =
                 [&] {
                   dispatch_float(dt, [&](auto zero) {
                     using F = decltype(zero);
                     cpu::rmsnorm_forward(out.data<F>(), rstd.f32(), x.data<F>(), weight.data<F>(), N, C, eps);
                   });
                 },
             .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
               cuda::rmsnorm_forward(stream, dt, out.raw(), rstd.f32(), x.raw(), weight.raw(), N, C, eps);
             })});
}

void rmsnorm_backward(Stream s, const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dweight) {
  constexpr std::string_view op = "rmsnorm_backward";
  expect_float(op, "x", x, 2, "[N, C]");
  const std::int64_t N = x.dim(0);
  const std::int64_t C = x.dim(1);
  const DType dt = x.dtype();
  expect_tensor(op, "dout", dout, {N, C}, dt);
  expect_tensor(op, "weight", weight, {C}, dt);
  expect_tensor(op, "rstd", rstd, {N}, DType::f32);
  expect_tensor(op, "dx", dx, {N, C}, dt);
  expect_tensor(op, "dweight", dweight, {C}, dt);
  expect_disjoint(op, {{"dout", &dout}, {"x", &x}, {"weight", &weight}, {"rstd", &rstd}},
                  {{"dx", &dx}, {"dweight", &dweight}});

  const double es = static_cast<double>(dtype_size(dt));
  const double nc = static_cast<double>(N * C);
  // Per element: the row's reduction (4), dweight (2), dx (5). Bytes: dout and x read, dx read and
  // written; weight read, dweight read and written; rstd read.
  const OpCost cost{.flops = 11 * nc,
                    .bytes = es * (4 * nc + 3.0 * static_cast<double>(C)) + 4.0 * static_cast<double>(N),
                    .dtype = dt};
  // The gradients are read-modify-write: listing them as writes covers the read for the race detector.
  launch_op(s, std::string(op), cost, {{&dout, &x, &weight, &rstd}, {&dx, &dweight}},
            {.host =
                 [&] {
                   dispatch_float(dt, [&](auto zero) {
                     using F = decltype(zero);
                     cpu::rmsnorm_backward(dx.data<F>(), dweight.data<F>(), dout.data<F>(), x.data<F>(),
                                           weight.data<F>(), rstd.f32(), N, C);
                   });
                 },
             .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
               cuda::rmsnorm_backward(stream, dt, dx.raw(), dweight.raw(), dout.raw(), x.raw(), weight.raw(),
                                      rstd.f32(), N, C);
             })});
}

}  // namespace fsdplab
