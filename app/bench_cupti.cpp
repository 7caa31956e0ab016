// `fsdplab bench --what cupti` — the same FSDP training step with CUPTI off and on, side by side in one run.
//
// The settings alternate (off, on, off, on), so both meet the same GPU clocks and heat; each run trains
// warmup + steps + 1 steps (the last not measured: bench_train.hpp), and a setting's step is the median of
// its measured steps over its runs.
//   step (ms)                the host's wall clock of a step (the step loop waits for the GPU at its end)
//   overlap % (CUPTI)        HTA's share of communication hidden under computation (engine/trace/trace_metrics.hpp)
//                            over the measured steps, the mean of the ranks', from what the trace sinks got:
//                            CUPTI's kernels and copies, each labelled by its op
//   overlap % (CUPTI ops)    the same from each op's span as CUPTI saw it: from its first record's start to its
//                            last record's end (records tied to their op by its labels)
//   overlap % (CUDA events)  the same from each op's CUDA-event span, of the same runs (the op log)
// The kernel figure is the GPU's truth; the two op figures measure the same thing two ways, and agree (goal:
// within 2 points) when every kernel and copy is tied to its op and the two clocks agree. An op's span is fatter
// than its kernels (the gaps between its launches count as its time), so the kernel figure may be lower.
//   records, dropped         what CUPTI delivered and dropped over the runs (engine/cuda/cupti_tracer.hpp)
// CUPTI on / off is the step's overhead; the goal is <= 1.03x. Where the two op figures differ, the lines after
// the table say which ops' spans differ: per kind of op (compute, communication), how much earlier an op's
// CUDA-event span begins than its first CUPTI record and how much later it ends than its last, and the widest
// ops. Whatever holds an op's kernels back once its stream has reached it is inside its event span and before
// its first record: with ranks sharing every SM (--sm-split off), the other rank's kernels that fill the GPU
// (engine/cuda/sm_partition.cpp).
#include "app/bench_cupti.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "app/median.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/trace/trace_metrics.hpp"
#include "engine/trace/trace_recorder.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/run_device.hpp"
#include "labs/student_tasks.hpp"

#if FSDPLAB_HAVE_CUDA
#include "engine/cuda/cupti_tracer.hpp"
#endif

namespace fsdplab::app {

CuptiTotals cupti_totals() {
#if FSDPLAB_HAVE_CUDA
  const cuda::CuptiCounts counts = cuda::cupti_counts();
  return {counts.records, counts.dropped};
#else
  fail("CUPTI's counts: this fsdplab was built without the CUDA backend");
#endif
}

namespace {

constexpr int kRounds = 2;

// One setting's runs: its measured steps, and each run's overlap from the sinks and from the op log.
struct Setting {
  std::vector<double> step_ms;
  std::vector<double> overlap_sinks;
  std::vector<double> overlap_cupti_ops;
  std::vector<double> overlap_op_log;
  CuptiTotals cupti;
  // The last traced run's op spans over its measured steps, both ways: CUDA events and CUPTI records.
  std::vector<TraceEvent> event_spans;
  std::vector<TraceEvent> record_spans;
};

// The events of the measured steps (the warm-up's left out).
std::vector<TraceEvent> measured_only(std::vector<TraceEvent> events, const TrainBenchOptions& bench) {
  std::erase_if(events, [&](const TraceEvent& e) { return !bench.measured(e.step); });
  return events;
}

// The mean over ranks of the overlap %, over the events of the measured steps.
double overlap_percent(std::vector<TraceEvent> events, const TrainBenchOptions& bench) {
  events = measured_only(std::move(events), bench);
  const std::vector<OverlapMetrics> ranks = metrics_per_rank(events);
  if (ranks.empty()) return 0;
  double sum = 0;
  for (const OverlapMetrics& m : ranks) sum += m.overlap_percent();
  return sum / static_cast<double>(ranks.size());
}

// Each op's span from its CUPTI records: the first record's start to the last one's end, on the op's lane.
std::vector<TraceEvent> op_spans_from_records(const std::vector<TraceEvent>& records) {
  std::map<std::pair<int, OpId>, TraceEvent> spans;
  for (const TraceEvent& e : records) {
    if (e.op == 0 || e.lane == Lane::host) continue;
    const auto [it, first] = spans.try_emplace({e.rank, e.op}, e);
    if (first) continue;
    it->second.begin = std::min(it->second.begin, e.begin);
    it->second.end = std::max(it->second.end, e.end);
  }
  std::vector<TraceEvent> out;
  for (auto& [key, span] : spans) out.push_back(std::move(span));
  return out;
}

TraceEvent span_of(int rank, const OpRecord& op) {
  return TraceEvent{rank,       op.lane,   op.name,        op.category, op.labels.step, op.labels.unit,
                    op.labels.phase, op.begin, op.end, op.bytes_moved, op.cost.flops, op.id, op.deps};
}

void train_once(const TrainBenchOptions& bench, RunConfig run, bool cupti, Setting& setting) {
  run.cupti = cupti;
  FsdpRun fsdp;
  fsdp.run = run;
  fsdp.options = bench.async_fsdp_options();
  fsdp.tasks = tasks_for(bench.impl);
  fsdp.keep_op_log = true;  // the CUDA-event spans, whichever the sinks get
  std::vector<TraceRecorder> recorders(static_cast<std::size_t>(run.world));
  for (TraceRecorder& r : recorders) fsdp.sinks.push_back(&r);
  std::mutex spans_mutex;
  std::vector<TraceEvent> spans;
  fsdp.on_rank_done = [&](int rank, Device& device) {
    std::vector<TraceEvent> mine;
    for (const OpRecord& op : device.ops()) mine.push_back(span_of(rank, op));
    std::lock_guard lock(spans_mutex);
    spans.insert(spans.end(), mine.begin(), mine.end());
  };
  const CuptiTotals before = cupti_totals();
  const std::vector<StepReport> reports = train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
  const CuptiTotals after = cupti_totals();
  for (const StepReport& r : reports)
    if (bench.measured(r.step)) setting.step_ms.push_back(ns_to_ms(r.end - r.begin));
  TraceData sinks;
  for (const TraceRecorder& r : recorders) sinks.append(r.data());
  std::vector<TraceEvent> record_spans = op_spans_from_records(sinks.events);
  setting.overlap_cupti_ops.push_back(overlap_percent(record_spans, bench));
  if (cupti) {
    setting.record_spans = measured_only(std::move(record_spans), bench);
    setting.event_spans = measured_only(spans, bench);
  }
  setting.overlap_sinks.push_back(overlap_percent(std::move(sinks.events), bench));
  setting.overlap_op_log.push_back(overlap_percent(std::move(spans), bench));
  setting.cupti.records += after.records - before.records;
  setting.cupti.dropped += after.dropped - before.dropped;
}

double mean(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

// Where an op's CUDA-event span and its CUPTI span differ: per kind, the mean lead of the event span's begin
// over the first record and lag of its end behind the last, in ms per measured step and rank, and the widest
// differences. See the header.
void print_span_differences(const Setting& traced, const TrainBenchOptions& bench, int world) {
  std::map<std::pair<int, OpId>, const TraceEvent*> by_op;
  for (const TraceEvent& e : traced.record_spans) by_op[{e.rank, e.op}] = &e;
  struct Kind {
    const char* name;
    SimTime lead = 0, lag = 0;
    int ops = 0;
  };
  Kind kinds[2] = {{"compute"}, {"communication"}};
  std::vector<std::pair<SimTime, const TraceEvent*>> widest;
  for (const TraceEvent& e : traced.event_spans) {
    auto it = by_op.find({e.rank, e.op});
    if (it == by_op.end()) continue;
    const TraceEvent& r = *it->second;
    Kind& kind = kinds[is_communication(e.category) ? 1 : 0];
    kind.lead += r.begin - e.begin;
    kind.lag += e.end - r.end;
    kind.ops += 1;
    widest.emplace_back((r.begin - e.begin) + (e.end - r.end), &e);
  }
  const double per = static_cast<double>(bench.steps) * world;
  std::printf("\nCUDA-event span against CUPTI span of the same ops (ms per measured step and rank):\n");
  for (const Kind& k : kinds)
    std::printf("  %-13s %5.0f ops: begins %8.3f earlier, ends %8.3f later\n", k.name, k.ops / per,
                ns_to_ms(k.lead) / per, ns_to_ms(k.lag) / per);
  std::sort(widest.begin(), widest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  widest.resize(std::min<std::size_t>(widest.size(), 8));
  for (const auto& [extra, e] : widest)
    std::printf("  %+9.3f ms  rank %d step %d %s unit %d %s '%s'\n", ns_to_ms(extra), e->rank, e->step + 1,
                std::string(lane_name(e->lane)).c_str(), e->unit, e->phase.c_str(), e->name.c_str());
}

}  // namespace

void bench_cupti(const TrainBenchOptions& bench) {
  const RunConfig run = bench.run_config("cuda");
  const DeviceSpec device = run_device_spec(run, PresetCatalog::builtin(), false);

  std::printf("fsdplab bench --what cupti: %s %s, %d rank%s x %lld x %lld tokens, %s, ASYNC; %d steps after %d warmup; "
              "CUPTI off and on alternating, %d runs each; impl: %s; GPU %d%s\n\n",
              bench.model.c_str(), bench.preset.c_str(), bench.world, bench.world == 1 ? "" : "s",
              static_cast<long long>(bench.micro_batch), static_cast<long long>(bench.seq), bench.compute().c_str(),
              bench.steps, bench.warmup, kRounds, impl_name(bench.impl).c_str(), device.gpu,
              bench.world > 1 ? (std::string(", ranks sharing it") +
                                 " (" + std::string(sm_split_description(bench.sm_split)) + ")" +
                                 (bench.emulate_link ? ", emulated link " + device.link.name : "")).c_str()
                              : "");
  Setting off, on;
  for (int round = 0; round < kRounds; ++round) {
    train_once(bench, run, false, off);
    train_once(bench, run, true, on);
  }
  std::printf(
      "| CUPTI | step (ms) | overlap %% (CUPTI kernels) | overlap %% (CUPTI ops) | overlap %% (CUDA events) |   "
      "records | dropped |\n");
  std::printf("|-------|-----------|---------------------------|-----------------------|-------------------------|---"
              "--------|---------|\n");
  std::printf("| off   | %9.3f | %25s | %21s | %23.1f | %9s | %7s |\n", median(off.step_ms), "-", "-",
              mean(off.overlap_sinks), "-", "-");
  const bool traced = on.cupti.records > 0;
  if (traced) {
    std::printf("| on    | %9.3f | %25.1f | %21.1f | %23.1f | %9lld | %7lld |\n", median(on.step_ms),
                mean(on.overlap_sinks), mean(on.overlap_cupti_ops), mean(on.overlap_op_log),
                static_cast<long long>(on.cupti.records), static_cast<long long>(on.cupti.dropped));
  } else {
    std::printf("| on    | %9.3f | %25s | %21s | %23.1f | %9s | %7s |\n", median(on.step_ms), "-", "-",
                mean(on.overlap_op_log), "0", "-");
  }
  const double ratio = median(on.step_ms) / median(off.step_ms);
  std::printf("\nCUPTI on / off: %.3fx (goal <= 1.03x: %s)\n", ratio, ratio <= 1.03 ? "met" : "NOT met");
  if (traced) {
    const double apart = std::abs(mean(on.overlap_cupti_ops) - mean(on.overlap_op_log));
    std::printf("overlap from CUPTI's op spans vs CUDA events: %.1f points apart (goal <= 2: %s)\n", apart,
                apart <= 2 ? "met" : "NOT met");
    print_span_differences(on, bench, bench.world);
  } else {
    std::printf("CUPTI traced nothing: it could not attach (the warning above says why)\n");
  }
}

}  // namespace fsdplab::app
