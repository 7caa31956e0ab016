#include "engine/cuda/cuda_device.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <vector>

#include "engine/cuda/comm_kernels.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cupti_tracer.hpp"
#include "engine/cuda/nvtx_ranges.hpp"
#include "engine/cuda/op_scratch.hpp"
#include "engine/cuda/sm_partition.hpp"
#include "engine/runtime/byte_text.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

using cuda::check_cuda;
using HostClock = std::chrono::steady_clock;

// Time zero of one GPU, shared by every rank on it so their lanes line up: an event the host waited for,
// and the host's clock at that moment. Made once per GPU and kept for the life of the process (destroying
// CUDA objects at exit races the runtime's own teardown).
struct GpuEpoch {
  cudaEvent_t event = nullptr;
  HostClock::time_point host;
};

const GpuEpoch& epoch_of(int gpu) {
  static std::mutex mutex;
  static std::map<int, GpuEpoch*> epochs;
  std::lock_guard lock(mutex);
  GpuEpoch*& epoch = epochs[gpu];
  if (!epoch) {
    auto* made = new GpuEpoch;
    check_cuda(cudaEventCreate(&made->event), "GPU ", gpu, ": creating the timing epoch");
    check_cuda(cudaEventRecord(made->event, nullptr), "GPU ", gpu, ": recording the timing epoch");
    check_cuda(cudaEventSynchronize(made->event), "GPU ", gpu, ": waiting for the timing epoch");
    made->host = HostClock::now();
    epoch = made;
  }
  return *epoch;
}

// A fresh event for synchronization only (no timestamp, which makes record and wait cheaper), owned by a
// shared_ptr so the copies of an fsdplab::Event share it and the last one destroys it.
std::shared_ptr<void> new_sync_event(const char* what) {
  cudaEvent_t event = nullptr;
  check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "creating an event for ", what);
  return std::shared_ptr<void>(event, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
}

cudaEvent_t native(const std::shared_ptr<void>& event) { return static_cast<cudaEvent_t>(event.get()); }

// The op a thread is launching, for op_scratch.hpp: its device, its stream, the scratch it took, freed
// (stream-ordered) once the op's kernels are enqueued, and its stream's SMs (0: every SM).
struct LaunchingOp {
  Device* device = nullptr;
  Lane lane = Lane::compute;
  int sm_count = 0;
  std::vector<Allocation> scratch;
};
thread_local LaunchingOp* launching = nullptr;

// Sets `launching` for the duration of a CUDA body, whatever it throws.
class LaunchScope {
 public:
  explicit LaunchScope(LaunchingOp& op) : previous_(launching) { launching = &op; }
  ~LaunchScope() { launching = previous_; }
  LaunchScope(const LaunchScope&) = delete;
  LaunchScope& operator=(const LaunchScope&) = delete;

 private:
  LaunchingOp* previous_;
};

}  // namespace

void* cuda::op_scratch(std::int64_t bytes, const char* what) {
  check(launching != nullptr, what, ": op scratch asked for outside an op's CUDA body");
  launching->scratch.push_back(launching->device->allocate(bytes, MemTag::workspace, launching->lane));
  return launching->scratch.back().data();
}

int cuda::op_sm_count() {
  check(launching != nullptr, "the SM count of an op asked for outside its CUDA body");
  return launching->sm_count;
}

// ---- Impl: the CUDA handles ---------------------------------------------------------------------

struct CudaDevice::Impl final : BlockSource {
  struct StreamState {
    cudaStream_t stream = nullptr;
    OpId last_op = 0;
    std::vector<OpRef> pending_deps;  // waits (events, freed blocks) not yet consumed by an op
    // The end event of the stream's last timed op and its time: the next op's start is measured from it.
    // cudaEventElapsedTime gives float milliseconds, exact to nanoseconds only over short spans, and a
    // stream's previous end is always before its next start, so each offset is a short, non-negative
    // one; the first op of a stream is measured from the GPU's epoch.
    cudaEvent_t last_end = nullptr;
    SimTime last_end_time = 0;
  };
  // An op whose times are not known yet: its two timing events and what the trace will say of it.
  struct Timed {
    cudaEvent_t start = nullptr;
    cudaEvent_t end = nullptr;
    TraceEvent trace;
    std::uint64_t tag = 0;  // its work's tag on the CUPTI link
  };

  int rank;
  int gpu;
  const GpuEpoch& epoch;
  std::unique_ptr<cuda::SmPartition> sm_partition;  // null: the streams run on every SM
  std::array<StreamState, kStreamCount> streams;
  std::array<std::deque<Timed>, kStreamCount> timed;  // per stream, in launch (= completion) order
  std::vector<cudaEvent_t> spare_timing_events;
  std::shared_ptr<void> link_free;  // where this rank's last collective ends: the next one starts after it
  // With `emulate_link`: where the rank's collective began on the GPU's global timer (comm_kernels.hpp), a word in
  // device memory; null without.
  unsigned long long* link_clock = nullptr;
  std::unique_ptr<cuda::CuptiLink> cupti;  // null: the sinks get CUDA-event op spans
  cuda::NvtxRanges nvtx;

  Impl(int rank, int gpu) : rank(rank), gpu(gpu), epoch(epoch_of(gpu)), nvtx(rank) {}

  ~Impl() override {
    for (StreamState& s : streams) {
      if (s.stream) cudaStreamDestroy(s.stream);
      if (s.last_end) cudaEventDestroy(s.last_end);
    }
    for (auto& queue : timed)
      for (Timed& t : queue) {
        cudaEventDestroy(t.start);
        cudaEventDestroy(t.end);
      }
    for (cudaEvent_t e : spare_timing_events) cudaEventDestroy(e);
    if (link_clock) cudaFree(link_clock);
  }

  void allocate_link_clock() {
    void* p = nullptr;
    check_cuda(cudaMalloc(&p, sizeof(unsigned long long)), "rank ", rank, ": allocating the emulated link's clock");
    link_clock = static_cast<unsigned long long*>(p);
  }

  // More than one share: on this rank's share of the GPU's SMs (sm_partition.hpp), or on every SM where the
  // driver cannot make the share and it is not required.
  void create_streams(const SmShare& sm) {
    if (sm.count > 1) {
      try {
        sm_partition = std::make_unique<cuda::SmPartition>(gpu, sm.index, sm.count, rank);
      } catch (const Error& e) {
        if (sm.required) throw;
        static std::once_flag warned;
        std::call_once(warned, [&] {
          std::fprintf(stderr, "fsdplab: the ranks share every SM of GPU %d (--sm-split on makes this an error): %s\n",
                       gpu, e.what());
        });
      }
    }
    // Collectives get the higher priority: a waiting all-gather is what stalls the next unit's compute, so
    // its copies should not queue behind a long GEMM's blocks.
    int lowest = 0, highest = 0;
    check_cuda(cudaDeviceGetStreamPriorityRange(&lowest, &highest), "rank ", rank, ": stream priorities");
    for (Lane lane : kAllLanes) {
      if (lane == Lane::host) continue;
      const int priority = lane == Lane::all_gather || lane == Lane::reduce_scatter ? highest : lowest;
      cudaStream_t& stream = streams[lane_index(lane)].stream;
      if (sm_partition) {
        stream = sm_partition->create_stream(priority);
        continue;
      }
      // Non-blocking: the legacy default stream (a plain cudaMemcpy) must not order these streams.
      check_cuda(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, priority), "rank ", rank,
                 ": creating the ", lane_name(lane), " stream");
    }
  }

  cudaStream_t stream(Lane lane) const { return streams[lane_index(lane)].stream; }

  cudaEvent_t timing_event() {
    if (!spare_timing_events.empty()) {
      cudaEvent_t e = spare_timing_events.back();
      spare_timing_events.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreate(&e), "rank ", rank, ": creating a timing event");
    return e;
  }

  // Nanoseconds from `from` to `to`, both completed timing events.
  SimTime elapsed(cudaEvent_t from, cudaEvent_t to, const std::string& op) const {
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, from, to), "rank ", rank, ": timing op '", op, "'");
    return static_cast<SimTime>(std::llround(static_cast<double>(ms) * 1e6));
  }

  // ---- BlockSource ----
  std::optional<std::byte*> obtain(std::int64_t bytes, bool host) override {
    void* p = nullptr;
    const cudaError_t status = host ? cudaMallocHost(&p, static_cast<std::size_t>(bytes))
                                    : cudaMalloc(&p, static_cast<std::size_t>(bytes));
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it so the next call does not report it
      return std::nullopt;
    }
    check_cuda(status, "rank ", rank, ": allocating ", bytes, host ? " bytes of pinned host memory" : " bytes");
    return static_cast<std::byte*>(p);
  }
  void give_back(std::byte* data, bool host) override {
    check_cuda(host ? cudaFreeHost(data) : cudaFree(data), "rank ", rank, ": freeing cached memory");
  }
  // A free's mark: an event recorded on the block's old stream, and that stream's last op then, which the new
  // stream's next op lists as the allocator's dependency (WaitReason::freed_block), as the sim device's does.
  struct FreedBlock {
    std::shared_ptr<void> event;
    OpRef last_op;
  };
  static const FreedBlock& freed(const Mark& mark) { return *static_cast<const FreedBlock*>(mark.get()); }
  Mark mark(Lane lane) override {
    if (lane == Lane::host) return nullptr;  // host memory is the host's: freed when the host frees it
    auto marked = std::make_shared<FreedBlock>(FreedBlock{
        .event = new_sync_event("a freed block"),
        .last_op = {.rank = rank, .op = streams[lane_index(lane)].last_op, .reason = WaitReason::freed_block}});
    check_cuda(cudaEventRecord(native(marked->event), stream(lane)), "rank ", rank, ": marking a free on ",
               lane_name(lane));
    return marked;
  }
  bool passed(const Mark& mark) override {
    if (!mark) return true;
    const cudaError_t status = cudaEventQuery(native(freed(mark).event));
    if (status == cudaErrorNotReady) return false;
    check_cuda(status, "rank ", rank, ": asking whether a freed block's stream is done with it");
    return true;
  }
  void order_after(Lane lane, const Mark& mark) override {
    if (!mark) return;
    check_cuda(cudaStreamWaitEvent(stream(lane), native(freed(mark).event), 0), "rank ", rank, ": ordering ",
               lane_name(lane), " after a block's free");
    if (freed(mark).last_op.op != 0) streams[lane_index(lane)].pending_deps.push_back(freed(mark).last_op);
  }
  void wait(const Mark& mark) override {
    if (mark)
      check_cuda(cudaEventSynchronize(native(freed(mark).event)), "rank ", rank,
                 ": waiting for a freed block's stream");
  }
};

// ---- construction ---------------------------------------------------------------------------------

namespace {

// Every CUDA call of a rank's thread goes to its GPU. Set once per thread and device.
cudaError_t select_gpu(int gpu) noexcept {
  thread_local int current = -1;
  if (current == gpu) return cudaSuccess;
  const cudaError_t status = cudaSetDevice(gpu);
  if (status == cudaSuccess) current = gpu;
  return status;
}

void use_gpu(int gpu, int rank) { check_cuda(select_gpu(gpu), "rank ", rank, ": selecting GPU ", gpu); }

}  // namespace

CudaDevice::CudaDevice(int rank, DevicePreset preset, LinkPreset link, CudaDeviceOptions options)
    : Device(rank),
      options_(options),
      cost_(std::move(preset), std::move(link)),
      impl_([&] {
        int count = 0;
        if (cudaGetDeviceCount(&count) != cudaSuccess) {
          cudaGetLastError();
          count = 0;
        }
        check(options.gpu >= 0 && options.gpu < count, "rank ", rank, ": GPU ", options.gpu,
              " asked for; this machine has ", count, count == 1 ? " GPU" : " GPUs");
        use_gpu(options.gpu, rank);
        auto impl = std::make_unique<Impl>(rank, options.gpu);
        impl->create_streams(options.sm);
        if (options.emulate_link) impl->allocate_link_clock();
        return impl;
      }()),
      allocator_(*impl_) {
  if (options_.cupti) {
    std::array<CUstream_st*, kStreamCount> streams{};
    for (std::size_t lane = 0; lane < kStreamCount; ++lane) streams[lane] = impl_->streams[lane].stream;
    const SimTime epoch_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(impl_->epoch.host.time_since_epoch()).count();
    impl_->cupti = cuda::CuptiLink::attach(rank, streams, epoch_ns, why_no_cupti_);
  } else {
    why_no_cupti_ = "turned off for this run";
  }
  if (!impl_->cupti) cuda::warn_cupti_off(why_no_cupti_);
}

CudaDevice::~CudaDevice() {
  // A destructor cannot throw: a CUDA error here has been or will be reported by the rank's own calls.
  try {
    synchronize();
  } catch (const Error& e) {
    std::cerr << "fsdplab: rank " << rank_ << " cuda device: " << e.what() << "\n";
  }
  if (impl_->cupti) {
    // The last of CUPTI's records, after a flush of the synchronized device, reach the sinks before the link
    // detaches.
    std::vector<TraceEvent> events;
    impl_->cupti->finish(events);
    for (const TraceEvent& e : events) emit(e);
    impl_->cupti.reset();
  }
  if (allocator_.lost_blocks() != 0) {
    std::cerr << "fsdplab: rank " << rank_ << " cuda device: " << allocator_.lost_blocks()
              << " freed blocks were neither cached nor given back, the device having failed: "
              << allocator_.first_loss() << "\n";
  }
  if (allocator_.live_blocks() != 0) {
    std::cerr << "fsdplab: rank " << rank_ << " cuda device destroyed with " << allocator_.live_blocks()
              << " live allocations; free tensors before their device\n";
  }
}

// ---- time -------------------------------------------------------------------------------------------

SimTime CudaDevice::host_time() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(HostClock::now() - impl_->epoch.host).count();
}

SimTime CudaDevice::earliest_start(Lane, OpCategory, RankLink) const { return host_time(); }

bool CudaDevice::cupti_tracing() const { return impl_->cupti != nullptr; }

int CudaDevice::sm_count() const {
  if (impl_->sm_partition) return impl_->sm_partition->sm_count();
  int count = 0;
  check_cuda(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, options_.gpu), "rank ", rank_,
             ": reading GPU ", options_.gpu, "'s SM count");
  return count;
}

// A host wait as CUPTI will report it: on the host lane, named for what the host waited for.
TraceEvent CudaDevice::host_wait(std::string name) const {
  return TraceEvent{rank_, Lane::host, std::move(name), OpCategory::host, labels_.step, labels_.unit, labels_.phase,
                    0, 0, 0, 0, 0, {}};
}

// A copy between host and device memory that the host makes itself (on the legacy default stream, which is
// no lane's): the memcpy lane shows it.
TraceEvent CudaDevice::host_copy(std::string name, std::int64_t bytes) const {
  return TraceEvent{rank_, Lane::memcpy, std::move(name), OpCategory::memcpy, labels_.step, labels_.unit, labels_.phase,
                    0, 0, bytes, 0, 0, {}};
}

void CudaDevice::labels_changed() { impl_->nvtx.label(labels_); }

template <class Call>
void CudaDevice::traced(TraceEvent work, Call&& call) {
  cuda::CuptiLink* link = impl_->cupti.get();
  if (!link) {
    call();
    return;
  }
  const std::uint64_t tag = link->issue(std::move(work));
  try {
    const cuda::CuptiLink::Scope scope(link, tag);
    call();
  } catch (...) {
    link->retire(tag);
    throw;
  }
  link->retire(tag);
}

void CudaDevice::resolve_timings(bool wait) {
  Impl& m = *impl_;
  for (std::size_t lane = 0; lane < kStreamCount; ++lane) {
    std::deque<Impl::Timed>& queue = m.timed[lane];
    Impl::StreamState& stream = m.streams[lane];
    while (!queue.empty()) {
      Impl::Timed& t = queue.front();
      if (wait) {
        check_cuda(cudaEventSynchronize(t.end), "rank ", rank_, ": waiting for op '", t.trace.name, "' on stream ",
                   lane_name(t.trace.lane), " (a kernel fault shows here, at the first wait after it; run under "
                   "compute-sanitizer, or with CUDA_LAUNCH_BLOCKING=1, to name the kernel)");
      } else {
        const cudaError_t status = cudaEventQuery(t.end);
        if (status == cudaErrorNotReady) break;
        check_cuda(status, "rank ", rank_, ": op '", t.trace.name, "' on stream ", lane_name(t.trace.lane),
                   " (a kernel fault shows at the first query after it; run under compute-sanitizer, or with "
                   "CUDA_LAUNCH_BLOCKING=1, to name the kernel)");
      }
      t.trace.begin = stream.last_end ? stream.last_end_time + m.elapsed(stream.last_end, t.start, t.trace.name)
                                      : m.elapsed(m.epoch.event, t.start, t.trace.name);
      t.trace.end = t.trace.begin + m.elapsed(t.start, t.end, t.trace.name);
      if (keep_op_log_) {
        auto it = std::lower_bound(ops_.begin(), ops_.end(), t.trace.op,
                                   [](const OpRecord& r, OpId id) { return r.id < id; });
        if (it != ops_.end() && it->id == t.trace.op) {
          it->begin = t.trace.begin;
          it->end = t.trace.end;
        }
      }
      if (m.cupti) {
        m.cupti->retire(t.tag, std::pair{t.trace.begin, t.trace.end});  // the sinks get its kernels from CUPTI
      } else {
        emit(t.trace);
      }
      m.spare_timing_events.push_back(t.start);
      if (stream.last_end) m.spare_timing_events.push_back(stream.last_end);
      stream.last_end = t.end;
      stream.last_end_time = t.trace.end;
      queue.pop_front();
    }
  }
  if (m.cupti) {
    std::vector<TraceEvent> events;
    m.cupti->drain(events);
    for (const TraceEvent& e : events) emit(e);
  }
}

// ---- ops --------------------------------------------------------------------------------------------

OpId CudaDevice::launch(Lane lane, OpSpec spec, const OpBody& body) {
  use_gpu(options_.gpu, rank_);
  const OpId id = next_op_++;
  const SimTime issued = host_time();
  if (lane == Lane::host) {
    // CPU work on pinned memory (an offloaded optimizer step): it runs now, on this thread.
    check(static_cast<bool>(body.host), "rank ", rank_, ": op '", spec.name,
          "' has no host body to run on the host lane");
    body.host();
    const SimTime end = host_time();
    TraceEvent trace{rank_, Lane::host, spec.name, OpCategory::host, labels_.step, labels_.unit, labels_.phase,
                     issued, end, static_cast<std::int64_t>(spec.cost.bytes), spec.cost.flops, id, {}};
    if (keep_op_log_) {
      ops_.push_back(OpRecord{id, spec.name, spec.category, Lane::host, labels_, issued, issued, end, spec.cost,
                              spec.bytes_moved, {}, std::move(spec.reads), std::move(spec.writes)});
    }
    emit(trace);
    return id;
  }
  check(static_cast<bool>(body.cuda), "rank ", rank_, ": op '", spec.name,
        "' has no CUDA kernel; the cuda device cannot run it (it runs on the sim device)");
  Impl& m = *impl_;
  Impl::StreamState& s = m.streams[lane_index(lane)];
  const bool on_link = is_communication(spec.category);
  // One collective at a time per rank, whichever stream issues it, as on the sim device (sim_device.hpp).
  if (on_link && m.link_free)
    check_cuda(cudaStreamWaitEvent(s.stream, native(m.link_free), 0), "rank ", rank_, ": ordering '", spec.name,
               "' after the previous collective");
  const std::int64_t bytes = spec.bytes_moved > 0 ? spec.bytes_moved : static_cast<std::int64_t>(spec.cost.bytes);
  Impl::Timed timed;
  // Begin and end are the host's issue time until the op's events have completed (resolve_timings).
  timed.trace = TraceEvent{rank_, lane, spec.name, spec.category, labels_.step, labels_.unit, labels_.phase, issued,
                           issued, bytes, spec.cost.flops, id, s.pending_deps, spec.link};
  if (m.cupti) timed.tag = m.cupti->issue(timed.trace);
  timed.start = m.timing_event();
  timed.end = m.timing_event();
  LaunchingOp op{this, lane, m.sm_partition ? m.sm_partition->sm_count() : 0, {}};
  // The next collective waits for this event: it replaces the last one only once recorded.
  const auto free_the_link = [&] {
    std::shared_ptr<void> link_free = new_sync_event("the link");
    check_cuda(cudaEventRecord(native(link_free), s.stream), "rank ", rank_, ": op '", spec.name, "'");
    m.link_free = std::move(link_free);
  };
  // The emulated link holds the stream until its time has passed since the collective began, the copies running
  // inside that time as a link's bytes move within it: the collective takes the longer of the two. One clock word
  // per rank is enough: this stream waited above for the previous collective's link_free, recorded after that
  // one's hold read the word, and the next collective's clock waits for this one's link_free.
  const bool emulated = on_link && options_.emulate_link && spec.duration > 0;
  bool clock_started = false;
  try {
    check_cuda(cudaEventRecord(timed.start, s.stream), "recording its start");
    {
      // Everything the op enqueues (the emulated link's clock and hold included) is its work in CUPTI's records.
      const cuda::CuptiLink::Scope correlated(m.cupti.get(), timed.tag);
      if (emulated) {
        cuda::start_link_clock(s.stream, m.link_clock);
        clock_started = true;
      }
      const LaunchScope scope(op);
      body.cuda(s.stream);
      if (emulated) cuda::hold_link(s.stream, m.link_clock, spec.duration);
    }
    check_cuda(cudaEventRecord(timed.end, s.stream), "recording its end");
  } catch (const std::exception& e) {
    // The op never reaches the timing queue: its events go back to the pool (a rank may catch and go on).
    m.spare_timing_events.push_back(timed.start);
    m.spare_timing_events.push_back(timed.end);
    if (m.cupti) m.cupti->retire(timed.tag);
    // Its clock still writes the rank's word: the next collective's must come after it.
    if (clock_started) {
      try {
        free_the_link();
      } catch (const std::exception&) {
        // The op's own error is the one to report.
      }
    }
    fail("rank ", rank_, ", op '", spec.name, "' on stream ", lane_name(lane), ": ", e.what());
  }
  op.scratch.clear();  // freed at the end of the op's work on its stream, as every block is
  if (on_link) free_the_link();
  if (keep_op_log_) {
    ops_.push_back(OpRecord{id, std::move(spec.name), spec.category, lane, labels_, issued, issued, issued, spec.cost,
                            spec.bytes_moved, std::move(s.pending_deps), std::move(spec.reads),
                            std::move(spec.writes)});
  }
  s.pending_deps.clear();
  s.last_op = id;
  m.timed[lane_index(lane)].push_back(std::move(timed));
  resolve_timings(false);
  return id;
}

void CudaDevice::host_work(const std::string& name, SimTime duration) {
  check(duration >= 0, "rank ", rank_, ": host work '", name, "' of negative duration ", duration, " ns");
  const SimTime begin = host_time();
  while (host_time() - begin < duration) {
  }
  emit(TraceEvent{rank_, Lane::host, name, OpCategory::host, labels_.step, labels_.unit, labels_.phase, begin,
                  host_time(), 0, 0, 0, {}});
}

// ---- events -----------------------------------------------------------------------------------------

void CudaDevice::record(Event& event, Lane lane) {
  check(lane != Lane::host, "rank ", rank_, ": event '", event.name(),
        "' recorded on the host lane; record it on a stream");
  event.check_recorded_by(rank_);
  use_gpu(options_.gpu, rank_);
  const Impl::StreamState& s = impl_->streams[lane_index(lane)];
  std::shared_ptr<void> native_event = new_sync_event(event.name().c_str());
  check_cuda(cudaEventRecord(native(native_event), s.stream), "rank ", rank_, ": recording event '", event.name(),
             "' on ", lane_name(lane));
  event.native = std::move(native_event);
  event.recorded_ = true;
  event.time_ = host_time();
  event.rank_ = rank_;
  event.lane_ = lane;
  event.last_op = {rank_, s.last_op};
  event.clock = {};
}

void* CudaDevice::native_event(const Event& event, const char* use) const {
  check(event.recorded(), "rank ", rank_, ": ", use, " event '", event.name(),
        "', which was never recorded; record it on the producing stream first");
  check(event.native != nullptr, "rank ", rank_, ": ", use, " event '", event.name(), "' recorded by rank ",
        event.rank(), "'s sim device; a cuda device waits only for events of cuda devices");
  return event.native.get();
}

void CudaDevice::wait(Lane lane, const Event& event) {
  check(lane != Lane::host, "rank ", rank_, ": the host lane waits with synchronize(), not wait()");
  Impl::StreamState& s = impl_->streams[lane_index(lane)];
  check_cuda(cudaStreamWaitEvent(s.stream, static_cast<cudaEvent_t>(native_event(event, "stream waits on")), 0),
             "rank ", rank_, ": stream ", lane_name(lane), " waiting on event '", event.name(), "'");
  if (event.last_op.op != 0) s.pending_deps.push_back(event.last_op);
}

void CudaDevice::synchronize(const Event& event) {
  const auto native = static_cast<cudaEvent_t>(native_event(event, "the host waits on"));
  traced(host_wait("wait for event '" + event.name() + "'"), [&] {
    check_cuda(cudaEventSynchronize(native), "rank ", rank_, ": the host waiting on event '", event.name(), "'");
  });
  resolve_timings(false);
}

void CudaDevice::synchronize(Lane lane) {
  check(lane != Lane::host, "rank ", rank_, ": the host lane is not a stream");
  traced(host_wait("synchronize " + std::string(lane_name(lane))), [&] {
    check_cuda(cudaStreamSynchronize(impl_->stream(lane)), "rank ", rank_, ": the host waiting for stream ",
               lane_name(lane));
  });
  resolve_timings(false);
}

void CudaDevice::synchronize() {
  use_gpu(options_.gpu, rank_);
  traced(host_wait("synchronize"), [&] {
    for (Lane lane : kAllLanes)
      if (lane != Lane::host)
        check_cuda(cudaStreamSynchronize(impl_->stream(lane)), "rank ", rank_, ": the host waiting for stream ",
                   lane_name(lane));
  });
  resolve_timings(true);
}

bool CudaDevice::completed(const Event& event) {
  const cudaError_t status =
      cudaEventQuery(static_cast<cudaEvent_t>(native_event(event, "asked whether it completed:")));
  if (status == cudaErrorNotReady) return false;
  check_cuda(status, "rank ", rank_, ": asking whether event '", event.name(), "' completed");
  return true;
}

// ---- memory -----------------------------------------------------------------------------------------

Allocation CudaDevice::allocate(std::int64_t bytes, MemTag tag, Lane stream) {
  check(bytes >= 0, "rank ", rank_, ": allocation of ", bytes, " bytes tagged ", mem_tag_name(tag),
        "; expected a size >= 0");
  use_gpu(options_.gpu, rank_);
  Block* block = allocator_.take(bytes, tag, stream);
  const bool host = stream == Lane::host;
  if (!block) {
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) cudaGetLastError();  // not the next op's error
    std::string during;
    if (!labels_.phase.empty()) during += " during " + labels_.phase;
    if (labels_.unit >= 0) during += " of unit " + std::to_string(labels_.unit);
    if (labels_.step >= 0) during += " in step " + std::to_string(labels_.step);
    fail("rank ", rank_, ": out of ", host ? "pinned host memory" : "GPU memory", " allocating ", format_bytes(bytes),
         " tagged ", mem_tag_name(tag), during, ": GPU ", options_.gpu, " has ",
         format_bytes(static_cast<std::int64_t>(free_bytes)), " free of ",
         format_bytes(static_cast<std::int64_t>(total_bytes)), "; this rank holds ", format_bytes(ledger_.live_total()),
         " live and ", format_bytes(allocator_.reserved_bytes()),
         " reserved (its cache was given back and the allocation retried)");
  }
  MemoryLedger& ledger = host ? host_ledger_ : ledger_;
  ledger.on_alloc(tag, bytes, host_time());
  if (!host) emit_memory(tag);
  return Allocation(this, block);
}

void CudaDevice::free(Block* block) {
  // A tensor's destructor calls this, maybe on another thread than the rank's (the dashboard's), maybe while an
  // error unwinds the stack: it must not throw (caching_allocator.hpp), and the free's mark is recorded on this
  // rank's GPU. Where that GPU cannot be selected, the mark fails and the allocator loses the block.
  if (select_gpu(options_.gpu) != cudaSuccess) cudaGetLastError();
  const bool host = block->stream == Lane::host;
  (host ? host_ledger_ : ledger_).on_free(block->tag, block->bytes, host_time());
  const MemTag tag = block->tag;
  allocator_.put(block);
  if (!host) emit_memory(tag);
}

void CudaDevice::emit_memory(MemTag tag) {
  if (!sinks_.empty()) emit(CounterSample{rank_, host_time(), tag, ledger_.live(tag), ledger_.live_total()});
}

Block& CudaDevice::live_block_of(const Access& access, const std::string& what, const char* verb) {
  Block* block = allocator_.find(access.block);
  check(block != nullptr && block->live && block->generation == access.generation, "rank ", rank_, ": ", what,
        " of buffer #", access.block, ", which is not live (freed, or handed out again since)");
  check(access.offset >= 0 && access.offset + access.bytes <= block->bytes, "rank ", rank_, ": ", what, " ", verb,
        " bytes [", access.offset, ", ", access.offset + access.bytes, ") of a ", block->bytes, "-byte buffer");
  return *block;
}

void CudaDevice::host_read(const Access& access, std::byte* to, const std::string& what) {
  const Block* block = &live_block_of(access, what, "reads");
  if (access.bytes == 0) return;
  if (block->stream == Lane::host) {
    std::memcpy(to, block->data + access.offset, static_cast<std::size_t>(access.bytes));
    return;
  }
  use_gpu(options_.gpu, rank_);
  // Synchronous, and ordered after nothing on this device's non-blocking streams: the caller has waited for
  // the work that wrote the range, as on the sim device, whose race detector checks it.
  traced(host_copy("host read: " + what, access.bytes), [&] {
    check_cuda(cudaMemcpy(to, block->data + access.offset, static_cast<std::size_t>(access.bytes),
                          cudaMemcpyDeviceToHost),
               "rank ", rank_, ": ", what);
  });
}

void CudaDevice::host_write(const Access& access, const std::byte* from, const std::string& what) {
  Block* block = &live_block_of(access, what, "writes");
  if (access.bytes == 0) return;
  if (block->stream == Lane::host) {
    std::memcpy(block->data + access.offset, from, static_cast<std::size_t>(access.bytes));
    return;
  }
  use_gpu(options_.gpu, rank_);
  // The block may come from the caching allocator with its previous user's work still queued: reuse is
  // made safe for the block's stream (it runs in order, or was made to wait for the old stream's free),
  // not for the host. A write from here must wait for that stream, or the old work's late writes land on
  // top of it. (Under compute-sanitizer's racecheck, which slows kernels, an all-reduce's scratch handed to
  // a test's next input turned the input into the all-reduce's sum.)
  traced(host_copy("host write: " + what, access.bytes), [&] {
    check_cuda(cudaStreamSynchronize(impl_->stream(block->stream)), "rank ", rank_, ": ", what,
               " (waiting for the block's earlier work on the ", lane_name(block->stream), " stream)");
    // From pageable memory cudaMemcpy may return once the bytes are staged, before they reach the device,
    // and on the legacy default stream, which this device's non-blocking streams do not wait for: waiting
    // for that stream makes the write complete before any kernel launched after it can read the range.
    check_cuda(cudaMemcpy(block->data + access.offset, from, static_cast<std::size_t>(access.bytes),
                          cudaMemcpyHostToDevice),
               "rank ", rank_, ": ", what);
    check_cuda(cudaStreamSynchronize(nullptr), "rank ", rank_, ": ", what, " (waiting for the copy to land)");
  });
}

}  // namespace fsdplab
