#include "engine/tensor/layernorm.hpp"

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
void layernorm_forward(F* out, float* mean, float* rstd, const F* x, const F* weight, const F* bias,
                       std::int64_t N, std::int64_t C, float eps) {
  for (std::int64_t n = 0; n < N; ++n) {
    const F* xn = x + n * C;
    float sum = 0.f;
    for (std::int64_t i = 0; i < C; ++i) sum += load_f32(xn[i]);
    const float m = sum / static_cast<float>(C);
    // Two passes (mean, then squared deviations) rather than E[x^2] - E[x]^2, which cancels badly
    // when the mean is large against the spread.
    float var = 0.f;
    for (std::int64_t i = 0; i < C; ++i) {
      const float d = load_f32(xn[i]) - m;
      var += d * d;
    }
    const float s = 1.f / std::sqrt(var / static_cast<float>(C) + eps);
    F* on = out + n * C;
    for (std::int64_t i = 0; i < C; ++i) {
      store_f32(on[i], (load_f32(xn[i]) - m) * s * load_f32(weight[i]) + load_f32(bias[i]));
    }
    mean[n] = m;
    rstd[n] = s;
  }
}

template <class F>
void layernorm_backward(F* dx, F* dweight, F* dbias, const F* dout, const F* x, const F* weight, const float* mean,
                        const float* rstd, std::int64_t N, std::int64_t C) {
  // dweight and dbias sum over all rows: they are summed here in f32 and added to the outputs once,
  // so a bf16 gradient is rounded once per element rather than once per row.
  std::vector<float> dw(static_cast<std::size_t>(C), 0.f);
  std::vector<float> db(static_cast<std::size_t>(C), 0.f);
  for (std::int64_t n = 0; n < N; ++n) {
    const F* xn = x + n * C;
    const F* gn = dout + n * C;
    const float m = mean[n];
    const float s = rstd[n];
    // With norm = (x - mean) * rstd and dnorm = weight * dout, the gradient through the row's mean
    // and variance is  dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)).
    float dnorm_mean = 0.f;
    float dnorm_norm_mean = 0.f;
    for (std::int64_t i = 0; i < C; ++i) {
      const float norm = (load_f32(xn[i]) - m) * s;
      const float dnorm = load_f32(weight[i]) * load_f32(gn[i]);
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= static_cast<float>(C);
    dnorm_norm_mean /= static_cast<float>(C);
    F* dxn = dx + n * C;
    for (std::int64_t i = 0; i < C; ++i) {
      const float g = load_f32(gn[i]);
      const float norm = (load_f32(xn[i]) - m) * s;
      const float dnorm = load_f32(weight[i]) * g;
      db[static_cast<std::size_t>(i)] += g;
      dw[static_cast<std::size_t>(i)] += norm * g;
      // Rounded before it is added: into a residual stream's gradient, this is bit for bit a separate add.
      store_f32(dxn[i], load_f32(dxn[i]) + round_as<F>(s * (dnorm - dnorm_mean - norm * dnorm_norm_mean)));
    }
  }
  for (std::int64_t i = 0; i < C; ++i) {
    store_f32(dweight[i], load_f32(dweight[i]) + dw[static_cast<std::size_t>(i)]);
    store_f32(dbias[i], load_f32(dbias[i]) + db[static_cast<std::size_t>(i)]);
  }
}

}  // namespace cpu
}  // namespace

void layernorm(Stream s, const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
               const Tensor& mean, const Tensor& rstd, float eps) {
  constexpr std::string_view op = "layernorm";
  expect_float(op, "x", x, 2, "[N, C]");
  const std::int64_t N = x.dim(0);
  const std::int64_t C = x.dim(1);
  const DType dt = x.dtype();
  expect_tensor(op, "weight", weight, {C}, dt);
  expect_tensor(op, "bias", bias, {C}, dt);
  expect_tensor(op, "out", out, {N, C}, dt);
  expect_tensor(op, "mean", mean, {N}, DType::f32);
  expect_tensor(op, "rstd", rstd, {N}, DType::f32);
  check(eps >= 0.f, "layernorm: eps must be >= 0, got ", eps);
  expect_disjoint(op, {{"x", &x}, {"weight", &weight}, {"bias", &bias}},
                  {{"out", &out}, {"mean", &mean}, {"rstd", &rstd}});

  const double es = static_cast<double>(dtype_size(dt));
  const double nc = static_cast<double>(N * C);
  // Per element: a sum, a squared deviation (3), normalise and scale-shift (4).
  const OpCost cost{.flops = 8 * nc, .bytes = es * (2 * nc + 2.0 * C) + 4.0 * 2 * N, .dtype = dt};
  launch_op(s, std::string(op), cost, {{&x, &weight, &bias}, {&out, &mean, &rstd}},
            {.host =
                 [&] {
                   dispatch_float(dt, [&](auto zero) {
                     using F = decltype(zero);
                     cpu::layernorm_forward(out.data<F>(), mean.f32(), rstd.f32(), x.data<F>(), weight.data<F>(),
                                            bias.data<F>(), N, C, eps);
                   });
                 },
             .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
               cuda::layernorm_forward(stream, dt, out.raw(), mean.f32(), rstd.f32(), x.raw(), weight.raw(), bias.raw(),
                                       N, C, eps);
             })});
}

void layernorm_backward(Stream s, const Tensor& dout, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  constexpr std::string_view op = "layernorm_backward";
  expect_float(op, "x", x, 2, "[N, C]");
  const std::int64_t N = x.dim(0);
  const std::int64_t C = x.dim(1);
  const DType dt = x.dtype();
  expect_tensor(op, "dout", dout, {N, C}, dt);
  expect_tensor(op, "weight", weight, {C}, dt);
  expect_tensor(op, "mean", mean, {N}, DType::f32);
  expect_tensor(op, "rstd", rstd, {N}, DType::f32);
  expect_tensor(op, "dx", dx, {N, C}, dt);
  expect_tensor(op, "dweight", dweight, {C}, dt);
  expect_tensor(op, "dbias", dbias, {C}, dt);
  expect_disjoint(op, {{"dout", &dout}, {"x", &x}, {"weight", &weight}, {"mean", &mean}, {"rstd", &rstd}},
                  {{"dx", &dx}, {"dweight", &dweight}, {"dbias", &dbias}});

  const double es = static_cast<double>(dtype_size(dt));
  const double nc = static_cast<double>(N * C);
  // Per element: recompute norm (2), dnorm (1), two reductions (3), dweight and dbias (3), dx (5).
  // Bytes: dout and x read, dx read and written; weight read, dweight and dbias read and written.
  const OpCost cost{.flops = 14 * nc, .bytes = es * (4 * nc + 5.0 * C) + 4.0 * 2 * N, .dtype = dt};
  // The gradients are read-modify-write: listing them as writes covers the read for the race detector.
  launch_op(s, std::string(op), cost, {{&dout, &x, &weight, &mean, &rstd}, {&dx, &dweight, &dbias}},
            {.host =
                 [&] {
                   dispatch_float(dt, [&](auto zero) {
                     using F = decltype(zero);
                     cpu::layernorm_backward(dx.data<F>(), dweight.data<F>(), dbias.data<F>(), dout.data<F>(),
                                             x.data<F>(), weight.data<F>(), mean.f32(), rstd.f32(), N, C);
                   });
                 },
             .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
               cuda::layernorm_backward(stream, dt, dx.raw(), dweight.raw(), dbias.raw(), dout.raw(), x.raw(),
                                        weight.raw(), mean.f32(), rstd.f32(), N, C);
             })});
}

}  // namespace fsdplab
