#include "engine/train/baseline_parameters.hpp"

#include <string>

#include "engine/runtime/error.hpp"
#include "engine/tensor/elementwise.hpp"

namespace fsdplab {

BaselineParameters::BaselineParameters(Module& model, Device& device, DType compute) {
  check(compute == DType::f32 || compute == DType::bf16, "the baseline computes in f32, or in bf16 on f32 master "
        "weights (mixed precision); got ", dtype_name(compute));
  const std::vector<Parameter*> params = model.parameters();
  std::vector<std::int64_t> offsets;
  std::int64_t numel = 0;
  for (const Parameter* p : params) {
    offsets.push_back(numel);
    numel += (p->numel() + kAlign - 1) / kAlign * kAlign;
  }
  values_ = Tensor::empty(device, {numel}, DType::f32, MemTag::param_shard, "flat_param_f32");
  grads_ = Tensor::empty(device, {numel}, DType::f32, MemTag::grad_shard, "flat_grad_f32");
  const std::string low = std::string(dtype_name(compute));
  if (compute != DType::f32) {
    copies_ = Tensor::unallocated(device, {numel}, compute, MemTag::param_full, "flat_param_" + low);
    copy_grads_ = Tensor::unallocated(device, {numel}, compute, MemTag::grad_full, "flat_grad_" + low);
  }
  // The gaps between parameters hold zeros, which the optimizer and the casts then read as any element. (The
  // gradients' gaps are zeroed by every step's begin_step in f32, written by every widening in bf16.)
  fill(device.stream(Lane::compute), values_, 0);
  for (std::size_t i = 0; i < params.size(); ++i) {
    Parameter* p = params[i];
    Views v{p, values_.view(offsets[i], p->shape), grads_.view(offsets[i], p->shape), Tensor(), Tensor()};
    p->value = v.value.set_name(p->name);
    p->grad = v.grad.set_name(p->name + ".grad");
    if (mixed()) {
      v.copy = copies_.view(offsets[i], p->shape).set_name(p->name + "." + low);
      v.copy_grad = copy_grads_.view(offsets[i], p->shape).set_name(p->name + ".grad_" + low);
    }
    views_.push_back(std::move(v));
  }
  device.synchronize();  // the host writes the values next (init_values, load_checkpoint), after the zeroing
}

void BaselineParameters::begin_step(Stream stream) {
  if (!mixed()) {
    fill(stream, grads_, 0);
    return;
  }
  copies_.storage().allocate();
  copy_grads_.storage().allocate();
  cast(stream, values_, copies_);
  fill(stream, copy_grads_, 0);
  for (Views& v : views_) {
    v.param->value = v.copy;
    v.param->grad = v.copy_grad;
  }
}

void BaselineParameters::end_backward(Stream stream) {
  if (!mixed()) return;
  cast(stream, copy_grads_, grads_);
  for (Views& v : views_) {
    v.param->value = v.value;
    v.param->grad = v.grad;
  }
  copies_.storage().free();
  copy_grads_.storage().free();
}

}  // namespace fsdplab
