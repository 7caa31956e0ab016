// device.hpp — the per-rank device interface every layer above the runtime talks to.
//
// A Device has a stream per device Lane (compute, all_gather, reduce_scatter, memcpy; Lane::host is the
// CPU, not a stream), events, a host cursor, an allocator that tags every block, and a memory ledger.
// FSDP code issues ops onto streams and orders them with events, exactly as it would with CUDA; the
// backends differ in what an op's body does, where times come from, and how freed blocks are reused
// (Block, below):
//   sim   runs the body on the host at launch and stamps it on a virtual clock (sim_device.hpp);
//   cuda  enqueues the body's kernels on a real CUDA stream and times them with CUDA events
//         (engine/cuda/cuda_device.hpp).
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "engine/runtime/cost_model.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/event.hpp"
#include "engine/runtime/mem_tag.hpp"
#include "engine/runtime/memory_ledger.hpp"
#include "engine/runtime/op.hpp"
#include "engine/trace/trace_event.hpp"

namespace fsdplab {

enum class DeviceKind { sim, cuda };

// One allocation's memory. Blocks are owned by their device and cached: a freed block is handed out
// again for a later allocation of the same size class, as a caching allocator does, which is what
// makes "reused while another stream still reads it" a real hazard. Each block belongs to the stream it
// was allocated for, whose order makes reuse for that stream safe; a block another stream also used must
// be kept until that stream is done with it (record_stream; DeferredFrees) before it is freed. Both
// devices cache blocks in one CachingAllocator, which also hands a block to another stream, once its free
// has passed or with that stream ordered after the free (an event wait).
struct Block {
  BlockId id = 0;
  std::int64_t capacity = 0;    // size class, what the allocator holds
  std::int64_t bytes = 0;       // what the current allocation asked for
  MemTag tag = MemTag::workspace;
  Lane stream = Lane::compute;  // the stream whose pool it returns to
  std::byte* data = nullptr;    // null on a dry run: time and memory only
  std::uint64_t generation = 0; // how many allocations have used this block
  bool live = false;
};

class Device;

// A raw pointer into device memory, or into pinned host memory a copy may still use, asked for on the host outside an
// op's body (Device::check_raw_pointer): its own type, so that a catcher (the grader) names the mistake whatever else
// the message says.
class HostTouchedDeviceMemory : public Error {
 public:
  using Error::Error;
};

// A device's stream, the handle ops are launched on, as `kernel<<<grid, block, 0, stream>>>`.
struct Stream {
  Device* device = nullptr;
  Lane lane = Lane::compute;
};

// Move-only owner of one allocation; frees it (stream-ordered, at the host's time) when destroyed.
class Allocation {
 public:
  Allocation() = default;
  Allocation(Device* device, Block* block) : device_(device), block_(block) {}
  Allocation(Allocation&& other) noexcept { swap(other); }
  Allocation& operator=(Allocation&& other) noexcept {
    Allocation(std::move(other)).swap(*this);
    return *this;
  }
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  ~Allocation();

  explicit operator bool() const { return block_ != nullptr; }
  const Block* block() const { return block_; }
  std::byte* data() const { return block_ ? block_->data : nullptr; }
  void reset() { Allocation().swap(*this); }

 private:
  void swap(Allocation& other) noexcept {
    std::swap(device_, other.device_);
    std::swap(block_, other.block_);
  }
  Device* device_ = nullptr;
  Block* block_ = nullptr;
};

class Device {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual DeviceKind kind() const = 0;
  int rank() const { return rank_; }
  // On a dry run ops keep their times and memory but skip their numerics; blocks hold no data.
  virtual bool dry_run() const = 0;
  virtual const CostModel& cost_model() const = 0;
  Stream stream(Lane lane) { return Stream{this, lane}; }

  // ---- streams and events -------------------------------------------------------------------
  // Issues an op on `lane`'s stream. `body` computes its numerics, with the part for this device (op.hpp;
  // skipped on a dry run). On `Lane::host` the op is CPU work (an offloaded optimizer step): its host body
  // runs now, on the host's cursor, which it advances by its duration on the host's cost model.
  virtual OpId launch(Lane lane, OpSpec spec, const OpBody& body) = 0;
  // When an op of `category` launched now on `lane` could start: collectives agree on the max over
  // their ranks. A collective also waits for the rank's `link` (sim_device.hpp).
  virtual SimTime earliest_start(Lane lane, OpCategory category, RankLink link) const = 0;
  virtual void record(Event& event, Lane lane) = 0;
  // Later work on `lane` waits for `event` (which may come from another rank's device).
  virtual void wait(Lane lane, const Event& event) = 0;
  // Work issued to `waiter` from now on starts after all work issued to `producer` so far: an event recorded on
  // the one and waited on by the other, as torch's Stream.wait_stream; never a host sync.
  void wait_stream(Lane waiter, Lane producer);
  // The host waits: for an event, for one stream, or for the whole device.
  virtual void synchronize(const Event& event) = 0;
  virtual void synchronize(Lane lane) = 0;
  virtual void synchronize() = 0;
  // Whether the work before `event`'s record is done, without waiting (cudaEventQuery). True orders the host after
  // that work, as CUDA's answer does: the host may read what it wrote (the sim device's race detector learns it as
  // from synchronize(event), which moves no time here). False changes nothing. A loop polling it ends when the work
  // does, on both devices: the sim device takes the same question asked a thousand times at one host time for a
  // spin, and moves the host to the earliest end among the events it asked about ([Note: a host that polls an
  // event], sim_device.cpp). synchronize(event) is the wait.
  virtual bool completed(const Event& event) = 0;
  // Host-side work that takes time (a Python-style loop, a CPU optimizer step): advances the host.
  virtual void host_work(const std::string& name, SimTime duration) = 0;
  virtual SimTime host_time() const = 0;
  // The host reads or writes device memory directly (reading a loss, filling an input): `access.bytes`
  // bytes between the block and host memory, at once (the host must have synchronized with the streams
  // that use the range; the sim device checks it). `what` names it in errors.
  virtual void host_read(const Access& access, std::byte* to, const std::string& what) = 0;
  virtual void host_write(const Access& access, const std::byte* from, const std::string& what) = 0;
  // Before a raw pointer into `block` is handed out (Tensor::f32() and its kin): device memory is the device's, for
  // op bodies (kernels) to touch; the host reads and writes it through host_read and host_write. The sim device
  // refuses a pointer into device memory asked for outside an op's body, as a GPU's would fault (a
  // HostTouchedDeviceMemory, above), and one into pinned host memory too: a copy to or from the device may still use
  // it, and only host_read and host_write check that. `storage` is the memory's name, for the message; called at every
  // pointer fetch in an op's body, so it builds nothing unless it refuses.
  virtual void check_raw_pointer(const Block& /*block*/, const std::string& /*storage*/) const {}

  // ---- memory ---------------------------------------------------------------------------------
  // Memory for work on `stream` (its pool of cached blocks; see Block). `Lane::host` gives pinned host
  // memory (CPU offload): counted in host_ledger(), not against the device's capacity; only host ops
  // and the host<->device copies (tensor/host_copy.hpp) may touch it.
  virtual Allocation allocate(std::int64_t bytes, MemTag tag, Lane stream = Lane::compute) = 0;
  const MemoryLedger& ledger() const { return ledger_; }
  MemoryLedger& ledger() { return ledger_; }
  const MemoryLedger& host_ledger() const { return host_ledger_; }

  // ---- labels, trace, op log --------------------------------------------------------------------
  const OpLabels& labels() const { return labels_; }
  void set_labels(OpLabels labels) {
    labels_ = std::move(labels);
    labels_changed();
  }
  void add_sink(TraceSink* sink) { sinks_.push_back(sink); }
  void remove_sink(TraceSink* sink);
  // Every op launched, in launch order: the recorded op graph schedule tests read.
  const std::vector<OpRecord>& ops() const { return ops_; }
  const OpRecord& op(OpId id) const;
  void set_keep_op_log(bool keep) { keep_op_log_ = keep; }

 protected:
  explicit Device(int rank) : rank_(rank) {}
  friend class Allocation;
  virtual void free(Block* block) = 0;
  // After every change of the labels (the cuda device marks them as NVTX ranges for Nsight Systems).
  virtual void labels_changed() {}

  void emit(const TraceEvent& event) const;
  void emit(const CounterSample& sample) const;

  int rank_;
  MemoryLedger ledger_;
  MemoryLedger host_ledger_;
  OpLabels labels_;
  std::vector<TraceSink*> sinks_;
  std::vector<OpRecord> ops_;
  bool keep_op_log_ = true;
};

// Sets some labels for the ops launched in its scope and restores the previous ones after:
//   LabelScope scope(device, {.step = s, .unit = u, .phase = "forward"});
class LabelScope {
 public:
  LabelScope(Device& device, OpLabels labels) : device_(device), saved_(device.labels()) {
    device.set_labels(std::move(labels));
  }
  ~LabelScope() { device_.set_labels(std::move(saved_)); }
  LabelScope(const LabelScope&) = delete;
  LabelScope& operator=(const LabelScope&) = delete;

 private:
  Device& device_;
  OpLabels saved_;
};

}  // namespace fsdplab
