#include "engine/tensor/flash_attention.hpp"

#include <cstdint>
#include <string>

#include "engine/cuda/flash_attention_kernels.hpp"
#include "engine/tensor/attention.hpp"
#include "engine/tensor/expect.hpp"
#include "engine/tensor/float_io.hpp"
#include "engine/tensor/flash_attention_host.hpp"
#include "engine/tensor/launch.hpp"

namespace fsdplab {
namespace {

// Checks what the forward and the backward share and returns the sizes.
QkvShape flash_sizes(std::string_view op, const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_head) {
  const QkvShape q = qkv_shape(op, qkv, n_head);
  const DType dt = qkv.dtype();  // f32 or bf16 (qkv_shape)
  const std::int64_t max_hd = dt == DType::bf16 ? kFlashMaxHeadDim : kFlashMaxHeadDimF32;
  if (q.hd > max_hd)
    fail(op, ": the head dimension C / n_head of ", dtype_name(dt), " qkv must be at most ", max_hd,
         " (the GPU kernels keep tiles of it in shared memory), got ", q.hd,
         dt == DType::f32 ? "; wider f32 heads take the exact attention (--attention exact), and bf16 flash attention "
                            "takes heads of up to 128"
                          : "");
  expect_tensor(op, "out", out, {q.B, q.T, q.C}, dt);
  expect_tensor(op, "lse", lse, {q.B, n_head, q.T}, DType::f32);
  return q;
}

// The score pairs the kernels compute: every tile at or below the diagonal, whole (a partial tile is padded).
double computed_pairs(const QkvShape& l) {
  const std::int64_t tiles = (l.T + kFlashTile - 1) / kFlashTile;
  return static_cast<double>(l.B * l.n_head) * static_cast<double>(tiles * (tiles + 1) / 2) *
         static_cast<double>(kFlashTile * kFlashTile);
}

}  // namespace

void flash_attention(Stream s, const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_head) {
  constexpr std::string_view op = "flash_attention";
  const QkvShape layout = flash_sizes(op, qkv, out, lse, n_head);
  expect_disjoint(op, {{"qkv", &qkv}}, {{"out", &out}, {"lse", &lse}});

  // Two products (q k^T and p v) of 2 hd flops a score pair, and the online softmax (~5 a pair). Bytes: qkv
  // read, out and lse written; nothing of size T x T ever reaches memory.
  const DType dt = qkv.dtype();
  const double es = static_cast<double>(dtype_size(dt));
  const double pairs = computed_pairs(layout);
  const double btc = static_cast<double>(layout.B * layout.T * layout.C);
  const double rows = static_cast<double>(layout.B * layout.n_head * layout.T);
  const OpCost cost{.flops = 2 * (2 * static_cast<double>(layout.hd) * pairs) + 5 * pairs,
                    .bytes = es * (3 * btc + btc) + 4 * rows,
                    .dtype = dt,
                    .matmul = true};
  launch_op(s, std::string(op), cost, {{&qkv}, {&out, &lse}},
            {.host =
                 [&] {
                   dispatch_float(dt, [&](auto zero) {
                     using F = decltype(zero);
                     flash_attention_forward_host(out.data<F>(), lse.f32(), qkv.data<F>(), layout.B, layout.T,
                                                  layout.C, layout.n_head);
                   });
                 },
             .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
               cuda::flash_attention_forward(stream, dt, out.raw(), lse.f32(), qkv.raw(), layout.B, layout.T,
                                             layout.C, layout.n_head);
             })});
}

void flash_attention_backward(Stream s, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& dqkv, int n_head) {
  constexpr std::string_view op = "flash_attention_backward";
  const QkvShape layout = flash_sizes(op, qkv, out, lse, n_head);
  const DType dt = qkv.dtype();
  expect_tensor(op, "dout", dout, {layout.B, layout.T, layout.C}, dt);
  expect_tensor(op, "dqkv", dqkv, {layout.B, layout.T, 3 * layout.C}, dt);
  expect_disjoint(op, {{"dout", &dout}, {"qkv", &qkv}, {"out", &out}, {"lse", &lse}}, {{"dqkv", &dqkv}});

  // The pass over key tiles recomputes q k^T and does dout v^T, p^T dout and ds^T q; in bf16 the pass over
  // query tiles recomputes q k^T and dout v^T and does ds k, in f32 the key pass does ds k too ([Note: dq in
  // key-tile order], flash_attention_kernels.cu): seven or five products of 2 hd flops a pair, and ~10 a pair
  // for the softmax's backward. Bytes: dout and out read for D, qkv and dout read, dqkv written, lse and
  // D read (D once written); f32's sums of dq between key tiles stay in the L2, mostly.
  const double es = static_cast<double>(dtype_size(dt));
  const double pairs = computed_pairs(layout);
  const double btc = static_cast<double>(layout.B * layout.T * layout.C);
  const double rows = static_cast<double>(layout.B * layout.n_head * layout.T);
  const double products = dt == DType::f32 ? 5 : 7;
  const OpCost cost{.flops = products * (2 * static_cast<double>(layout.hd) * pairs) + 10 * pairs,
                    .bytes = es * (2 * btc + 3 * btc + btc + 3 * btc) + 4 * 3 * rows,
                    .dtype = dt,
                    .matmul = true};
  launch_op(s, std::string(op), cost, {{&dout, &qkv, &out, &lse}, {&dqkv}},
            {.host =
                 [&] {
                   dispatch_float(dt, [&](auto zero) {
                     using F = decltype(zero);
                     flash_attention_backward_host(dqkv.data<F>(), dout.data<F>(), qkv.data<F>(), out.data<F>(),
                                                   lse.f32(), layout.B, layout.T, layout.C, layout.n_head);
                   });
                 },
             .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
               cuda::flash_attention_backward(stream, dt, dqkv.raw(), dout.raw(), qkv.raw(), out.raw(), lse.f32(),
                                              layout.B, layout.T, layout.C, layout.n_head);
             })});
}

}  // namespace fsdplab
