#include "engine/tensor/launch.hpp"

#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

void collect(Stream stream, const std::string& op, std::initializer_list<const Tensor*> tensors,
             std::vector<Access>& out) {
  for (const Tensor* t : tensors) {
    check(t != nullptr && t->defined(), op, ": an operand is an undefined tensor");
    if (t->is_meta())
      fail(op, ": operand ", t->describe(),
           " is a meta tensor (shape only); materialise it on a device before computing with it");
    if (!(&t->device() == stream.device))
      fail(op, ": operand ", t->describe(), " lives on rank ", t->device().rank(), " but the op is launched on rank ",
           stream.device->rank());
    if (t->numel() > 0) out.push_back(t->access());
  }
}

}  // namespace

OpId launch_op(Stream stream, std::string name, const OpCost& cost, OpTensors tensors,
               const std::function<void()>& body) {
  check(stream.device != nullptr, name, ": launched on a null stream");
  OpSpec spec;
  collect(stream, name, tensors.reads, spec.reads);
  collect(stream, name, tensors.writes, spec.writes);
  spec.name = std::move(name);
  spec.cost = cost;
  return stream.device->launch(stream.lane, std::move(spec), body);
}

}  // namespace fsdplab
