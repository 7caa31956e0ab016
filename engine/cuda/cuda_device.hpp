// cuda_device.hpp — the Device on a real GPU: CUDA streams and events, a caching allocator that tags
// every block, op times from CUDA events, and a live trace from CUPTI.
//
// Each rank's CudaDevice has its own four non-blocking streams (compute, all_gather, reduce_scatter,
// memcpy); several ranks may share one GPU (LocalComm between threads). An op's CUDA body enqueues its
// kernels on the lane's stream between two timing events; once the end event has completed, the op's
// begin and end (ns since the GPU's epoch, a time zero shared by every rank on that GPU) go into the op
// log, as the sim device's virtual times do: step times, schedules and `bench` read a cuda run as a sim run.
//
// The trace sinks get what CUPTI saw (cupti_tracer.hpp): every kernel, copy and memset on its rank's stream
// lane, and the host's waits, each labelled with the op it came from (category, step, unit, phase, op id and
// deps), NCCL's kernels as collectives. Where CUPTI cannot trace (another profiler holds it) or is turned
// off (`cupti = false`), the sinks get each op's CUDA-event span instead, and a warning says why once.
// Label changes also mark NVTX ranges (nvtx_ranges.hpp), for Nsight Systems.
//
// The host's time is the wall clock since the same epoch. Collectives of one rank take its link one at a
// time, as on the sim device and as NCCL runs a communicator's collectives; with `emulate_link` each
// collective holds its stream until the link preset's time has passed since it began (comm_kernels.hpp): its
// copies run inside that time, as a link's bytes move within it, so it takes the longer of the two, and the
// overlap of a PCIe workstation can be seen with every rank on one GPU. Ranks sharing a GPU may each get their
// own share of its SMs (`CudaDeviceOptions::sm`), so that they run side by side as GPUs of their own would.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "engine/runtime/caching_allocator.hpp"
#include "engine/runtime/device.hpp"
#include "engine/runtime/sm_share.hpp"

namespace fsdplab {

struct CudaDeviceOptions {
  int gpu = 0;
  bool emulate_link = false;
  bool cupti = true;  // the sinks get CUPTI's kernel-level trace; false: each op's CUDA-event span
  // Ranks sharing the GPU: this rank's streams run on its share of the SMs (engine/cuda/sm_partition.hpp).
  SmShare sm;
};

class CudaDevice final : public Device {
 public:
  CudaDevice(int rank, DevicePreset preset, LinkPreset link, CudaDeviceOptions options = {});
  ~CudaDevice() override;

  DeviceKind kind() const override { return DeviceKind::cuda; }
  bool dry_run() const override { return false; }
  const CostModel& cost_model() const override { return cost_; }
  int gpu() const { return options_.gpu; }
  // The SMs this rank's streams run on: its share where the GPU's SMs are split, else all of them.
  int sm_count() const;

  OpId launch(Lane lane, OpSpec spec, const OpBody& body) override;
  // The host's time now: a real device starts an op when it can, not when it was agreed.
  SimTime earliest_start(Lane lane, OpCategory category, RankLink link) const override;
  void record(Event& event, Lane lane) override;
  void wait(Lane lane, const Event& event) override;
  void synchronize(const Event& event) override;
  void synchronize(Lane lane) override;
  void synchronize() override;
  bool completed(const Event& event) override;
  // Holds the host thread for `duration` (it is real time here) and marks it in the trace.
  void host_work(const std::string& name, SimTime duration) override;
  SimTime host_time() const override;
  void host_read(const Access& access, std::byte* to, const std::string& what) override;
  void host_write(const Access& access, const std::byte* from, const std::string& what) override;

  Allocation allocate(std::int64_t bytes, MemTag tag, Lane stream = Lane::compute) override;

  // Whether CUPTI traces this device; when not, why (another profiler holds CUPTI, or it was turned off).
  bool cupti_tracing() const;
  const std::string& why_no_cupti() const { return why_no_cupti_; }

 private:
  struct Impl;  // CUDA handles: streams, the timing-event pool, the epoch; the CUPTI link and NVTX ranges
  void free(Block* block) override;
  void labels_changed() override;
  // Gives the op log (and, without CUPTI, the sinks) the times of every op whose end event has completed;
  // with `wait`, of every op launched so far. With CUPTI, the sinks then get the records delivered so far.
  void resolve_timings(bool wait);
  // Runs `call`, the host's own CUDA calls for a copy or a wait, so that CUPTI's records of it come back as
  // `work` (named, on its lane, with the labels of now).
  template <class Call>
  void traced(TraceEvent work, Call&& call);
  TraceEvent host_wait(std::string name) const;
  TraceEvent host_copy(std::string name, std::int64_t bytes) const;
  void emit_memory(MemTag tag);
  // The live block `access` (a host read or write, `what`, that `verb` its bytes) lies within; an Error naming the
  // rank and `what` when the block was freed or handed out again since, or the range is outside it.
  Block& live_block_of(const Access& access, const std::string& what, const char* verb);
  // `event`'s cudaEvent_t; an Error naming `use` when it was never recorded or recorded by a sim device.
  void* native_event(const Event& event, const char* use) const;

  CudaDeviceOptions options_;
  CostModel cost_;
  std::unique_ptr<Impl> impl_;
  CachingAllocator allocator_;
  OpId next_op_ = 1;
  std::string why_no_cupti_;
};

}  // namespace fsdplab
