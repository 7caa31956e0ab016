#include "engine/nn/materialize.hpp"

#include <vector>

#include "engine/tensor/elementwise.hpp"

namespace fsdplab {

void allocate_full(Module& model, Device& device) {
  for (Parameter* p : model.parameters()) {
    p->value = Tensor::empty(device, p->shape, DType::f32, MemTag::param_shard, p->name);
    p->grad = Tensor::empty(device, p->shape, DType::f32, MemTag::grad_shard, p->name + ".grad");
  }
  zero_grads(model, device.stream(Lane::compute));
}

void materialize_full(Module& model, Device& device, std::uint64_t seed) {
  allocate_full(model, device);
  if (device.dry_run()) return;
  init_values(model, seed);
}

void init_values(Module& model, std::uint64_t seed) {
  for (Parameter* p : model.parameters()) {
    std::vector<float> values(static_cast<std::size_t>(p->numel()));
    p->init.fill(values, seed, p->name, 0);
    p->value.copy_from(values);
  }
}

void zero_grads(Module& model, Stream stream) {
  for (Parameter* p : model.parameters()) fill(stream, p->grad, 0);
}

}  // namespace fsdplab
