#include "engine/train/baseline_mixed_precision.hpp"

#include <string>

#include "engine/runtime/error.hpp"
#include "engine/tensor/elementwise.hpp"

namespace fsdplab {

MixedPrecisionParameters::MixedPrecisionParameters(Module& model, Device& device, DType compute) {
  check(compute == DType::bf16, "mixed precision computes in bf16 on f32 master weights; got ", dtype_name(compute),
        " (f32 trains without copies)");
  const std::vector<Parameter*> params = model.parameters();
  std::vector<std::int64_t> offsets;
  std::int64_t numel = 0;
  for (const Parameter* p : params) {
    offsets.push_back(numel);
    numel += (p->numel() + kAlign - 1) / kAlign * kAlign;
  }
  const std::string low = std::string(dtype_name(compute));
  masters_ = Tensor::empty(device, {numel}, DType::f32, MemTag::param_shard, "flat_param_f32 (masters)");
  master_grads_ = Tensor::empty(device, {numel}, DType::f32, MemTag::grad_shard, "flat_grad_f32");
  copies_ = Tensor::unallocated(device, {numel}, compute, MemTag::param_full, "flat_param_" + low);
  copy_grads_ = Tensor::unallocated(device, {numel}, compute, MemTag::grad_full, "flat_grad_" + low);
  const Stream stream = device.stream(Lane::compute);
  // The gaps between parameters hold zeros, which the optimizer and the casts then read as any element. (The
  // f32 gradients need no zeroing: each step's widening writes all of them, gaps included.)
  fill(stream, masters_, 0);
  for (std::size_t i = 0; i < params.size(); ++i) {
    Parameter* p = params[i];
    Views v{p, masters_.view(offsets[i], p->shape), master_grads_.view(offsets[i], p->shape),
            copies_.view(offsets[i], p->shape), copy_grads_.view(offsets[i], p->shape)};
    p->value = v.master.set_name(p->name);
    p->grad = v.master_grad.set_name(p->name + ".grad");
    v.copy.set_name(p->name + "." + low);
    v.copy_grad.set_name(p->name + ".grad_" + low);
    views_.push_back(std::move(v));
  }
  device.synchronize();  // the host writes the masters next (init_values, load_checkpoint), after the zeroing
}

void MixedPrecisionParameters::cast_for_step(Stream stream) {
  copies_.storage().allocate();
  copy_grads_.storage().allocate();
  cast(stream, masters_, copies_);
  fill(stream, copy_grads_, 0);
  for (Views& v : views_) {
    v.param->value = v.copy;
    v.param->grad = v.copy_grad;
  }
}

void MixedPrecisionParameters::widen_gradients(Stream stream) {
  cast(stream, copy_grads_, master_grads_);
  for (Views& v : views_) {
    v.param->value = v.master;
    v.param->grad = v.master_grad;
  }
  copies_.storage().free();
  copy_grads_.storage().free();
}

}  // namespace fsdplab
