#include "engine/tensor/rope.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/cuda/pointwise_kernels.hpp"
#include "engine/tensor/expect.hpp"
#include "engine/tensor/float_io.hpp"
#include "engine/tensor/launch.hpp"

namespace fsdplab {
namespace {

struct RopeSizes {
  std::int64_t B, T, H, hd;
};

namespace cpu {

// cos and sin of every (position, pair) [T, hd/2], in f32 as Hugging Face's LlamaRotaryEmbedding
// computes them: inv_freq = 1 / theta^(2i / hd), angle = t * inv_freq.
void tables(std::vector<float>& cos, std::vector<float>& sin, const RopeSizes& z, float theta) {
  const std::int64_t half = z.hd / 2;
  cos.resize(static_cast<std::size_t>(z.T * half));
  sin.resize(cos.size());
  for (std::int64_t i = 0; i < half; ++i) {
    const float inv_freq = 1.f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(z.hd));
    for (std::int64_t t = 0; t < z.T; ++t) {
      const float angle = static_cast<float>(t) * inv_freq;
      cos[static_cast<std::size_t>(t * half + i)] = std::cos(angle);
      sin[static_cast<std::size_t>(t * half + i)] = std::sin(angle);
    }
  }
}

// out = R x, or R^T x backward (the opposite angle: the sine negated, which is exact); out may be x, since
// each pair is read whole before it is written.
template <class F>
void rotate(F* out, const F* x, const RopeSizes& z, float theta, bool backward) {
  std::vector<float> cos, sin;
  tables(cos, sin, z, theta);
  const std::int64_t half = z.hd / 2;
  for (std::int64_t b = 0; b < z.B; ++b) {
    for (std::int64_t t = 0; t < z.T; ++t) {
      const float* c = cos.data() + t * half;
      const float* s = sin.data() + t * half;
      for (std::int64_t h = 0; h < z.H; ++h) {
        const std::int64_t base = ((b * z.T + t) * z.H + h) * z.hd;
        for (std::int64_t i = 0; i < half; ++i) {
          const float x1 = load_f32(x[base + i]);
          const float x2 = load_f32(x[base + half + i]);
          const float si = backward ? -s[i] : s[i];
          store_f32(out[base + i], x1 * c[i] - x2 * si);
          store_f32(out[base + half + i], x2 * c[i] + x1 * si);
        }
      }
    }
  }
}

}  // namespace cpu

RopeSizes rope_sizes(std::string_view op, std::string_view role, const Tensor& x, int n_heads, float theta) {
  expect_float(op, role, x, 3, "[B, T, H * head_dim]");
  const std::int64_t width = x.dim(2);
  if (!(n_heads > 0 && width % n_heads == 0))
    fail(op, ": n_heads must divide the last dimension ", width, " of ", x.describe(), ", got n_heads ", n_heads);
  const std::int64_t hd = width / n_heads;
  if (!(hd % 2 == 0))
    fail(op, ": the head dimension must be even (its halves are rotated as pairs), got ", hd, " from ", x.describe(),
         " and n_heads ", n_heads);
  check(theta > 0.f && std::isfinite(theta), op, ": theta must be finite and > 0, got ", theta);
  return {x.dim(0), x.dim(1), n_heads, hd};
}

OpCost rope_cost(const Tensor& x, const RopeSizes& z) {
  const double n = static_cast<double>(x.numel());
  const double es = static_cast<double>(dtype_size(x.dtype()));
  // Per element: two products and a sum. Bytes: x read and out written, and the f32 cos and sin tables
  // [T, hd/2] read.
  return {.flops = 3 * n, .bytes = es * 2 * n + 4.0 * static_cast<double>(z.T * z.hd), .dtype = x.dtype()};
}

}  // namespace

void rope(Stream s, const Tensor& x, const Tensor& out, int n_heads, float theta) {
  constexpr std::string_view op = "rope";
  const RopeSizes z = rope_sizes(op, "x", x, n_heads, theta);
  expect_tensor(op, "out", out, x.shape(), x.dtype());
  // Each pair is read whole before it is written, so in place is safe; a partial overlap is not.
  expect_in_place_or_disjoint(op, "out", out, "x", x);
  launch_op(s, std::string(op), rope_cost(x, z), {{&x}, {&out}}, {.host = [&] {
    dispatch_float(x.dtype(), [&](auto zero) {
      using F = decltype(zero);
      cpu::rotate(out.data<F>(), x.data<F>(), z, theta, false);
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::rope(stream, x.dtype(), out.raw(), x.raw(), z.B, z.T, z.H, z.hd, theta, false);
  })});
}

void rope_backward(Stream s, const Tensor& dout, const Tensor& dx, int n_heads, float theta) {
  constexpr std::string_view op = "rope_backward";
  const RopeSizes z = rope_sizes(op, "dout", dout, n_heads, theta);
  expect_tensor(op, "dx", dx, dout.shape(), dout.dtype());
  expect_in_place_or_disjoint(op, "dx", dx, "dout", dout);
  launch_op(s, std::string(op), rope_cost(dout, z), {{&dout}, {&dx}}, {.host = [&] {
    dispatch_float(dout.dtype(), [&](auto zero) {
      using F = decltype(zero);
      cpu::rotate(dx.data<F>(), dout.data<F>(), z, theta, true);
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::rope(stream, dout.dtype(), dx.raw(), dout.raw(), z.B, z.T, z.H, z.hd, theta, true);
  })});
}

}  // namespace fsdplab
