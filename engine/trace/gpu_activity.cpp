// gpu_activity.cpp — routing activity records to their device and mapping them onto its trace.
#include "engine/trace/gpu_activity.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <utility>

namespace fsdplab {

std::string kernel_display_name(std::string_view cupti_name) {
  if (cupti_name.empty()) return "kernel";
  std::string name(cupti_name);
  if (name.starts_with("_Z")) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
    if (status == 0 && demangled != nullptr) name = demangled;
    std::free(demangled);
  }
  // The parameter list is the last parenthesised group; "(anonymous namespace)" may come before it.
  if (name.back() == ')') {
    int depth = 0;
    for (std::size_t i = name.size(); i-- > 0;) {
      if (name[i] == ')') {
        ++depth;
      } else if (name[i] == '(' && --depth == 0) {
        name.resize(i);
        break;
      }
    }
  }
  // A template's return type ("void ") and the namespaces end at the last space or "::" outside the template
  // arguments, which keep theirs: fill_kernel<float>, Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nn_align1>.
  std::size_t cut = 0;
  int angle = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (c == '<') {
      ++angle;
    } else if (c == '>') {
      --angle;
    } else if (angle == 0 && c == ' ') {
      cut = i + 1;
    } else if (angle == 0 && c == ':' && i + 1 < name.size() && name[i + 1] == ':') {
      cut = i + 2;
      ++i;
    }
  }
  return cut < name.size() ? name.substr(cut) : name;
}

bool is_nccl_kernel(std::string_view kernel_name) {
  return kernel_name.starts_with("ncclDevKernel_") || kernel_name.starts_with("ncclKernel_");
}

std::optional<OpCategory> nccl_collective(std::string_view kernel_name) {
  if (!is_nccl_kernel(kernel_name)) return std::nullopt;
  const std::string_view collective = kernel_name.substr(kernel_name.find('_') + 1);
  // NCCL's Reduce, SendRecv and Generic kernels are not FSDP's collectives, or do not say which: nullopt.
  constexpr std::array<std::pair<std::string_view, OpCategory>, 4> names = {{
      {"AllGather", OpCategory::all_gather},
      {"ReduceScatter", OpCategory::reduce_scatter},
      {"AllReduce", OpCategory::all_reduce},
      {"Broadcast", OpCategory::broadcast},
  }};
  for (const auto& [name, category] : names)
    if (collective.starts_with(name)) return category;
  return std::nullopt;
}

Lane lane_of(OpCategory category) {
  switch (category) {
    case OpCategory::all_gather:
    case OpCategory::broadcast: return Lane::all_gather;
    case OpCategory::reduce_scatter:
    case OpCategory::all_reduce: return Lane::reduce_scatter;
    case OpCategory::memcpy: return Lane::memcpy;
    case OpCategory::host: return Lane::host;
    case OpCategory::compute: break;
  }
  return Lane::compute;
}

// ---- what the router and the mapper share ----------------------------------------------------------

namespace {

// An NCCL kernel: no correlation will come for it, so it goes by its stream at once, and may reach its device
// before its op retired ([Note: NCCL's kernels go by their stream]).
bool goes_by_stream_at_once(const GpuRecord& record) {
  return record.kind == GpuRecordKind::kernel && is_nccl_kernel(record.name);
}

// The events appended from `from` on, in time order.
void sort_by_begin(std::vector<TraceEvent>& out, std::size_t from) {
  std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(from), out.end(),
                   [](const TraceEvent& a, const TraceEvent& b) { return a.begin < b.begin; });
}

}  // namespace

// ---- GpuRecordRouter ---------------------------------------------------------------------------------

void GpuRecordRouter::add_source(std::uint32_t source) {
  if (std::find(sources_.begin(), sources_.end(), source) == sources_.end()) sources_.push_back(source);
}

bool GpuRecordRouter::add_stream(std::uint32_t device, std::uint32_t stream, std::uint32_t source, Lane lane) {
  add_source(source);
  StreamOwner& owner = streams_[stream_key(device, stream)];
  const bool shared = owner.source != 0 && owner.source != source;
  owner = StreamOwner{source, lane};
  return !shared;
}

void GpuRecordRouter::remove_source(std::uint32_t source) {
  std::erase(sources_, source);
  std::erase_if(streams_, [&](const auto& entry) { return entry.second.source == source; });
  if (const auto it = routed_.find(source); it != routed_.end()) {
    for (const RoutedRecord& r : it->second)
      if (r.record.kind != GpuRecordKind::host_wait) ++orphaned_;
    routed_.erase(it);
  }
}

// Correlation id 0 is no call's: records made outside any API call may carry it, and must not all be taken
// for one op's.
void GpuRecordRouter::add_correlation(std::uint32_t correlation, std::uint64_t id) {
  if (correlation != 0) recent_[correlation] = id;
}

std::optional<std::uint64_t> GpuRecordRouter::correlated(std::uint32_t correlation) const {
  if (correlation == 0) return std::nullopt;
  if (const auto it = recent_.find(correlation); it != recent_.end()) return it->second;
  if (const auto it = older_.find(correlation); it != older_.end()) return it->second;
  return std::nullopt;
}

std::optional<Lane> GpuRecordRouter::lane_in(std::uint32_t source, const GpuRecord& record) const {
  if (record.kind == GpuRecordKind::host_wait) return std::nullopt;
  const auto it = streams_.find(stream_key(record.device, record.stream));
  if (it == streams_.end() || it->second.source != source) return std::nullopt;
  return it->second.lane;
}

bool GpuRecordRouter::took_probe(std::uint64_t id, const GpuRecord& record) {
  const std::uint64_t tag = external_tag(id);
  if (tag < kProbeTagBase) return false;
  const std::uint32_t source = external_source(id);
  if (tag - kProbeTagBase >= kStreamCount || record.kind == GpuRecordKind::host_wait ||
      std::find(sources_.begin(), sources_.end(), source) == sources_.end())
    return true;  // nothing to learn from it
  const auto lane = static_cast<Lane>(tag - kProbeTagBase);
  const std::uint64_t key = stream_key(record.device, record.stream);
  const auto is_the_lanes = [&](const StreamOwner& owner) { return owner.source == source && owner.lane == lane; };
  if (const auto it = streams_.find(key); it != streams_.end() && is_the_lanes(it->second)) return true;  // right
  ++restreamed_;
  std::erase_if(streams_, [&](const auto& entry) { return is_the_lanes(entry.second); });
  streams_[key] = StreamOwner{source, lane};
  return true;
}

bool GpuRecordRouter::route(const GpuRecord& record, bool by_stream) {
  if (const std::optional<std::uint64_t> id = correlated(record.correlation)) {
    if (took_probe(*id, record)) return true;
    const std::uint32_t source = external_source(*id);
    if (std::find(sources_.begin(), sources_.end(), source) != sources_.end()) {
      routed_[source].push_back(RoutedRecord{record, external_tag(*id), lane_in(source, record)});
    } else if (record.kind != GpuRecordKind::host_wait) {
      ++orphaned_;  // its device has gone
    }
    return true;
  }
  if (!by_stream || record.kind == GpuRecordKind::host_wait) return false;
  const auto it = streams_.find(stream_key(record.device, record.stream));
  if (it == streams_.end()) return false;
  routed_[it->second.source].push_back(RoutedRecord{record, 0, it->second.lane});
  return true;
}

void GpuRecordRouter::add(const GpuRecord& record) {
  if (route(record, goes_by_stream_at_once(record))) return;
  // A host wait a device traced has its correlation beside it, in its own buffer, which the tracer reads first:
  // one without is another caller's (an event query that found its work done, cuBLAS's own waits). It is let go
  // now, not kept and scanned at every flush for the whole patience.
  if (record.kind == GpuRecordKind::host_wait) return;
  waiting_.push_back(Waiting{record, flushes_});
}

void GpuRecordRouter::end_flush() {
  ++flushes_;
  std::erase_if(waiting_, [&](const Waiting& w) {
    const bool patience_over = flushes_ - w.since >= kRecordPatienceFlushes;
    if (route(w.record, patience_over)) return true;
    if (!patience_over) return false;
    // No device owns it: device work is counted; a host wait outside the devices' own calls (an event query
    // of other code) is simply not traced.
    if (w.record.kind != GpuRecordKind::host_wait) ++orphaned_;
    return true;
  });
  if (flushes_ % (kRecordPatienceFlushes / 2) == 0) {
    older_ = std::move(recent_);
    recent_.clear();
  }
}

void GpuRecordRouter::settle(std::uint32_t source) {
  std::erase_if(waiting_, [&](const Waiting& w) {
    if (route(w.record, false)) return true;
    const bool owned = lane_in(source, w.record).has_value();
    return owned && route(w.record, true);
  });
}

std::map<std::uint32_t, std::vector<RoutedRecord>> GpuRecordRouter::take_routed() { return std::exchange(routed_, {}); }

void GpuRecordRouter::end_session() {
  for (const Waiting& w : waiting_)
    if (w.record.kind != GpuRecordKind::host_wait) ++orphaned_;
  waiting_.clear();
  for (const auto& [source, records] : routed_)
    for (const RoutedRecord& r : records)
      if (r.record.kind != GpuRecordKind::host_wait) ++orphaned_;
  routed_.clear();
  recent_.clear();
  older_.clear();
  streams_.clear();
  sources_.clear();
}

// ---- GpuActivityMapper -------------------------------------------------------------------------------

// [Note: the two clocks of a record and a span]
// An op's span comes from its CUDA events, timed on the GPU from the epoch's event (cuda_device.cpp). A record's
// times are CUPTI's, on the host's steady clock, minus the device's zero: the moment the host *saw* the epoch's
// event complete, which is later than the GPU completed it by however long the host took to notice (plus CUPTI's
// own error in converting GPU timestamps to host time). So a record reads earlier than its op's span by that
// lead (the tracer's report at the end of a session prints it), and a collective's kernel shorter than about
// twice the lead would have its midpoint before its op's span: placed in the op before it, or in none. The lead
// is measured, not guessed.
// A record that carries its op's tag and ran on the op's stream started no earlier than the op's start event,
// so (span begin - record start) is at most the lead; the largest such value is the lead to within the
// shortest gap between an op's start event and its first kernel (about a microsecond), and never more than it.
// The two clocks are different oscillators, the GPU's and the host's, so the lead drifts as a run goes on: it is
// the largest over the latest kLeadSamples records, not over the run, and used once kLeadSamplesBeforeUse have
// come. (A host-to-host copy is timed on neither GPU clock, and teaches nothing.) A record is placed in a span at
// its time plus the lead. Its own times in the trace stay as CUPTI gave them: on the host's clock, as the
// device's host-lane events are. Measured on one H200 (fsdplab at b5f44a2, gpt2 124M): 66 us in a one-rank
// run, and 94 us then 170 us in two runs a few seconds apart in one process: not a constant, and longer than
// many a collective's kernel.

std::uint64_t GpuActivityMapper::issue(TraceEvent work) {
  const std::uint64_t tag = next_tag_++;
  work_.emplace(tag, Work{std::move(work)});
  return tag;
}

void GpuActivityMapper::retire(std::uint64_t tag, std::int64_t flush, std::optional<std::pair<SimTime, SimTime>> span) {
  const auto it = work_.find(tag);
  if (it == work_.end()) return;
  Work& work = it->second;
  work.retired = flush;
  work.retirement = retirements_++;
  const auto lane = static_cast<std::size_t>(work.event.lane);
  if (span && lane < kStreamCount && span->second >= span->first) {
    spans_[lane][span->first] = {span->second, tag};
    work.span = span;
  }
}

void GpuActivityMapper::learn_lead(const RoutedRecord& routed) {
  const GpuRecord& r = routed.record;
  if (routed.tag == 0 || r.kind == GpuRecordKind::host_wait || r.name == "Memcpy HtoH") return;
  const auto it = work_.find(routed.tag);
  if (it == work_.end() || !it->second.span || routed.stream_lane != it->second.event.lane) return;
  const SimTime sample = it->second.span->first - (static_cast<SimTime>(r.start) - zero_);
  const std::int64_t index = lead_samples_++;
  while (!lead_window_.empty() && lead_window_.back().second <= sample) lead_window_.pop_back();
  lead_window_.emplace_back(index, sample);
  while (lead_window_.front().first + static_cast<std::int64_t>(kLeadSamples) <= index) lead_window_.pop_front();
}

std::optional<GpuActivityMapper::StreamPoint> GpuActivityMapper::stream_point(const RoutedRecord& routed) const {
  if (!routed.stream_lane || routed.record.kind == GpuRecordKind::host_wait) return std::nullopt;
  const auto lane = static_cast<std::size_t>(*routed.stream_lane);
  if (lane >= kStreamCount) return std::nullopt;
  const GpuRecord& r = routed.record;
  const SimTime middle = static_cast<SimTime>(r.start + (std::max(r.end, r.start) - r.start) / 2) - zero_;
  // See [Note: the two clocks of a record and a span].
  return StreamPoint{&spans_[lane], middle + record_lead().value_or(0)};
}

GpuActivityMapper::Work* GpuActivityMapper::work_in_span(const RoutedRecord& routed) {
  const std::optional<StreamPoint> at = stream_point(routed);
  if (!at) return nullptr;
  auto after = at->spans->upper_bound(at->middle);
  if (after == at->spans->begin()) return nullptr;
  const auto& [end, tag] = std::prev(after)->second;
  if (at->middle > end) return nullptr;
  const auto it = work_.find(tag);
  return it == work_.end() ? nullptr : &it->second;
}

bool GpuActivityMapper::after_retired_spans(const RoutedRecord& routed) const {
  const std::optional<StreamPoint> at = stream_point(routed);
  return at && (at->spans->empty() || at->middle > at->spans->rbegin()->second.first);
}

TraceEvent GpuActivityMapper::to_event(const RoutedRecord& routed, Work* work) const {
  const GpuRecord& r = routed.record;
  TraceEvent e;
  e.rank = rank_;
  e.begin = static_cast<SimTime>(r.start) - zero_;
  e.end = static_cast<SimTime>(std::max(r.end, r.start)) - zero_;
  if (work) {
    e.step = work->event.step;
    e.unit = work->event.unit;
    e.phase = work->event.phase;
    e.link = work->event.link;
  }
  if (r.kind == GpuRecordKind::host_wait) {  // a host marker: no op of its own, so no op id to find it by
    e.lane = Lane::host;
    e.category = OpCategory::host;
    e.name = work ? work->event.name : std::string(r.name);
    return e;
  }
  const bool first = work != nullptr && !work->seen;
  if (work) {
    e.op = work->event.op;
    if (first) e.deps = work->event.deps;  // one arrow per dependency, drawn to the op's first record
  }
  e.name = std::string(r.name);
  if (r.kind == GpuRecordKind::kernel && is_nccl_kernel(r.name)) {
    // NCCL's kernels are collectives whatever launched them; the name says which, else the op does. Without
    // either (NCCL's generic kernel outside any op) it counts as an all-reduce, the general collective.
    const std::optional<OpCategory> named = nccl_collective(r.name);
    e.category = named ? *named
                 : work && is_communication(work->event.category) ? work->event.category
                                                                   : OpCategory::all_reduce;
  } else if (work) {
    e.category = work->event.category;  // a collective's copies and reductions are the collective's time
  } else {
    e.category = r.kind == GpuRecordKind::kernel ? OpCategory::compute : OpCategory::memcpy;
  }
  e.lane = routed.stream_lane ? *routed.stream_lane : work ? work->event.lane : lane_of(e.category);
  if (r.kind == GpuRecordKind::kernel) {
    // The op's figures go with its first record, so sums over the trace count each op once.
    e.bytes = first ? work->event.bytes : 0;
    e.flops = first ? work->event.flops : 0;
  } else {
    e.bytes = r.bytes;
  }
  return e;
}

void GpuActivityMapper::add_event(const RoutedRecord& routed, Work* work, bool by_span, std::vector<TraceEvent>& out) {
  if (work && by_span) ++found_by_span_;
  if (!work) ++unlabelled_;
  out.push_back(to_event(routed, work));
  if (work) work->seen = true;
  ++events_;
}

void GpuActivityMapper::map(std::span<const RoutedRecord> records, std::int64_t flush, std::vector<TraceEvent>& out) {
  const std::size_t from = out.size();
  for (const RoutedRecord& routed : records) learn_lead(routed);
  // Those that waited: out once their op's span holds them, or once the patience is over.
  std::erase_if(waiting_, [&](const Waiting& w) {
    Work* work = work_in_span(w.routed);
    if (!work && flush - w.since < kRecordPatienceFlushes) return false;
    add_event(w.routed, work, true, out);
    return true;
  });
  for (const RoutedRecord& routed : records) {
    Work* work = nullptr;
    if (routed.tag != 0) {
      if (const auto it = work_.find(routed.tag); it != work_.end()) work = &it->second;
    } else {
      work = work_in_span(routed);
      if (!work && goes_by_stream_at_once(routed.record) && after_retired_spans(routed)) {
        waiting_.push_back(Waiting{routed, flush});
        continue;
      }
    }
    add_event(routed, work, routed.tag == 0, out);
  }
  sort_by_begin(out, from);
  if (flush == pruned_at_) return;  // once per flush: a drain may come at every launch
  pruned_at_ = flush;
  std::erase_if(work_, [&](const auto& entry) {
    const Work& w = entry.second;
    return w.retired >= 0 && flush - w.retired > kRetiredWorkFlushes && retirements_ - w.retirement > kRetiredWorkKept;
  });
  for (auto& spans : spans_)
    std::erase_if(spans, [&](const auto& span) { return !work_.contains(span.second.second); });
}

void GpuActivityMapper::finish(std::vector<TraceEvent>& out) {
  const std::size_t from = out.size();
  for (const Waiting& w : waiting_) add_event(w.routed, work_in_span(w.routed), true, out);
  waiting_.clear();
  sort_by_begin(out, from);
}

}  // namespace fsdplab
