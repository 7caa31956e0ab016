#include "engine/nn/causal_attention.hpp"

#include "engine/runtime/error.hpp"
#include "engine/tensor/attention.hpp"
#include "engine/tensor/flash_attention.hpp"

namespace fsdplab {

AttentionKind parse_attention_kind(std::string_view name) {
  if (name == "auto") return AttentionKind::by_dtype;
  if (name == "exact") return AttentionKind::exact;
  if (name == "flash") return AttentionKind::flash;
  fail("--attention '", name, "': expected auto (flash in bf16, exact in f32), exact or flash");
}

std::string_view attention_kind_name(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::by_dtype:
      return "auto";
    case AttentionKind::exact:
      return "exact";
    case AttentionKind::flash:
      return "flash";
  }
  return "?";
}

void CausalAttention::forward(RunContext& ctx, const Tensor& qkv, const Tensor& y) {
  const std::int64_t B = qkv.dim(0), T = qkv.dim(1);
  if (uses_flash_attention(kind_, qkv.dtype())) {
    lse_ = Tensor::empty(ctx.device, {B, n_head_, T}, DType::f32, MemTag::activation, name_ + ".lse");
    out_ = y;
    flash_attention(ctx.stream(), qkv, y, lse_, n_head_);
  } else {
    att_ = Tensor::empty(ctx.device, {B, n_head_, T, T}, DType::f32, MemTag::activation, name_ + ".att");
    attention(ctx.stream(), qkv, y, att_, n_head_);
  }
}

void CausalAttention::backward(RunContext& ctx, const Tensor& dy, const Tensor& qkv, const Tensor& dqkv) {
  check(att_.defined() || lse_.defined(), name_, ": attention backward without a forward");
  if (lse_.defined())
    flash_attention_backward(ctx.stream(), dy, qkv, out_, lse_, dqkv, n_head_);
  else
    attention_backward(ctx.stream(), dy, qkv, att_, dqkv, n_head_);
  att_ = lse_ = out_ = Tensor();
}

}  // namespace fsdplab
