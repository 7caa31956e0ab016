// communicator.hpp — the collectives FSDP calls, whatever carries them (LocalComm between threads
// of one process; MpiComm between processes; NcclComm between GPUs).
//
// The surface is nccl-tests' small set. Every collective is an op launched on the stream it is given
// (FSDP gives the all_gather / reduce_scatter streams, and orders them against compute with events;
// SYNC is that ordering made total), stamped with its OpCategory (all_gather, reduce_scatter,
// all_reduce, broadcast).
//
// Shapes, as torch's all_gather_into_tensor / reduce_scatter_tensor: full.numel() == world() *
// shard.numel(), and rank r's shard is chunk r of full (elements [r * n, (r + 1) * n)). A shard may
// be that very chunk of the same buffer (in place); collectives move data as if every rank read all
// inputs before any rank wrote an output.
// Dtypes: f32 and bf16 (i32 too for all_gather and broadcast, which only move bytes). LocalComm's and MpiComm's
// reductions accumulate in f32, in group-rank order, and round to the tensor's dtype once at the end, so every
// rank gets bit-identical results and bf16 loses no more than one rounding (rank_order_reduction.hpp); NcclComm's
// sum in NCCL's order, a bf16 average rounding once more ([Note: averaging bf16 on NCCL], nccl_comm.cpp).
#pragma once
#include <memory>

#include "engine/runtime/device.hpp"
#include "engine/runtime/error.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// What a rank throws when it stops waiting because a peer failed: a consequence, never the cause a world
// reports (see [Note: which failure a world reports] in engine/train/world.cpp). Rethrow it as it is.
struct PeerFailed : Error {
  using Error::Error;
};

// What a rank throws when its peers did not all come to a collective within the world's timeout, or cannot (a
// deadlock, LocalWorld::see_deadlock): the error names the ranks missing and, where they wait in another collective,
// that one.
struct CollectiveTimedOut : Error {
  using Error::Error;
};

enum class ReduceOp { sum, avg };  // avg: the sum divided by the group size, in f32

class Communicator {
 public:
  virtual ~Communicator() = default;

  // This rank's index in the group, 0 .. world() - 1, and the group's size.
  virtual int rank() const = 0;
  virtual int world() const = 0;

  virtual void all_gather(Stream stream, const Tensor& shard, const Tensor& full) = 0;
  virtual void reduce_scatter(Stream stream, const Tensor& full, const Tensor& shard, ReduceOp op) = 0;
  virtual void all_reduce(Stream stream, const Tensor& t, ReduceOp op) = 0;
  // Every rank's `t` receives group rank `root`'s.
  virtual void broadcast(Stream stream, const Tensor& t, int root) = 0;
  // The hosts wait for each other. Launches no op and moves no clock: it orders host code (one rank
  // writes a file, the others read it), not device work.
  virtual void barrier() = 0;

  // Collective over this group, as MPI_Comm_split: ranks passing the same `color` (>= 0) form a new
  // group, ordered by their rank here. HYBRID_SHARD splits the world twice: shard groups
  // (color = rank / shard_size) and replica groups (color = rank % shard_size).
  virtual std::unique_ptr<Communicator> split(int color) = 0;
};

}  // namespace fsdplab
