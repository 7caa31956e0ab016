// gpu_activity.hpp — a GPU profiler's activity records turned into TraceEvents, with no CUDA in sight:
// the part of live CUPTI tracing (engine/cuda/cupti_tracer.hpp) that any machine can run and test.
//
// The tracer reads CUPTI's buffers into GpuRecords (a kernel, a copy, a memset, a host wait) and
// external correlations (which CUDA call ran under which of our ids). Two stages follow:
//   GpuRecordRouter    (the tracer's, behind its lock) finds the source, i.e. the device, a record belongs
//                      to: by the external id its device pushed around the CUDA calls that made it, else by
//                      the stream it ran on. A record whose correlation has not come yet waits for it a while
//                      (an NCCL kernel, which gets none, does not: [Note: NCCL's kernels go by their stream]).
//   GpuActivityMapper  (each device's, on the device's own thread, since trace sinks are single-producer)
//                      makes the TraceEvent: the rank, the lane of its stream, the op it came from (name of
//                      the kernel, category, step, unit, phase, op id and deps of the op), times on the
//                      device's clock.
// An external id packs the source and a tag the source numbers its work with, so a record names its device
// even when it ran on a stream the device does not own (NCCL may launch on its own).
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/trace/trace_event.hpp"

namespace fsdplab {

enum class GpuRecordKind { kernel, memcpy, memset, host_wait };

// One activity record, as CUPTI gives it, without CUPTI's types.
struct GpuRecord {
  GpuRecordKind kind = GpuRecordKind::kernel;
  // What the trace calls it: a kernel's display name (kernel_display_name), "Memcpy HtoD", "Memset", or the
  // CUDA call a host wait was ("cudaStreamSynchronize"). The text must outlive the record: the tracer keeps
  // kernel names for the life of the process, the others are literals.
  std::string_view name;
  std::uint32_t device = 0;       // CUPTI's device id
  std::uint32_t stream = 0;       // CUPTI's stream id (host waits: not used)
  std::uint32_t correlation = 0;  // the CUDA API call that issued it
  std::uint64_t start = 0;        // CUPTI's clock, ns
  std::uint64_t end = 0;
  std::int64_t bytes = 0;         // copies and memsets
};

// A kernel name as a timeline shows it: demangled, without return type, parameters and namespaces
// ("fsdplab::cuda::fill_kernel<float>(float*, long, float)" reads "fill_kernel<float>"); a name that is not
// mangled (cuBLAS's sm90_xmma_gemm_...) stays as it is.
std::string kernel_display_name(std::string_view cupti_name);

// The collective an NCCL kernel runs, from its name (ncclDevKernel_AllGather_RING_LL: all_gather); nullopt for
// a kernel that is not NCCL's or whose name does not say (ncclDevKernel_Generic).
std::optional<OpCategory> nccl_collective(std::string_view kernel_name);
bool is_nccl_kernel(std::string_view kernel_name);

// The lane a record goes to when neither its stream nor its op says: collectives to their lanes, copies to
// the memcpy lane.
Lane lane_of(OpCategory category);

// External correlation ids: the source in the high bits, the tag (counted from 1 by the source) below.
constexpr int kExternalTagBits = 40;
constexpr std::uint64_t external_id(std::uint32_t source, std::uint64_t tag) {
  return (static_cast<std::uint64_t>(source) << kExternalTagBits) | tag;
}
constexpr std::uint32_t external_source(std::uint64_t id) { return static_cast<std::uint32_t>(id >> kExternalTagBits); }
constexpr std::uint64_t external_tag(std::uint64_t id) { return id & ((std::uint64_t{1} << kExternalTagBits) - 1); }

// [Note: checking CUPTI's stream ids]
// A record routed by its stream alone (an NCCL kernel launched from NCCL's own thread) finds its device by the
// stream id CUPTI gave for each of the device's streams when it attached (cuptiGetStreamIdEx). Were those ids
// not the ones the records carry (streams made before CUPTI was enabled, a green context's), every such record
// would be orphaned, and the collectives would vanish from the trace: the first GPU run's symptom. So the device
// launches one tiny kernel on each of its streams right after attaching, under a probe tag that names the lane
// (probe_tag). The router takes such a record for what it is: the lane's stream id as the records carry it. It
// corrects the registration where it differs, counts the correction, and sends the probe nowhere.
constexpr std::uint64_t kProbeTagBase = std::uint64_t{1} << (kExternalTagBits - 1);  // a source's tags stay below
constexpr std::uint64_t probe_tag(Lane lane) { return kProbeTagBase + static_cast<std::uint64_t>(lane); }

// How many flushes (the tracer flushes every ~100 ms) a record waits for its correlation: about five seconds.
constexpr std::int64_t kRecordPatienceFlushes = 50;
// How long a device keeps the labels of finished work for records still to come: until both this many flushes have
// passed and this much later work has retired. A record that never gets a correlation (work launched from a thread that
// pushed no external id) reaches its device only after waiting the whole patience, counted from when its buffer came,
// which may be some flushes after its work finished: so the labels stay for twice the patience, and such a record still
// finds its op by its stream and span. NCCL's kernels do not wait: see [Note: NCCL's kernels go by their stream]. And a
// rank's buffer comes back only once full (cupti_tracer.cpp: about 750 ops), however long those ops take on the GPU: so
// the labels also stay for several buffers' worth of later ops.
constexpr std::int64_t kRetiredWorkFlushes = 2 * kRecordPatienceFlushes;
constexpr std::int64_t kRetiredWorkKept = 4096;
// How many of the latest tagged records the lead of CUPTI's clock is measured over ([Note: the two clocks of a
// record and a span]): a fraction of a GPT-2 step's records, so a drift between the two clocks is followed.
constexpr std::size_t kLeadSamples = 256;
// How many it takes before the lead is used: each sample is the lead less its op's gap between its start event
// and its first kernel, and a few ops may all have long gaps (on an H200, an op whose scratch needed a fresh
// cudaMalloc showed -117 ms alone).
constexpr std::int64_t kLeadSamplesBeforeUse = 32;

// [Note: NCCL's kernels go by their stream]
// A non-blocking NCCL communicator (the engine's, for its watchdog and abort) launches a collective's kernel
// from a thread of its own, where no external id was pushed, so no correlation ever names its op. Waiting the
// patience for one would put every collective on the live timeline seconds after the compute around it. So an
// NCCL kernel on a stream a device owns goes to that device at once, by its stream (GpuRecordRouter::add), and
// the device labels it with the op whose CUDA-event span on that stream holds it (GpuActivityMapper::map).
// Where that op has not retired yet (its end event not seen when the record came), the record waits for it in
// the mapper, up to the patience.

// A record and what the router found for it.
struct RoutedRecord {
  GpuRecord record;
  std::uint64_t tag = 0;            // the source's work it came from; 0: none known (routed by its stream)
  std::optional<Lane> stream_lane;  // the source's lane whose stream it ran on; none: a stream it does not own
};

class GpuRecordRouter {
 public:
  // `source` owns `stream` of CUPTI device `device` as `lane`. False when another source owned that id: CUPTI's
  // stream ids are unique within a context, and ranks sharing a GPU each have a green context of their own
  // (engine/cuda/sm_partition.hpp), so two ranks' streams could share one; the stream is then the newer
  // source's, and a record routed by it alone may reach the wrong rank.
  bool add_stream(std::uint32_t device, std::uint32_t stream, std::uint32_t source, Lane lane);
  void add_source(std::uint32_t source);
  // The source is gone: its streams are forgotten and later records of it are orphaned.
  void remove_source(std::uint32_t source);
  // CUDA call `correlation` ran under external id `id` (0 names no call: ignored).
  void add_correlation(std::uint32_t correlation, std::uint64_t id);
  // Routes the record by its correlation; one without it waits, except an NCCL kernel on a device's stream,
  // which goes by that stream at once ([Note: NCCL's kernels go by their stream]), and a host wait, which is no
  // device's (its correlation would have come in the same buffer) and is let go.
  void add(const GpuRecord& record);
  // A flush is done: waiting records whose correlation came go to their source; those that waited past the
  // patience go by their stream, or are orphaned (a host wait, which has none, is let go); correlations
  // older than the patience are forgotten.
  void end_flush();
  // Everything `source` issued has been delivered (its streams synchronized, then a forced flush): its
  // waiting records go now, by their stream.
  void settle(std::uint32_t source);
  // The records routed since the last call, per source.
  std::map<std::uint32_t, std::vector<RoutedRecord>> take_routed();
  // The tracing session is over (every source removed, a last forced flush read): device work still waiting
  // is orphaned now, and no record or correlation is kept, so the next session starts with nothing of this one.
  void end_session();

  std::int64_t orphaned() const { return orphaned_; }  // device work no source could be found for
  // Stream ids the probes showed registered wrong, and corrected ([Note: checking CUPTI's stream ids]).
  std::int64_t restreamed() const { return restreamed_; }
  std::size_t waiting() const { return waiting_.size(); }

 private:
  struct StreamOwner {
    std::uint32_t source = 0;
    Lane lane = Lane::compute;
  };
  struct Waiting {
    GpuRecord record;
    std::int64_t since = 0;  // the flush count when it came
  };
  static std::uint64_t stream_key(std::uint32_t device, std::uint32_t stream) {
    return (static_cast<std::uint64_t>(device) << 32) | stream;
  }
  std::optional<std::uint64_t> correlated(std::uint32_t correlation) const;
  std::optional<Lane> lane_in(std::uint32_t source, const GpuRecord& record) const;
  // Routes by correlation, or by stream when `by_stream`; false when neither finds a source.
  bool route(const GpuRecord& record, bool by_stream);
  // Whether external id `id` is a probe's; its record then corrects its lane's stream id where that differs.
  bool took_probe(std::uint64_t id, const GpuRecord& record);

  std::unordered_map<std::uint64_t, StreamOwner> streams_;
  std::vector<std::uint32_t> sources_;
  // Two generations, swapped every half patience: a correlation is kept for half to all of the patience.
  std::unordered_map<std::uint32_t, std::uint64_t> recent_, older_;
  std::deque<Waiting> waiting_;
  std::map<std::uint32_t, std::vector<RoutedRecord>> routed_;
  std::int64_t flushes_ = 0;
  std::int64_t orphaned_ = 0;
  std::int64_t restreamed_ = 0;
};

class GpuActivityMapper {
 public:
  // `zero`: the profiler's timestamp of the device's time zero (its records' times minus it are the device's).
  GpuActivityMapper(int rank, std::int64_t zero) : rank_(rank), zero_(zero) {}

  // Work the device is about to issue: the TraceEvent it stands for (an op's span with its labels, op id and
  // deps; or host work, on the host lane). Returns its tag, to push as the external id with external_id().
  std::uint64_t issue(TraceEvent work);
  // The work's CUDA calls are done (an op's end event passed, a host call returned) at flush count `flush`:
  // its records may still come for kRetiredWorkFlushes flushes and kRetiredWorkKept retirements, after which
  // it is forgotten. An op that ran on a stream gives its span there, from its CUDA events (device time): see
  // map().
  void retire(std::uint64_t tag, std::int64_t flush, std::optional<std::pair<SimTime, SimTime>> span = std::nullopt);
  // Appends the trace events of `records` to `out`, in time order; forgets work retired long enough ago (see
  // kRetiredWorkKept). A record that came without its work's tag but on one of the device's streams (launched
  // on a thread that pushed no external id, as NCCL's may be) belongs to the op whose CUDA-event span on that
  // stream holds the record's midpoint: a stream runs its work in order, so at most one does. See [Note: the
  // two clocks of a record and a span]. An NCCL kernel, which the router sends at once, that lies after every
  // retired span on its stream may have come before its op retired: it waits for it, up to
  // kRecordPatienceFlushes, and goes out with a later call ([Note: NCCL's kernels go by their stream]).
  void map(std::span<const RoutedRecord> records, std::int64_t flush, std::vector<TraceEvent>& out);
  // The device has retired all its work: the records still waiting for an op's span go out, labelled where
  // one holds them.
  void finish(std::vector<TraceEvent>& out);

  std::int64_t events() const { return events_; }          // trace events made
  std::int64_t unlabelled() const { return unlabelled_; }  // of which no work was known (or no longer)
  std::int64_t found_by_span() const { return found_by_span_; }  // labelled by their stream and time alone
  // [Note: the two clocks of a record and a span]; nullopt before kLeadSamplesBeforeUse records measured it.
  std::optional<SimTime> record_lead() const {
    if (lead_samples_ < kLeadSamplesBeforeUse) return std::nullopt;
    return lead_window_.front().second;
  }
  int rank() const { return rank_; }
  std::size_t known_work() const { return work_.size(); }
  std::size_t waiting() const { return waiting_.size(); }  // NCCL kernels waiting for their op's span

 private:
  struct Work {
    TraceEvent event;
    bool seen = false;          // a record of it was mapped: the op's deps, bytes and FLOPs went with that one
    std::int64_t retired = -1;  // the flush count when retired; -1 while its calls may still be running
    std::int64_t retirement = 0;  // how many pieces of work had retired before it
    std::optional<std::pair<SimTime, SimTime>> span;  // its CUDA-event span on its stream, once retired
  };
  struct Waiting {
    RoutedRecord routed;
    std::int64_t since = 0;  // the flush count when it came
  };
  // Per stream lane, the retired ops' spans: begin -> (end, tag).
  using Spans = std::map<SimTime, std::pair<SimTime, std::uint64_t>>;
  // Where a record ran: its stream lane's spans and its midpoint on the device's clock.
  struct StreamPoint {
    const Spans* spans = nullptr;
    SimTime middle = 0;
  };
  TraceEvent to_event(const RoutedRecord& routed, Work* work) const;
  // None for a host wait or a record on no lane of the device.
  std::optional<StreamPoint> stream_point(const RoutedRecord& routed) const;
  Work* work_in_span(const RoutedRecord& routed);
  // Whether the record lies after every retired span on its stream's lane: its op may retire yet.
  bool after_retired_spans(const RoutedRecord& routed) const;
  // Adds to lead_window_ the lead a record shows that carries its op's tag and ran on the op's stream.
  void learn_lead(const RoutedRecord& routed);
  // Appends the record's event, labelled by `work` (found by its span where `by_span`), and counts it.
  void add_event(const RoutedRecord& routed, Work* work, bool by_span, std::vector<TraceEvent>& out);

  int rank_;
  std::int64_t zero_;
  std::uint64_t next_tag_ = 1;
  std::unordered_map<std::uint64_t, Work> work_;
  std::array<Spans, kStreamCount> spans_;
  std::deque<Waiting> waiting_;  // NCCL kernels whose op has not retired yet
  std::int64_t pruned_at_ = -1;  // the flush count of the last forgetting
  std::int64_t retirements_ = 0;
  // The latest kLeadSamples measurements, as (index, value) with values decreasing, so the front is the largest
  // of those still in the window (a sliding maximum).
  std::deque<std::pair<std::int64_t, SimTime>> lead_window_;
  std::int64_t lead_samples_ = 0;
  std::int64_t events_ = 0;
  std::int64_t unlabelled_ = 0;
  std::int64_t found_by_span_ = 0;
};

}  // namespace fsdplab
