#include "engine/tensor/pack_qkv.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/cuda/pointwise_kernels.hpp"
#include "engine/tensor/expect.hpp"
#include "engine/tensor/float_io.hpp"
#include "engine/tensor/launch.hpp"

namespace fsdplab {
namespace {

struct PackSizes {
  std::int64_t N;   // B * T rows
  std::int64_t H, KV, hd;
  std::int64_t C() const { return H * hd; }
  std::int64_t kv_width() const { return KV * hd; }
  std::int64_t repeats() const { return H / KV; }
};

namespace cpu {

template <class F>
void pack(F* qkv, const F* q, const F* k, const F* v, const PackSizes& z) {
  const std::int64_t C = z.C(), KVW = z.kv_width(), R = z.repeats();
  for (std::int64_t n = 0; n < z.N; ++n) {
    F* row = qkv + n * 3 * C;
    const F* qn = q + n * C;
    for (std::int64_t j = 0; j < C; ++j) row[j] = qn[j];
    for (std::int64_t h = 0; h < z.H; ++h) {
      const F* kh = k + n * KVW + (h / R) * z.hd;
      const F* vh = v + n * KVW + (h / R) * z.hd;
      for (std::int64_t i = 0; i < z.hd; ++i) {
        row[C + h * z.hd + i] = kh[i];
        row[2 * C + h * z.hd + i] = vh[i];
      }
    }
  }
}

template <class F>
void unpack(F* dq, F* dk, F* dv, const F* dqkv, const PackSizes& z) {
  const std::int64_t C = z.C(), KVW = z.kv_width(), R = z.repeats();
  std::vector<float> sum(static_cast<std::size_t>(2 * KVW));
  for (std::int64_t n = 0; n < z.N; ++n) {
    const F* row = dqkv + n * 3 * C;
    F* dqn = dq + n * C;
    for (std::int64_t j = 0; j < C; ++j) dqn[j] = row[j];
    // The R query heads of each key/value head, summed in f32 in head order from zero, rounded once.
    std::fill(sum.begin(), sum.end(), 0.f);
    for (std::int64_t h = 0; h < z.H; ++h) {
      const std::int64_t g = (h / R) * z.hd;
      for (std::int64_t i = 0; i < z.hd; ++i) {
        sum[static_cast<std::size_t>(g + i)] += load_f32(row[C + h * z.hd + i]);
        sum[static_cast<std::size_t>(KVW + g + i)] += load_f32(row[2 * C + h * z.hd + i]);
      }
    }
    F* dkn = dk + n * KVW;
    F* dvn = dv + n * KVW;
    for (std::int64_t j = 0; j < KVW; ++j) {
      store_f32(dkn[j], sum[static_cast<std::size_t>(j)]);
      store_f32(dvn[j], sum[static_cast<std::size_t>(KVW + j)]);
    }
  }
}

}  // namespace cpu

// Checks the four operands (`qkv_role` names the packed one) and returns the sizes.
PackSizes pack_sizes(std::string_view op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv,
                     std::string_view q_role, std::string_view k_role, std::string_view v_role,
                     std::string_view qkv_role, int n_heads, int n_kv_heads) {
  expect_float(op, q_role, q, 3, "[B, T, H * head_dim]");
  const std::int64_t B = q.dim(0), T = q.dim(1), C = q.dim(2);
  if (!(n_heads > 0 && C % n_heads == 0))
    fail(op, ": n_heads must divide ", q_role, "'s last dimension ", C, " (", q.describe(), "), got n_heads ", n_heads);
  check(n_kv_heads > 0 && n_heads % n_kv_heads == 0, op, ": n_kv_heads must divide n_heads = ", n_heads,
        " (each key/value head serves n_heads / n_kv_heads query heads), got ", n_kv_heads);
  const std::int64_t hd = C / n_heads;
  const DType dt = q.dtype();
  expect_tensor(op, k_role, k, {B, T, n_kv_heads * hd}, dt);
  expect_tensor(op, v_role, v, {B, T, n_kv_heads * hd}, dt);
  expect_tensor(op, qkv_role, qkv, {B, T, 3 * C}, dt);
  return {B * T, n_heads, n_kv_heads, hd};
}

}  // namespace

void pack_qkv(Stream s, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv, int n_heads,
              int n_kv_heads) {
  constexpr std::string_view op = "pack_qkv";
  const PackSizes z = pack_sizes(op, q, k, v, qkv, "q", "k", "v", "qkv", n_heads, n_kv_heads);
  expect_disjoint(op, {{"q", &q}, {"k", &k}, {"v", &v}}, {{"qkv", &qkv}});
  const double es = static_cast<double>(dtype_size(q.dtype()));
  const double n = static_cast<double>(z.N);
  // A copy: q, k and v read, the packed [N, 3C] written.
  const OpCost cost{.flops = 0,
                    .bytes = es * n * static_cast<double>(z.C() + 2 * z.kv_width() + 3 * z.C()),
                    .dtype = q.dtype()};
  launch_op(s, std::string(op), cost, {{&q, &k, &v}, {&qkv}}, {.host = [&] {
    dispatch_float(q.dtype(), [&](auto zero) {
      using F = decltype(zero);
      cpu::pack(qkv.data<F>(), q.data<F>(), k.data<F>(), v.data<F>(), z);
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::pack_qkv(stream, q.dtype(), qkv.raw(), q.raw(), k.raw(), v.raw(), z.N, z.H, z.KV, z.hd);
  })});
}

void pack_qkv_backward(Stream s, const Tensor& dqkv, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                       int n_heads, int n_kv_heads) {
  constexpr std::string_view op = "pack_qkv_backward";
  const PackSizes z = pack_sizes(op, dq, dk, dv, dqkv, "dq", "dk", "dv", "dqkv", n_heads, n_kv_heads);
  expect_disjoint(op, {{"dqkv", &dqkv}}, {{"dq", &dq}, {"dk", &dk}, {"dv", &dv}});
  const double es = static_cast<double>(dtype_size(dq.dtype()));
  const double n = static_cast<double>(z.N);
  // One sum per element of dqkv's k and v parts (the q part is copied); dqkv read, dq, dk and dv written.
  const OpCost cost{.flops = 2 * n * static_cast<double>(z.C()),
                    .bytes = es * n * static_cast<double>(3 * z.C() + z.C() + 2 * z.kv_width()),
                    .dtype = dq.dtype()};
  launch_op(s, std::string(op), cost, {{&dqkv}, {&dq, &dk, &dv}}, {.host = [&] {
    dispatch_float(dq.dtype(), [&](auto zero) {
      using F = decltype(zero);
      cpu::unpack(dq.data<F>(), dk.data<F>(), dv.data<F>(), dqkv.data<F>(), z);
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::pack_qkv_backward(stream, dq.dtype(), dq.raw(), dk.raw(), dv.raw(), dqkv.raw(), z.N, z.H, z.KV, z.hd);
  })});
}

}  // namespace fsdplab
