// op.hpp — what an op tells the device when it is launched, and what the device records of it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/runtime/cost_model.hpp"
#include "engine/trace/trace_event.hpp"

// CUDA's stream type (cudaStream_t is `CUstream_st*`, in the global namespace), declared here so op
// bodies can name a stream without the CUDA headers: a build without nvcc compiles every op, and only
// the cuda device calls a CUDA body.
struct CUstream_st;

namespace fsdplab {

using BlockId = std::uint64_t;

// A byte range of one memory block that an op reads or writes.
struct Access {
  BlockId block = 0;
  std::int64_t offset = 0;  // bytes from the block's start
  std::int64_t bytes = 0;
  // Which allocation of the block it was made in (Block::generation): one kept past its tensor's free names the
  // block's old memory, and is refused once the block is handed out again, as before.
  std::uint64_t generation = 0;
};

struct OpSpec {
  std::string name;
  OpCategory category = OpCategory::compute;
  OpCost cost;                     // how long it takes, unless `duration` is set
  SimTime duration = -1;           // set by collectives, whose time comes from the link, not the device
  SimTime not_before = 0;          // set by collectives: the start time agreed between the ranks
  RankLink link = RankLink::in_node;  // set by collectives: which of the rank's links they take (sim)
  std::int64_t bytes_moved = 0;    // for the trace: bytes a collective or copy moves
  std::vector<Access> reads;
  std::vector<Access> writes;
};

// What an op computes, once per backend. `host` works on host memory: the sim device runs it at launch
// (never on a dry run), and every device runs it for ops on the host lane (CPU work on pinned memory).
// `cuda` enqueues the op's kernels on the stream it is given and returns at once (the cuda device).
// A device refuses an op with no body for it, naming the op. Front-ends write the cuda body inside
// FSDPLAB_CUDA_BODY(...) (engine/tensor/launch.hpp) so a build without nvcc never references a kernel.
struct OpBody {
  std::function<void()> host;
  std::function<void(CUstream_st* stream)> cuda;
};

// Labels stamped on every op launched while they are set (see LabelScope in device.hpp).
struct OpLabels {
  int step = -1;
  int unit = -1;
  std::string phase;
};

struct OpRecord {
  OpId id = 0;
  std::string name;
  OpCategory category = OpCategory::compute;
  Lane lane = Lane::compute;
  OpLabels labels;
  SimTime issued = 0;  // host time when the launch call returned
  SimTime begin = 0;
  SimTime end = 0;
  OpCost cost;
  std::int64_t bytes_moved = 0;
  std::vector<OpRef> deps;  // ops it waited for through events
  std::vector<Access> reads;
  std::vector<Access> writes;
};

}  // namespace fsdplab
