#include "engine/tensor/launch.hpp"

#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

void collect(Stream stream, const std::string& op, const std::vector<const Tensor*>& tensors,
             std::vector<Access>& out) {
  for (const Tensor* t : tensors) {
    check(t != nullptr && t->defined(), op, ": an operand is an undefined tensor");
    if (t->is_meta())
      fail(op, ": operand ", t->describe(),
           " is a meta tensor (shape only); materialise it on a device before computing with it");
    if (!(&t->device() == stream.device))
      fail(op, ": operand ", t->describe(), " lives on rank ", t->device().rank(), " but the op is launched on rank ",
           stream.device->rank());
    // Device kernels cannot touch pageable host memory nor the CPU device memory: only the copies of
    // host_copy.hpp cross, so an offloaded buffer used on the wrong side is an error here, not a wrong number.
    const bool on_host = t->storage().stream() == Lane::host;
    if (on_host != (stream.lane == Lane::host))
      fail(op, ": operand ", t->describe(), on_host ? " is in host memory but the op runs on stream "
                                                    : " is in device memory but the op runs on the host (",
           on_host ? std::string(lane_name(stream.lane)) : std::string("CPU work)"),
           "; copy it across first (copy_to_device / copy_to_host)");
    if (t->numel() > 0) out.push_back(t->access());
  }
}

}  // namespace

OpId launch_op(Stream stream, std::string name, const OpCost& cost, OpTensors tensors, const OpBody& body) {
  check(stream.device != nullptr, name, ": launched on a null stream");
  OpSpec spec;
  collect(stream, name, tensors.reads, spec.reads);
  collect(stream, name, tensors.writes, spec.writes);
  spec.name = std::move(name);
  spec.cost = cost;
  return stream.device->launch(stream.lane, std::move(spec), body);
}

}  // namespace fsdplab
