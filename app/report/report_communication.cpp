// Section 4.2 of the writeup: all-gather and reduce-scatter times at 1 MB and 10 MB, and a size sweep,
// with the algorithm and the bandwidths nccl-tests prints:
//   algbw = S / t, S the full buffer (the all-gather's output, the reduce-scatter's input), and
//   busbw = algbw x (W - 1) / W, what each rank's link carries in a ring: bus_bandwidth() in
//   engine/runtime/cost_model.hpp, the one place it is defined.
// The collectives are LocalComm's, issued on each rank's all-gather or reduce-scatter stream as FSDP issues
// them. On the sim device their time is the link preset's cost model, (W - 1) x latency + (W - 1) / W x S /
// bandwidth (dry runs: no data moves); on cuda it is measured (CUDA-event spans, the mean of the timed
// iterations after warm-up), the ranks sharing one GPU, so the "link" is that GPU's own memory.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "app/dashboard/palette.hpp"
#include "app/report/markdown_table.hpp"
#include "app/report/report_context.hpp"
#include "engine/comm/communicator.hpp"
#include "engine/runtime/cost_model.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/tensor/tensor.hpp"
#include "engine/trace/trace_recorder.hpp"
#include "engine/train/rank_launch.hpp"

namespace fsdplab::app {
namespace {

struct CollectiveCase {
  OpCategory op = OpCategory::all_gather;
  std::int64_t bytes = 0;  // the full buffer
};

struct Timing {
  CollectiveCase c;
  int world = 0;
  double seconds = 0;
  double algbw() const { return static_cast<double>(c.bytes) / seconds; }
  double busbw() const { return bus_bandwidth(c.op, c.bytes, world, seconds); }
};

std::string op_title(OpCategory op) { return op == OpCategory::all_gather ? "All-gather" : "Reduce-scatter"; }

// "4 KiB", "1 MiB", "1 MB": binary sizes by their binary unit, decimal ones by theirs.
std::string size_label(std::int64_t bytes) {
  if (bytes % 1'000'000 == 0) return format("%lld MB", static_cast<long long>(bytes / 1'000'000));
  if (bytes >= (1 << 30) && bytes % (1 << 30) == 0) return format("%lld GiB", static_cast<long long>(bytes >> 30));
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return format("%lld MiB", static_cast<long long>(bytes >> 20));
  if (bytes >= (1 << 10) && bytes % (1 << 10) == 0) return format("%lld KiB", static_cast<long long>(bytes >> 10));
  return format("%lld B", static_cast<long long>(bytes));
}

// Each case on `world` ranks: warm-up iterations, then timed ones; rank 0's mean time of the timed ones.
std::vector<Timing> time_collectives(const ReportContext& ctx, int world, const std::vector<CollectiveCase>& cases) {
  DeviceSpec spec;
  if (ctx.cuda) {
    spec = ctx.gpu;
    spec.cupti = false;          // each op's CUDA-event span
    spec.emulate_link = false;   // measured, not modelled
  } else {
    const PresetCatalog& presets = PresetCatalog::builtin();
    spec.kind = DeviceKind::sim;
    spec.preset = presets.device(ctx.device_preset);
    spec.link = presets.link_for(spec.preset, ctx.link_preset);
    spec.dry_run = true;  // the cost model needs the sizes only
  }
  const int warmup = ctx.cuda ? 3 : 0;
  const int timed = ctx.cuda ? (ctx.options.quick ? 5 : 20) : 1;  // the sim's clock gives the same time every time
  std::vector<Timing> out;
  for (const CollectiveCase& c : cases) out.push_back({c, world, 0});
  const RankLayout layout = rank_layout("local", world, spec.kind, spec.gpu);
  run_ranks(layout, [&](RankSeat& seat) {
    std::unique_ptr<Device> device = make_device(seat.rank(), spec);
    TraceRecorder recorder;
    if (seat.rank() == 0) device->add_sink(&recorder);
    std::unique_ptr<Communicator> comm = seat.connect(*device);
    for (std::size_t k = 0; k < cases.size(); ++k) {
      const CollectiveCase& c = cases[k];
      const std::int64_t numel = c.bytes / 4;
      check(numel % world == 0, "report: ", c.bytes, " bytes do not split into ", world, " f32 shards");
      const Lane lane = c.op == OpCategory::all_gather ? Lane::all_gather : Lane::reduce_scatter;
      const Tensor full = Tensor::empty(*device, {numel}, DType::f32, MemTag::comm_buffer, "full", lane);
      const Tensor shard = Tensor::empty(*device, {numel / world}, DType::f32, MemTag::comm_buffer, "shard", lane);
      for (int i = 0; i < warmup + timed; ++i) {
        LabelScope scope(*device, {.step = i});
        if (c.op == OpCategory::all_gather) {
          comm->all_gather(device->stream(lane), shard, full);
        } else {
          comm->reduce_scatter(device->stream(lane), full, shard, ReduceOp::sum);
        }
      }
      device->synchronize();
      if (seat.rank() != 0) continue;
      SimTime total = 0;
      int seen = 0;
      for (const TraceEvent& e : recorder.data().events)
        if (e.category == c.op && e.step >= warmup) total += e.end - e.begin, ++seen;
      check(seen == timed, "report: expected ", timed, " timed ", category_name(c.op), "s on rank 0, saw ", seen);
      out[k].seconds = static_cast<double>(total) / seen * 1e-9;
      recorder.clear();
    }
    if (seat.rank() == 0) device->remove_sink(&recorder);
  });
  return out;
}

std::string algorithm(const ReportContext& ctx, int world) {
  if (ctx.cuda) return "LocalComm copies (" + std::to_string(world) + " ranks, 1 GPU)";
  return "ring, " + std::to_string(world - 1) + (world == 2 ? " step" : " steps");
}

void add_rows(MarkdownTable& table, const ReportContext& ctx, const std::vector<Timing>& timings) {
  for (const Timing& t : timings)
    table.add_row({op_title(t.c.op), size_label(t.c.bytes), std::to_string(t.world), format("%.4f", t.seconds * 1e3),
                   algorithm(ctx, t.world), format("%.2f", t.algbw() / 1e9), format("%.2f", t.busbw() / 1e9)});
}

}  // namespace

std::string report_communication(ReportContext& ctx) {
  const PresetCatalog& presets = PresetCatalog::builtin();
  const DevicePreset& device = presets.device(ctx.device_preset);
  const LinkPreset& link = presets.link_for(device, ctx.link_preset);
  constexpr int kWorld = 2;

  std::string md = "### 4.2 Communication Profiling\n\n";
  if (ctx.cuda) {
    md += format(
        "Measured on %s: %d ranks as threads sharing the GPU (LocalComm; NCCL refuses two ranks on one GPU), so "
        "a collective is device-to-device copies (and a reduction kernel) in the GPU's own memory, not a "
        "transfer over a link. Times: CUDA-event spans on rank 0, the mean of %d iterations after 3 of "
        "warm-up.\n\n",
        ctx.gpu_name.c_str(), kWorld, ctx.options.quick ? 5 : 20);
  } else {
    md += format("On the sim device, the link preset's cost model: link %s (%s), %g GB/s per direction, %g us per ring "
                 "step. A ring all-gather or reduce-scatter of S bytes over W ranks takes (W - 1) x latency + "
                 "(W - 1) / W x S / bandwidth (engine/runtime/cost_model.hpp), issued through LocalComm on each rank's "
                 "collective stream as FSDP issues it (dry runs: sizes and times, no data).\n\n",
                 link.name.c_str(), link.description.c_str(), link.bandwidth / 1e9, link.latency_us);
  }
  md += "Bandwidths as nccl-tests defines them: algbw = S / t with S the full buffer (the all-gather's output, the "
        "reduce-scatter's input); busbw = algbw x (W - 1) / W, what each rank's link carries in a ring, comparable "
        "across W and with the link's own bandwidth. GB/s = 10^9 bytes per second.\n\n";
  md += command_block({"fsdplab report --device " + ctx.device_flag() + " --only communication" +
                       (ctx.options.quick ? " --quick" : "")});
  md += "\n**Results:**\n\n";
  const std::vector<std::string> header = {"Operation", "Tensor Size", "W", "Time (ms)", "Algorithm", "algbw (GB/s)",
                                           "busbw (GB/s)"};
  {
    MarkdownTable table(header);
    add_rows(table, ctx,
             time_collectives(ctx, kWorld, {{OpCategory::all_gather, 1'000'000}, {OpCategory::all_gather, 10'000'000},
                                            {OpCategory::reduce_scatter, 1'000'000},
                                            {OpCategory::reduce_scatter, 10'000'000}}));
    md += table.str();
  }

  // The size sweep: 4 KiB to 1 GiB (quick: to 64 MiB), every factor of 4, at W = 2.
  const std::int64_t largest = ctx.options.quick ? (std::int64_t{1} << 26) : (std::int64_t{1} << 30);
  std::vector<CollectiveCase> sweep;
  for (OpCategory op : {OpCategory::all_gather, OpCategory::reduce_scatter})
    for (std::int64_t s = 4096; s <= largest; s *= 4) sweep.push_back({op, s});
  const std::vector<Timing> swept = time_collectives(ctx, kWorld, sweep);
  md += format("\n**Size sweep** (W = %d, 4 KiB to %s, every factor of 4):\n\n", kWorld, size_label(largest).c_str());
  {
    MarkdownTable table(header);
    add_rows(table, ctx, swept);
    md += table.str();
  }
  // W at a fixed size: busbw is what stays comparable.
  std::vector<int> worlds = {2, 4, 8};
  if (ctx.cuda && ctx.options.quick) worlds = {2, 4};
  std::vector<Timing> by_world;
  for (int w : worlds) {
    const std::vector<Timing> t =
        time_collectives(ctx, w, {{OpCategory::all_gather, 10'000'000}, {OpCategory::reduce_scatter, 10'000'000}});
    by_world.insert(by_world.end(), t.begin(), t.end());
  }
  md += "\n**World size at 10 MB:**\n\n";
  {
    MarkdownTable table(header);
    add_rows(table, ctx, by_world);
    md += table.str();
  }

  md += "\n**Analysis:**\n\n";
  if (ctx.cuda) {
    // Which is faster at the largest size, as measured.
    const Timing* ag = nullptr;
    const Timing* rs = nullptr;
    for (const Timing& t : swept) {
      if (t.c.bytes != largest) continue;
      (t.c.op == OpCategory::all_gather ? ag : rs) = &t;
    }
    md += "- Small collectives are bound by launch and synchronisation latency (tens of microseconds whatever the "
          "size), large ones by the GPU's memory bandwidth: busbw rises with size until it flattens.\n";
    if (ag && rs)
      md += format("- At %s the %s is faster (%.3f ms against %.3f ms): here an all-gather is W copies into the full "
                   "buffer and a reduce-scatter one kernel reading the W inputs, so which wins is a property of these "
                   "copies on one GPU, not of a link.\n",
                   size_label(largest).c_str(), ag->seconds < rs->seconds ? "all-gather" : "reduce-scatter",
                   std::min(ag->seconds, rs->seconds) * 1e3, std::max(ag->seconds, rs->seconds) * 1e3);
    md += "\n";
  } else {
    const double half = kWorld * link.latency_us * 1e-6 * link.bandwidth;
    md += format("- Time is latency-bound for small tensors and bandwidth-bound for large ones: busbw approaches the "
                 "link's %g GB/s from below, reaching half of it at S = W x latency x bandwidth = %.2f MB at W = %d.\n"
                 "- All-gather and reduce-scatter move the same bytes in a ring and the cost model charges them alike, "
                 "so their times are equal here; on real GPUs the reduce-scatter also sums (NCCL's reduction kernels), "
                 "and is usually a little slower.\n"
                 "- At a fixed size, algbw falls as W grows ((W - 1) / W of the buffer crosses every link, plus W - 1 "
                 "latencies) while busbw stays near the link's bandwidth: why nccl-tests reports busbw.\n\n",
                 link.bandwidth / 1e9, half / 1e6, kWorld);
  }

  auto chart = std::make_shared<LineChart>();
  chart->x_label = "tensor size (full buffer)";
  chart->y_label = "busbw (GB/s)";
  chart->log_x = true;
  chart->legend = LegendCorner::bottom_right;
  chart->x_tick = [](double v) { return size_label(static_cast<std::int64_t>(v)); };
  for (OpCategory op : {OpCategory::all_gather, OpCategory::reduce_scatter}) {
    ChartSeries s{
        op_title(op) + format(" (W = %d)", kWorld), {}, {}, category_color(op), true, op == OpCategory::reduce_scatter};
    for (const Timing& t : swept)
      if (t.c.op == op) s.x.push_back(static_cast<double>(t.c.bytes)), s.y.push_back(t.busbw() / 1e9);
    chart->series.push_back(s);
  }
  if (!ctx.cuda) {
    ChartSeries bound{"link bandwidth (" + link.name + ")", {}, {}, kExpectedColor, false, true};
    bound.x = {4096.0, static_cast<double>(largest)};
    bound.y = {link.bandwidth / 1e9, link.bandwidth / 1e9};
    chart->series.push_back(bound);
  }
  md += ctx.figure({"bandwidth_sweep.png",
                    format("Bus bandwidth against size, all-gather and reduce-scatter on %d ranks (%s)", kWorld,
                           ctx.cuda ? ctx.gpu_name.c_str() : ("sim, " + link.name).c_str()),
                    [chart] { draw_line_chart(*chart); }});
  return md;
}

}  // namespace fsdplab::app
