// cuda_device.hpp — the Device on a real GPU: CUDA streams and events, a caching allocator that tags
// every block, and op times from CUDA events.
//
// Each rank's CudaDevice has its own four non-blocking streams (compute, all_gather, reduce_scatter,
// memcpy); several ranks may share one GPU (LocalComm between threads). An op's CUDA body enqueues its
// kernels on the lane's stream between two timing events; once the end event has completed, the op's
// begin and end (ns since the GPU's epoch, a time zero shared by every rank on that GPU) go into the op
// log and to the trace sinks, as the sim device's virtual times do. So the dashboard, `bench` and the
// Chrome trace read a cuda run as they read a sim run, before any profiler is attached.
//
// The host's time is the wall clock since the same epoch. Collectives of one rank take its link one at a
// time, as on the sim device and as NCCL runs a communicator's collectives; with `emulate_link` each
// collective first holds its stream for the link preset's time (a spin kernel), so the overlap of a PCIe
// workstation can be seen with every rank on one GPU.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/caching_allocator.hpp"
#include "engine/runtime/device.hpp"

namespace fsdplab {

struct CudaDeviceOptions {
  int gpu = 0;
  bool emulate_link = false;
};

class CudaDevice final : public Device {
 public:
  CudaDevice(int rank, DevicePreset preset, LinkPreset link, CudaDeviceOptions options = {});
  ~CudaDevice() override;

  DeviceKind kind() const override { return DeviceKind::cuda; }
  bool dry_run() const override { return false; }
  const CostModel& cost_model() const override { return cost_; }
  int gpu() const { return options_.gpu; }

  OpId launch(Lane lane, OpSpec spec, const OpBody& body) override;
  // The host's time now: a real device starts an op when it can, not when it was agreed.
  SimTime earliest_start(Lane lane, OpCategory category) const override;
  void record(Event& event, Lane lane) override;
  void wait(Lane lane, const Event& event) override;
  void synchronize(const Event& event) override;
  void synchronize(Lane lane) override;
  void synchronize() override;
  bool completed(const Event& event) const override;
  // Holds the host thread for `duration` (it is real time here) and marks it in the trace.
  void host_work(const std::string& name, SimTime duration) override;
  SimTime host_time() const override;
  void host_read(const Access& access, std::byte* to, const std::string& what) override;
  void host_write(const Access& access, const std::byte* from, const std::string& what) override;

  Allocation allocate(std::int64_t bytes, MemTag tag, Lane stream = Lane::compute) override;

  // Bytes the allocator holds from the GPU (live and cached), and how many times it had to free its
  // cache and retry an allocation the GPU refused.
  std::int64_t reserved_bytes() const { return allocator_.reserved_bytes(); }
  int cache_flushes() const { return allocator_.flushes(); }

 private:
  struct Impl;  // CUDA handles: streams, the timing-event pool, the epoch
  void free(Block* block) override;
  // Gives the op log and the sinks the times of every op whose end event has completed; with `wait`,
  // of every op launched so far.
  void resolve_timings(bool wait);
  void emit_memory(MemTag tag);
  // `event`'s cudaEvent_t; an Error naming `use` when it was never recorded or recorded by a sim device.
  void* native_event(const Event& event, const char* use) const;

  CudaDeviceOptions options_;
  CostModel cost_;
  std::unique_ptr<Impl> impl_;
  CachingAllocator allocator_;
  OpId next_op_ = 1;
};

}  // namespace fsdplab
