// `fsdplab bench --what overlap` — how much of its communication an FSDP step hides, SYNC against ASYNC.
//
// Every number is the sim device's virtual time (deterministic: the same table on every machine) from
// dry runs (time and memory, no numerics) of three steps, measured on rank 0 in the second step: the first
// records the forward order that forward prefetch replays from the second on, and the third follows it,
// so the second gathers the next step's first unit in its optimizer step (the next-step prefetch) as a
// step in the middle of a training does. Per configuration:
//   compute   the step with communication free: the same ASYNC schedule on a link of unbounded bandwidth
//             and no latency (each collective takes the clock's 1 ns). Chosen over the compute ops'
//             busy time because it keeps what no overlap can remove (the host's launch overheads, the
//             compute stream waiting for the host), so ideal below is a time a schedule can reach.
//   comm      the link's busy time: the sum of rank 0's collectives in the step, which take the rank's
//             one link one at a time (sim_device.hpp).
//   T_sync    the step with --mode sync (every collective blocks compute); T_async with --mode async.
//   ideal     max(compute, comm): perfect overlap.
//   eta       (T_sync - T_async) / (T_sync - ideal): the share of the saving perfect overlap would bring
//             that ASYNC achieved.
//   overlap % and exposed communication of the ASYNC step with HTA's definitions (trace_metrics.hpp).
//   gathered  the peak of param_full + grad_full live at one moment of the step (the memory ledger's
//             counters): what prefetch and the rate limiter cost in memory.
#include "app/bench_overlap.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "app/exposed_communication.hpp"
#include "engine/fsdp/sharding.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/output_file.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/runtime/wall_clock.hpp"
#include "engine/trace/chrome_trace.hpp"
#include "engine/trace/trace_metrics.hpp"
#include "engine/trace/trace_recorder.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/model_factory.hpp"
#include "engine/train/run_device.hpp"
#include "labs/student_tasks.hpp"

namespace fsdplab::app {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMeasuredStep = 1;  // the second step (0-based)
constexpr int kSteps = 3;         // one after it: the measured step prepares the next one's forward
constexpr const char* kFreeLink = "free";
constexpr std::array<MemTag, 2> kGatheredTags = {MemTag::param_full, MemTag::grad_full};
constexpr std::array<MemTag, 3> kShardedStateTags = {MemTag::param_shard, MemTag::grad_shard, MemTag::optim_state};

// What one run's measured step shows on rank 0.
struct StepTimes {
  SimTime step = 0;     // first begin to last end of the step's device work
  SimTime compute = 0;  // |union of compute|
  SimTime comm = 0;     // sum of the collectives: the link's busy time (on nodes the busier link's: trace_metrics.hpp)
  std::array<SimTime, kRankLinkCount> links{};  // each link's busy time, by RankLink
  SimTime union_of_comm = 0;  // |comm|: it may differ from `comm` where a rank's two links are busy at once
  SimTime overlap = 0;  // |comm ∩ compute|
  std::int64_t gathered = 0;
  std::int64_t sharded_state = 0;  // peak of param_shard + grad_shard + optim_state
  std::vector<TraceEvent> events;  // the step's events on rank 0, for the exposed-communication breakdown
};

// The bench's catalogue: the device preset, the link at each swept bandwidth, and the free link.
nlohmann::json device_json(const DevicePreset& d, const std::string& default_link) {
  return {{"description", d.description},       {"matmul_flops_bf16", d.matmul_flops_bf16},
          {"matmul_flops_f32", d.matmul_flops_f32}, {"vector_flops", d.vector_flops},
          {"memory_bandwidth", d.memory_bandwidth}, {"memory_bytes", d.memory_bytes},
          {"host_bandwidth", d.host_bandwidth},     {"launch_overhead_us", d.launch_overhead_us},
          {"min_kernel_us", d.min_kernel_us},       {"default_link", default_link}};
}

PresetCatalog bench_catalog(const DevicePreset& device, const LinkPreset& base, const std::vector<LinkPreset>& links) {
  nlohmann::json root;
  root["devices"][device.name] = device_json(device, base.name);
  for (const LinkPreset& l : links)
    root["links"][l.name] = {{"description", l.description}, {"bandwidth", l.bandwidth}, {"latency_us", l.latency_us}};
  return PresetCatalog::parse(root.dump(), "fsdplab bench --what overlap");
}

std::string scaled_link_name(const LinkPreset& base, double scale) {
  char name[96];
  std::snprintf(name, sizeof name, "%s x%g", base.name.c_str(), scale);
  return name;
}

// One dry run of `options` on `link` (with nodes, `inter_node_link` between them); `keep`, when given, receives
// every rank's trace.
StepTimes measure(const OverlapBenchOptions& bench, const FsdpOptions& options, const PresetCatalog& catalog,
                  const std::string& link, const std::string& inter_node_link, TraceData* keep = nullptr) {
  FsdpRun fsdp;
  fsdp.run.model = bench.model;
  fsdp.run.preset = model_has_named_sizes(bench.model) ? bench.preset : "";
  fsdp.run.world = bench.world;
  fsdp.run.batch = bench.micro_batch * bench.world;
  fsdp.run.seq = bench.seq;
  fsdp.run.steps = kSteps;
  fsdp.run.device_preset = bench.device_preset;
  fsdp.run.link_preset = link;
  fsdp.run.nodes = {bench.nodes.ranks_per_node, inter_node_link};
  fsdp.options = options;
  fsdp.tasks = tasks_for(bench.impl);
  fsdp.dry_run = true;
  std::vector<TraceRecorder> recorders(static_cast<std::size_t>(bench.world));
  for (TraceRecorder& r : recorders) fsdp.sinks.push_back(&r);
  const std::vector<StepReport> reports = train_fsdp(fsdp, catalog, nullptr);
  check(reports.size() == static_cast<std::size_t>(kSteps), "bench --what overlap: expected ", kSteps,
        " step reports, got ", reports.size());

  const TraceData& trace = recorders.front().data();
  StepTimes t;
  for (const OverlapMetrics& m : metrics_per_step(trace.events)) {
    if (m.rank != 0 || m.step != kMeasuredStep) continue;
    t.step = m.span;
    t.compute = m.compute;
    t.union_of_comm = m.comm;
    t.overlap = m.overlap;
  }
  t.comm = communication_time(trace.events, 0, kMeasuredStep);
  t.links = link_busy_times(trace.events, 0, kMeasuredStep);
  const StepReport& r = reports[kMeasuredStep];
  t.gathered = peak_live_bytes(trace.counters, 0, kGatheredTags, r.begin, r.end);
  t.sharded_state = peak_live_bytes(trace.counters, 0, kShardedStateTags, r.begin, r.end);
  for (const TraceEvent& e : trace.events)
    if (e.rank == 0 && e.step == kMeasuredStep && e.lane != Lane::host) t.events.push_back(e);
  if (keep)
    for (const TraceRecorder& r : recorders) keep->append(r.data());
  return t;
}

double ms(SimTime ns) { return ns_to_ms(ns); }

// One row of a table: an ASYNC configuration against the SYNC step on the same link.
struct Row {
  StepTimes sync, async;
  SimTime compute = 0;  // the free-link step of the same ASYNC configuration

  SimTime ideal() const { return std::max(compute, async.comm); }
  bool eta_defined() const { return sync.step > ideal(); }
  double eta() const {
    return static_cast<double>(sync.step - async.step) / static_cast<double>(sync.step - ideal());
  }
  double overlap_percent() const {
    const SimTime comm = async.union_of_comm;
    return comm > 0 ? 100.0 * static_cast<double>(async.overlap) / static_cast<double>(comm) : 0.0;
  }
  // |comm| - |comm ∩ compute| (HTA): on one node, where collectives take the link in turn, |comm| is `comm`.
  SimTime exposed() const { return async.union_of_comm - async.overlap; }
};

const char* kColumns =
    "| compute (ms) | comm (ms) | comm/compute | T_sync (ms) | T_async (ms) | ideal (ms) |    eta | overlap % "
    "| exposed (ms) | gathered (MB) |";
const char* kRule =
    "|--------------|-----------|--------------|-------------|--------------|------------|--------|-----------"
    "|--------------|---------------|";

void print_row_numbers(const Row& row) {
  char eta[16] = "     -";
  if (row.eta_defined()) std::snprintf(eta, sizeof eta, "%6.3f", row.eta());
  std::printf(" %12.3f | %9.3f | %12.2f | %11.3f | %12.3f | %10.3f | %s | %9.1f | %12.3f | %13.1f |\n",
              ms(row.compute), ms(row.async.comm),
              static_cast<double>(row.async.comm) / static_cast<double>(std::max<SimTime>(row.compute, 1)),
              ms(row.sync.step), ms(row.async.step), ms(row.ideal()), eta, row.overlap_percent(), ms(row.exposed()),
              static_cast<double>(row.async.gathered) / 1e6);
}

// What every table of the bench shares: the checked options, the catalogue of the link at each swept
// bandwidth and the free link, and the dry runs already made, cached by (options, link): the sweeps share
// their SYNC steps and free-link steps.
class OverlapRuns {
 public:
  explicit OverlapRuns(const OverlapBenchOptions& bench) : bench_(bench) {
    check(bench.world >= 2, "bench --what overlap: --world ", bench.world,
          "; overlap needs communication, at least 2 ranks");
    check(!bench.bandwidth_scales.empty(), "bench --what overlap: --bandwidths needs at least one scale");
    for (double s : bench.bandwidth_scales)
      check(std::isfinite(s) && s > 0, "bench --what overlap: --bandwidths ", s,
            "; expected finite scales > 0 (times the link preset's bandwidth)");
    check_whole_nodes(bench.nodes, bench.world);

    const PresetCatalog presets = PresetCatalog::builtin_or_file(bench.presets_file);
    device = presets.device(bench.device_preset);
    base = presets.link_for(device, bench.link_preset);
    inter_node = bench.nodes.ranks_per_node > 0 ? presets.link(bench.nodes.inter_node_link, "--inter-node-link") : base;
    std::vector<LinkPreset> links = {base, inter_node};
    inter_node_of_[base.name] = inter_node.name;
    for (double s : bench.bandwidth_scales) {
      if (s == 1) continue;
      for (const LinkPreset* from : {&base, &inter_node}) {
        LinkPreset l = *from;
        l.name = scaled_link_name(*from, s);
        l.bandwidth = from->bandwidth * s;
        // A scale finite itself may still overflow the bandwidth (1e300 times 1e11 B/s).
        check(std::isfinite(l.bandwidth), "bench --what overlap: --bandwidths ", s, " times link ", from->name, "'s ",
              from->bandwidth, " B/s is ", l.bandwidth, "; expected a finite bandwidth");
        links.push_back(l);
      }
      inter_node_of_[scaled_link_name(base, s)] = scaled_link_name(inter_node, s);
    }
    // Unbounded bandwidth and no latency, as near as the preset format (both > 0) and the clock allow.
    links.push_back(LinkPreset{kFreeLink, "communication for free: the compute-only step", 1e30, 1e-12});
    inter_node_of_[kFreeLink] = kFreeLink;
    catalog = bench_catalog(device, base, links);

    async = bench.async;
    async.mode = OverlapMode::async;
    validate_fsdp_options(async, bench.world);
    sync = sync_schedule(async);
    sync.buffers = UnshardBuffers::alloc;

    RunConfig probe_run;
    probe_run.model = bench.model;
    probe_run.preset = model_has_named_sizes(bench.model) ? bench.preset : "";
    probe_run.world = bench.world;
    probe_run.batch = bench.micro_batch * bench.world;
    probe_run.seq = bench.seq;
    const BuiltModel probe = build_model(probe_run);
    parameters = probe.model->parameter_count();
  }

  std::string link_name(double scale) const { return scale == 1 ? base.name : scaled_link_name(base, scale); }

  const StepTimes& run(const FsdpOptions& o, const std::string& link) {
    const Key key{static_cast<int>(o.mode), prefetch_name(o.prefetch), o.max_inflight, static_cast<int>(o.buffers),
                  link};
    auto it = cache_.find(key);
    if (it == cache_.end()) it = cache_.emplace(key, measure(bench_, o, catalog, link, inter_node_of(link))).first;
    return it->second;
  }

  Row make_row(const FsdpOptions& o, const std::string& link) {
    Row row{run(sync, link), run(o, link), run(o, kFreeLink).step};
    check(row.sync.comm == row.async.comm, "bench --what overlap: the SYNC step's collectives took ", row.sync.comm,
          " ns and the ASYNC step's ", row.async.comm, " ns on link ", link, "; expected the same collectives");
    return row;
  }

  std::size_t runs() const { return cache_.size(); }
  // The inter-node link that goes with `link` (a preset, one of its sweep's scalings, or the free link).
  const std::string& inter_node_of(const std::string& link) const { return inter_node_of_.at(link); }

  DevicePreset device;
  LinkPreset base;
  // Between nodes, with --ranks-per-node; otherwise unused: the base link again.
  LinkPreset inter_node;
  PresetCatalog catalog;
  FsdpOptions async, sync;
  std::int64_t parameters = 0;

 private:
  using Key = std::tuple<int, std::string, int, int, std::string>;
  const OverlapBenchOptions& bench_;
  std::map<std::string, std::string> inter_node_of_;
  std::map<Key, StepTimes> cache_;
};

}  // namespace

OverlapHeadline overlap_headline(const OverlapBenchOptions& bench, TraceData* sync_trace, TraceData* async_trace) {
  OverlapRuns runs(bench);
  const Row row = runs.make_row(runs.async, runs.base.name);
  OverlapHeadline h;
  h.parameters = runs.parameters;
  h.device = runs.device;
  h.link = runs.base;
  h.compute = row.compute;
  h.comm = row.async.comm;
  h.t_sync = row.sync.step;
  h.t_async = row.async.step;
  h.ideal = row.ideal();
  if (row.eta_defined()) h.eta = row.eta();
  h.sync_overlap = row.sync.overlap;
  h.overlap_percent = row.overlap_percent();
  h.exposed = row.exposed();
  h.gathered = row.async.gathered;
  h.sharded_state = row.async.sharded_state;
  h.links = row.async.links;
  const std::string& inter_node = runs.inter_node_of(runs.base.name);
  if (sync_trace) measure(bench, runs.sync, runs.catalog, runs.base.name, inter_node, sync_trace);
  if (async_trace) measure(bench, runs.async, runs.catalog, runs.base.name, inter_node, async_trace);
  return h;
}

void bench_overlap(const OverlapBenchOptions& bench) {
  const auto start = Clock::now();
  if (!bench.trace_path.empty()) {
    // Before the dry runs, so a trace that cannot be written, or would overwrite the preset file, costs nothing.
    const PathUse paths[] = {{"--trace", bench.trace_path, true, false},
                             {"--presets", bench.presets_file, false, false}};
    check_paths_apart(paths);
    check_output_file(bench.trace_path, "--trace");
  }
  OverlapRuns runs(bench);
  const DevicePreset& device = runs.device;
  const LinkPreset& base = runs.base;
  const PresetCatalog& catalog = runs.catalog;
  const FsdpOptions& async = runs.async;
  const std::string buffers(unshard_buffers_name(async.buffers));
  const std::int64_t parameters = runs.parameters;
  const auto link_name = [&](double scale) { return runs.link_name(scale); };
  const auto run = [&](const FsdpOptions& o, const std::string& link) -> const StepTimes& { return runs.run(o, link); };
  const auto make_row = [&](const FsdpOptions& o, const std::string& link) { return runs.make_row(o, link); };

  std::printf(
      "fsdplab bench --what overlap: %s '%s' (%.2fM parameters), W = %d, strategy %s, %s parameters and "
      "compute, %s gradient reduction%s, AdamW; impl: %s\n",
      bench.model.c_str(), bench.preset.c_str(), static_cast<double>(parameters) / 1e6, bench.world,
      std::string(strategy_name(async.strategy)).c_str(), std::string(dtype_name(async.param_dtype)).c_str(),
      std::string(dtype_name(async.reduce_dtype)).c_str(),
      async.embedding_grad == EmbeddingGradient::rows ? ", embedding gradient as rows" : "",
      impl_name(bench.impl).c_str());
  std::printf("Device %s, link %s (%g GB/s per direction, %g us per ring step). Per rank: micro-batch %lld x seq %lld "
              "= %lld tokens.\n",
              device.name.c_str(), base.name.c_str(), base.bandwidth / 1e9, base.latency_us,
              static_cast<long long>(bench.micro_batch), static_cast<long long>(bench.seq),
              static_cast<long long>(bench.micro_batch * bench.seq));
  if (bench.nodes.ranks_per_node > 0)
    std::printf("Nodes of %d ranks: the link above within a node, %s (%g GB/s per direction, %g us per ring step)\n"
                "between nodes; a collective whose group spans nodes runs at its pace, and the sweep scales both.\n",
                bench.nodes.ranks_per_node, runs.inter_node.name.c_str(), runs.inter_node.bandwidth / 1e9,
                runs.inter_node.latency_us);
  std::printf(
      "Dry runs of 3 steps on the sim device (time and memory, no numerics); step 2 measured on rank 0 (step 1\n"
      "records the forward order that forward prefetch replays; step 3 follows, so step 2 gathers its first unit\n"
      "for it, as a step mid-training does). Times are the sim device's virtual clock: deterministic, the same\n"
      "table on every machine.\n\n");
  std::printf(
      "  compute    the step with communication free: the same ASYNC schedule on a link of unbounded bandwidth\n"
      "             and no latency (each collective 1 ns), so it keeps the host's launch overheads and waits\n"
      "  comm       the link's busy time: the sum of rank 0's collectives in the step (they take the link in\n"
      "             turn; on nodes, the busier of a rank's two links, within its node and between nodes)\n"
      "  T_sync     --mode sync (every collective blocks compute); T_async: --mode async with the row's prefetch\n"
      "  ideal      max(compute, comm);  eta = (T_sync - T_async) / (T_sync - ideal)\n"
      "  overlap %%  |comm ∩ compute| / |comm|, exposed = |comm| - |comm ∩ compute| (HTA), of the ASYNC step\n"
      "  gathered   peak of param_full + grad_full live at one moment of the ASYNC step (memory ledger), MB\n\n");

  const Row headline = make_row(async, base.name);
  std::printf("%s, prefetch %s, max-inflight %d, buffers %s:\n", base.name.c_str(),
              prefetch_name(async.prefetch).c_str(), async.max_inflight, buffers.c_str());
  std::printf("  compute %.3f ms (|union of compute ops| %.3f ms), comm %.3f ms, comm/compute %.2f\n",
              ms(headline.compute), ms(run(async, kFreeLink).compute), ms(headline.async.comm),
              static_cast<double>(headline.async.comm) / static_cast<double>(std::max<SimTime>(headline.compute, 1)));
  char eta[16] = "-";
  if (headline.eta_defined()) std::snprintf(eta, sizeof eta, "%.3f", headline.eta());
  std::printf("  T_sync %.3f ms, T_async %.3f ms, ideal %.3f ms: eta = %s, overlap %.1f %%, exposed comm %.3f ms\n",
              ms(headline.sync.step), ms(headline.async.step), ms(headline.ideal()), eta, headline.overlap_percent(),
              ms(headline.exposed()));
  if (bench.nodes.ranks_per_node > 0) {
    const auto busy = [&](RankLink l) { return ms(headline.async.links[static_cast<std::size_t>(l)]); };
    std::printf("  links busy: %.3f ms within the node, %.3f ms between nodes (|comm| %.3f ms)\n",
                busy(RankLink::in_node), busy(RankLink::between_nodes), ms(headline.async.union_of_comm));
  }
  const std::vector<int> headline_step = {headline.async.events.empty() ? 0 : headline.async.events.front().step};
  print_exposed_communication(exposed_communication(headline.async.events, 0, headline_step),
                              "Exposed communication of that ASYNC step");
  if (!bench.trace_path.empty()) {
    TraceData trace;
    measure(bench, async, catalog, base.name, runs.inter_node_of(base.name), &trace);
    TraceMeta meta;
    meta.backend = "sim";
    meta.world_size = bench.world;
    meta.device_name = device.name;
    meta.device_memory_bytes = static_cast<std::int64_t>(device.memory_bytes);
    write_chrome_trace(bench.trace_path, trace, meta);
    std::printf("trace of this ASYNC run (every step and rank): %s (open it in ui.perfetto.dev)\n",
                bench.trace_path.c_str());
  }

  std::printf("\nLink bandwidth sweep (latency %g us per ring step; prefetch %s, max-inflight %d, buffers %s):\n\n",
              base.latency_us, prefetch_name(async.prefetch).c_str(), async.max_inflight, buffers.c_str());
  std::printf("| link bandwidth       %s\n|----------------------%s\n", kColumns, kRule);
  for (double s : bench.bandwidth_scales) {
    const Row row = make_row(async, link_name(s));
    char label[48];
    std::snprintf(label, sizeof label, "x%g = %g GB/s", s, base.bandwidth * s / 1e9);
    std::printf("| %-20s |", label);
    print_row_numbers(row);
  }

  std::printf("\nPrefetch sweep (link %s):\n\n", base.name.c_str());
  std::printf("| prefetch                       | buffers | in flight %s\n"
              "|--------------------------------|---------|-----------%s\n",
              kColumns, kRule);
  std::vector<FsdpOptions> sweep;
  for (std::string_view p : prefetch_names()) {
    FsdpOptions o = async;
    o.prefetch = parse_prefetch(p);
    sweep.push_back(o);
  }
  if (reshards_after_forward(async.strategy)) {
    for (const PrefetchPolicy& p : {async.prefetch, parse_prefetch("all")}) {
      FsdpOptions o = async;
      o.prefetch = p;
      o.buffers = UnshardBuffers::pool;
      o.max_inflight = FsdpOptions{}.max_inflight;  // the pool takes no limit (its two buffers bound the units)
      sweep.push_back(o);
    }
  }
  for (int inflight : {1, 2, 0}) {
    FsdpOptions o = async;
    o.buffers = UnshardBuffers::alloc;
    o.max_inflight = inflight;
    sweep.push_back(o);
  }
  std::set<std::tuple<std::string, int, int>> printed;
  for (const FsdpOptions& o : sweep) {
    if (!printed.emplace(prefetch_name(o.prefetch), o.max_inflight, static_cast<int>(o.buffers)).second) continue;
    const Row row = make_row(o, base.name);
    const bool pool = o.buffers == UnshardBuffers::pool;
    std::printf("| %-30s | %-7s | %-9s |", prefetch_name(o.prefetch).c_str(),
                std::string(unshard_buffers_name(o.buffers)).c_str(),
                pool ? "-" : o.max_inflight == 0 ? "no limit" : std::to_string(o.max_inflight).c_str());
    print_row_numbers(row);
  }
  std::printf(
      "\nin flight: --max-inflight, the gathered units the rate limiter allows at once (alloc buffers only).\n"
      "%zu dry runs, wall time %.1f s.\n",
      runs.runs(), seconds_since(start));
}

}  // namespace fsdplab::app
