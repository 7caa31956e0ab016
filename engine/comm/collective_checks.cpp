#include "engine/comm/collective_checks.hpp"

#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

void check_operand(const Tensor& t, const char* role, const Device& device, const char* op) {
  check(t.defined(), op, ": ", role, " is an undefined tensor");
  if (t.is_meta())
    fail(op, ": ", role, " ", t.describe(), " is a meta tensor (shape only); materialise it on a device first");
  if (!(&t.device() == &device))
    fail(op, ": ", role, " ", t.describe(), " lives on rank ", t.device().rank(),
         " but this communicator belongs to rank ", device.rank());
  if (!(t.numel() > 0)) fail(op, ": ", role, " ", t.describe(), " is empty");
}

// An in-place shard is chunk `rank` of full; any other overlap is refused (collective_checks.hpp).
void check_in_place(const Tensor& shard, const Tensor& full, int rank, const char* op) {
  if (!shard.overlaps(full)) return;
  const std::int64_t expected = full.offset() + rank * shard.numel();
  if (shard.offset() != expected)
    fail(op, ": shard ", shard.describe(), " overlaps full ", full.describe(), " but is not its chunk ", rank,
         " (this rank's): it starts ", shard.offset() - full.offset(), " elements into full; expected ",
         expected - full.offset(), ", or a buffer of its own");
}

void check_reducible(const Tensor& t, const char* op) {
  if (!(t.dtype() == DType::f32 || t.dtype() == DType::bf16))
    fail(op, ": ", t.describe(), " cannot be reduced; expected f32 or bf16");
}

// "2 shards of 'x' [5] f32, 10 elements": what a full buffer of `world` shards holds.
std::string shards_of(int world, const Tensor& shard) {
  return std::to_string(world) + (world == 1 ? " shard of " : " shards of ") + shard.describe() + ", " +
         std::to_string(shard.numel() * world) + " elements";
}

// " (shard and full swapped?)" where the shard is the size of the full buffer's W shards, else "".
std::string swapped(const Tensor& shard, const Tensor& full, int world) {
  return world > 1 && shard.numel() == full.numel() * world ? " (shard and full swapped?)" : "";
}

}  // namespace

void check_all_gather(const Tensor& shard, const Tensor& full, int world, int rank, const Device& device) {
  check_operand(shard, "shard", device, "all_gather");
  check_operand(full, "full", device, "all_gather");
  if (!(shard.dtype() == full.dtype()))
    fail("all_gather: shard ", shard.describe(), " and full ", full.describe(), " differ in dtype");
  if (!(full.numel() == shard.numel() * world))
    fail("all_gather: full ", full.describe(), " must hold ", shards_of(world, shard), "; it holds ", full.numel(),
         swapped(shard, full, world));
  check_in_place(shard, full, rank, "all_gather");
}

void check_reduce_scatter(const Tensor& full, const Tensor& shard, int world, int rank, const Device& device) {
  check_operand(full, "full", device, "reduce_scatter");
  check_operand(shard, "shard", device, "reduce_scatter");
  if (!(shard.dtype() == full.dtype()))
    fail("reduce_scatter: full ", full.describe(), " and shard ", shard.describe(), " differ in dtype");
  check_reducible(full, "reduce_scatter");
  if (!(full.numel() == shard.numel() * world))
    fail("reduce_scatter: full ", full.describe(), " must hold ", shards_of(world, shard), "; it holds ", full.numel(),
         swapped(shard, full, world));
  check_in_place(shard, full, rank, "reduce_scatter");
}

void check_all_reduce(const Tensor& t, const Device& device) {
  check_operand(t, "tensor", device, "all_reduce");
  check_reducible(t, "all_reduce");
}

void check_broadcast(const Tensor& t, int root, int world, const Device& device) {
  check_operand(t, "tensor", device, "broadcast");
  check(root >= 0 && root < world, "broadcast: root ", root, " in a group of ", world, " ranks");
}

}  // namespace fsdplab
