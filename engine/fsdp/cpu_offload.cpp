#include "engine/fsdp/cpu_offload.hpp"

#include "engine/tensor/host_copy.hpp"

namespace fsdplab {

bool offloaded(const FsdpUnit& unit) { return unit.master.storage().stream() == Lane::host; }

Tensor shard_on_device(const FsdpUnit& unit, FsdpRank& rank, const std::string& purpose) {
  if (!offloaded(unit)) return unit.master;
  const Tensor copy = Tensor::empty(rank.device, unit.master.shape(), DType::f32, MemTag::comm_buffer,
                                    unit.name + "." + purpose, Lane::memcpy);
  // The copy may take a block an earlier gather read on the all-gather stream.
  rank.order(Lane::memcpy, Lane::all_gather);
  copy_to_device(rank.device.stream(Lane::memcpy), unit.master, copy);
  rank.order(Lane::all_gather, Lane::memcpy);
  return copy;
}

Tensor grad_shard_on_device(const FsdpUnit& unit, FsdpRank& rank) {
  if (!offloaded(unit)) return unit.grad_shard;
  return Tensor::empty(rank.device, unit.grad_shard.shape(), DType::f32, MemTag::comm_buffer,
                       unit.name + ".flat_grad_shard_device", Lane::reduce_scatter);
}

Lane finish_grad_shard(const FsdpUnit& unit, FsdpRank& rank, const Tensor& device_grad) {
  if (!offloaded(unit)) return Lane::reduce_scatter;
  rank.order(Lane::memcpy, Lane::reduce_scatter);
  copy_to_host(rank.device.stream(Lane::memcpy), device_grad, unit.grad_shard);
  return Lane::memcpy;
}

}  // namespace fsdplab
