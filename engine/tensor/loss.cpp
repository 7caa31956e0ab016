#include "engine/tensor/loss.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "engine/cuda/loss_kernels.hpp"
#include "engine/tensor/expect.hpp"
#include "engine/tensor/float_io.hpp"
#include "engine/tensor/launch.hpp"

namespace fsdplab {
namespace {
namespace cpu {

// Writes each row's log-sum-exp and returns the mean of lse - logit[target]. Rows are `stride` apart;
// the first V columns are the classes, the rest padding that is never read.
template <class F>
float cross_entropy_forward(float* lse, const F* logits, const std::int32_t* targets, std::int64_t N,
                            std::int64_t V, std::int64_t stride) {
  float total = 0.f;
  for (std::int64_t n = 0; n < N; ++n) {
    const F* row = logits + n * stride;
    float max = -std::numeric_limits<float>::infinity();
    for (std::int64_t v = 0; v < V; ++v) max = std::max(max, load_f32(row[v]));
    float sum = 0.f;
    for (std::int64_t v = 0; v < V; ++v) sum += std::exp(load_f32(row[v]) - max);
    lse[n] = max + std::log(sum);
    total += lse[n] - load_f32(row[targets[n]]);
  }
  return total / static_cast<float>(N);
}

// dlogits may be the logits themselves: each element is read before it is written. The padding columns
// are written 0, never read.
template <class F>
void cross_entropy_backward(F* dlogits, const F* logits, const std::int32_t* targets, const float* lse,
                            std::int64_t N, std::int64_t V, std::int64_t stride, float dloss) {
  const float scale = dloss / static_cast<float>(N);
  for (std::int64_t n = 0; n < N; ++n) {
    const F* row = logits + n * stride;
    F* drow = dlogits + n * stride;
    for (std::int64_t v = 0; v < V; ++v) {
      const float p = std::exp(load_f32(row[v]) - lse[n]);
      const float onehot = v == targets[n] ? 1.f : 0.f;
      store_f32(drow[v], (p - onehot) * scale);
    }
    for (std::int64_t v = V; v < stride; ++v) store_f32(drow[v], 0.f);
  }
}

template <class F>
float mse_forward(const F* pred, const F* target, std::int64_t n) {
  float sum = 0.f;
  for (std::int64_t i = 0; i < n; ++i) {
    const float d = load_f32(pred[i]) - load_f32(target[i]);
    sum += d * d;
  }
  return sum / static_cast<float>(n);
}

template <class F>
void mse_backward(F* dpred, const F* pred, const F* target, std::int64_t n, float dloss) {
  const float scale = 2.f * dloss / static_cast<float>(n);
  for (std::int64_t i = 0; i < n; ++i) {
    store_f32(dpred[i], load_f32(dpred[i]) + scale * (load_f32(pred[i]) - load_f32(target[i])));
  }
}

}  // namespace cpu

// Every target must be a class: in [0, V). Called in the op's body, since targets live in device memory,
// before any output is written.
void check_targets(std::string_view op, const std::int32_t* targets, std::int64_t N, std::int64_t V,
                   const Tensor& logits) {
  for (std::int64_t n = 0; n < N; ++n) {
    if (!(targets[n] >= 0 && targets[n] < V))
      fail(op, ": target ", targets[n], " of row ", n, " is outside the vocabulary [0, ", V, ") of the logits ",
           logits.describe());
  }
}

// The logits [N, Vp] and the vocabulary V <= Vp they hold.
void expect_logits(std::string_view op, const Tensor& logits, std::int64_t vocab) {
  expect_float(op, "logits", logits, 2, "[N, Vp]");
  check(vocab >= 1 && vocab <= logits.dim(1), op, ": expected a vocabulary of 1 to ", logits.dim(1),
        " classes (the logits' columns), got ", vocab);
}

}  // namespace

void cross_entropy(Stream s, const Tensor& logits, std::int64_t vocab, const Tensor& targets, const Tensor& loss,
                   const Tensor& lse) {
  constexpr std::string_view op = "cross_entropy";
  expect_logits(op, logits, vocab);
  const std::int64_t N = logits.dim(0), V = vocab, stride = logits.dim(1);
  expect_tensor(op, "targets", targets, {N}, DType::i32);
  expect_tensor(op, "loss", loss, {1}, DType::f32);
  expect_tensor(op, "lse", lse, {N}, DType::f32);
  expect_disjoint(op, {{"logits", &logits}, {"targets", &targets}}, {{"loss", &loss}, {"lse", &lse}});

  const DType dt = logits.dtype();
  const double nv = static_cast<double>(N * V);
  // Per logit: max, subtract, exp, sum. Bytes: logits and targets read, lse and the loss written.
  const OpCost cost{.flops = 4 * nv, .bytes = nv * static_cast<double>(dtype_size(dt)) + 8.0 * N + 4, .dtype = dt};
  launch_op(s, std::string(op), cost, {{&logits, &targets}, {&loss, &lse}}, {.host = [&] {
    check_targets(op, targets.i32(), N, V, logits);
    dispatch_float(dt, [&](auto zero) {
      using F = decltype(zero);
      loss.f32()[0] = cpu::cross_entropy_forward(lse.f32(), logits.data<F>(), targets.i32(), N, V, stride);
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::cross_entropy(stream, dt, loss.f32(), lse.f32(), logits.raw(), targets.i32(), N, V, stride);
  })});
}

void cross_entropy_backward(Stream s, const Tensor& logits, std::int64_t vocab, const Tensor& targets,
                            const Tensor& lse, float dloss, const Tensor& dlogits) {
  constexpr std::string_view op = "cross_entropy_backward";
  expect_logits(op, logits, vocab);
  const std::int64_t N = logits.dim(0), V = vocab, stride = logits.dim(1);
  const DType dt = logits.dtype();
  expect_tensor(op, "targets", targets, {N}, DType::i32);
  expect_tensor(op, "lse", lse, {N}, DType::f32);
  expect_tensor(op, "dlogits", dlogits, {N, stride}, dt);
  expect_in_place_or_disjoint(op, "dlogits", dlogits, "logits", logits);
  expect_disjoint(op, {{"targets", &targets}, {"lse", &lse}}, {{"dlogits", &dlogits}});

  const double nv = static_cast<double>(N * V);
  // Per logit: subtract, exp, the one-hot, scale. Bytes: logits read, dlogits written (the padding too),
  // targets and lse read.
  const OpCost cost{.flops = 4 * nv,
                    .bytes = static_cast<double>(N * (V + stride)) * static_cast<double>(dtype_size(dt)) + 8.0 * N,
                    .dtype = dt};
  launch_op(s, std::string(op), cost, {{&logits, &targets, &lse}, {&dlogits}}, {.host = [&] {
    check_targets(op, targets.i32(), N, V, logits);
    dispatch_float(dt, [&](auto zero) {
      using F = decltype(zero);
      cpu::cross_entropy_backward(dlogits.data<F>(), logits.data<F>(), targets.i32(), lse.f32(), N, V, stride, dloss);
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::cross_entropy_backward(stream, dt, dlogits.raw(), logits.raw(), targets.i32(), lse.f32(), N, V, stride,
                                 dloss);
  })});
}

void mse_loss(Stream s, const Tensor& pred, const Tensor& target, const Tensor& loss) {
  constexpr std::string_view op = "mse_loss";
  expect_float(op, "pred", pred, pred.ndim(), "any shape");
  const DType dt = pred.dtype();
  expect_tensor(op, "target", target, pred.shape(), dt);
  expect_tensor(op, "loss", loss, {1}, DType::f32);
  expect_disjoint(op, {{"pred", &pred}, {"target", &target}}, {{"loss", &loss}});

  const double n = static_cast<double>(pred.numel());
  // Per element: subtract, square, sum. Bytes: pred and target read, the loss written.
  const OpCost cost{.flops = 3 * n, .bytes = 2 * n * static_cast<double>(dtype_size(dt)) + 4, .dtype = dt};
  launch_op(s, std::string(op), cost, {{&pred, &target}, {&loss}}, {.host = [&] {
    dispatch_float(dt, [&](auto zero) {
      using F = decltype(zero);
      loss.f32()[0] = cpu::mse_forward(pred.data<F>(), target.data<F>(), pred.numel());
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::mse_loss(stream, dt, loss.f32(), pred.raw(), target.raw(), pred.numel());
  })});
}

void mse_loss_backward(Stream s, const Tensor& pred, const Tensor& target, float dloss, const Tensor& dpred) {
  constexpr std::string_view op = "mse_loss_backward";
  expect_float(op, "pred", pred, pred.ndim(), "any shape");
  const DType dt = pred.dtype();
  expect_tensor(op, "target", target, pred.shape(), dt);
  expect_tensor(op, "dpred", dpred, pred.shape(), dt);
  expect_disjoint(op, {{"pred", &pred}, {"target", &target}}, {{"dpred", &dpred}});

  const double n = static_cast<double>(pred.numel());
  // Per element: subtract, scale, accumulate. Bytes: pred and target read, dpred read and written.
  const OpCost cost{.flops = 3 * n, .bytes = 4 * n * static_cast<double>(dtype_size(dt)), .dtype = dt};
  // dpred is read-modify-write: listing it as a write covers the read for the race detector.
  launch_op(s, std::string(op), cost, {{&pred, &target}, {&dpred}}, {.host = [&] {
    dispatch_float(dt, [&](auto zero) {
      using F = decltype(zero);
      cpu::mse_backward(dpred.data<F>(), pred.data<F>(), target.data<F>(), pred.numel(), dloss);
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::mse_loss_backward(stream, dt, dpred.raw(), pred.raw(), target.raw(), pred.numel(), dloss);
  })});
}

}  // namespace fsdplab
