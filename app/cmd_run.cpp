// `fsdplab run` — runs a job on the sim device and reports its timeline.
//
// Today the job is the streams demo (engine/train/stream_demo.hpp); training runs come with the
// model and FSDP layers. The default job (`fsdplab` alone) is `run --demo streams` on 2 ranks.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "app/commands.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/trace/chrome_trace.hpp"
#include "engine/trace/trace_metrics.hpp"
#include "engine/trace/trace_recorder.hpp"
#include "engine/train/stream_demo.hpp"

namespace fsdplab::app {
namespace {

struct RunOptions {
  std::string demo = "streams";
  int world = 2;
  std::string mode = "both";
  std::string device_preset = "h100-sxm";
  std::string link_preset;  // empty: the device preset's default link
  std::string presets_file;
  std::string trace_path;
  std::string trace_dir;
  int layers = 4;
  std::int64_t width = 1024;
  std::int64_t tokens = 1024;
  std::string dtype = "f32";
};

std::vector<ExecMode> parse_modes(const std::string& mode) {
  if (mode == "sync") return {ExecMode::sync};
  if (mode == "async") return {ExecMode::async};
  if (mode == "both") return {ExecMode::sync, ExecMode::async};
  fail("--mode '", mode, "'; expected sync, async or both");
}

int run_streams_demo(const RunOptions& options) {
  check(options.demo == "streams", "--demo '", options.demo, "'; the only demo is 'streams'");
  const PresetCatalog loaded = options.presets_file.empty() ? PresetCatalog() : PresetCatalog::load_file(options.presets_file);
  const PresetCatalog& presets = options.presets_file.empty() ? PresetCatalog::builtin() : loaded;
  const DevicePreset& device = presets.device(options.device_preset);
  const LinkPreset& link = presets.link(options.link_preset.empty() ? device.default_link : options.link_preset);

  StreamDemoConfig config;
  config.world = options.world;
  config.layers = options.layers;
  config.width = options.width;
  config.tokens = options.tokens;
  config.dtype = parse_dtype(options.dtype);
  config.modes = parse_modes(options.mode);
  check(config.dtype != DType::i32, "--dtype i32: the demo's layers compute in f32 or bf16");

  std::vector<TraceRecorder> recorders(static_cast<std::size_t>(config.world));
  std::vector<TraceSink*> sinks;
  for (auto& r : recorders) sinks.push_back(&r);
  const std::vector<StreamDemoStep> steps = run_stream_demo(config, device, link, sinks);

  std::printf("fsdplab streams demo: %d ranks, %d layers of %lldx%lld %s, %lld tokens; device %s, link %s\n",
              config.world, config.layers, static_cast<long long>(config.width), static_cast<long long>(config.width),
              std::string(dtype_name(config.dtype)).c_str(), static_cast<long long>(config.tokens), device.name.c_str(),
              link.name.c_str());
  TraceData trace;
  for (const auto& r : recorders) trace.append(r.data());
  std::printf("%-6s %5s %10s %13s %10s %10s %18s %10s\n", "mode", "rank", "step (us)", "compute (us)", "comm (us)",
              "overlap %", "exposed comm (us)", "idle (us)");
  std::vector<OverlapMetrics> per_step = metrics_per_step(trace.events);
  std::stable_sort(per_step.begin(), per_step.end(),
                   [](const OverlapMetrics& a, const OverlapMetrics& b) { return a.step < b.step; });
  for (const OverlapMetrics& m : per_step) {
    const StreamDemoStep& step = steps[static_cast<std::size_t>(m.step)];
    std::printf("%-6s %5d %10.1f %13.1f %10.1f %10.1f %18.1f %10.1f\n", std::string(exec_mode_name(step.mode)).c_str(),
                m.rank, ns_to_us(step.end - step.begin), ns_to_us(m.compute), ns_to_us(m.comm), m.overlap_percent(),
                ns_to_us(m.exposed_comm()), ns_to_us(m.idle()));
  }
  TraceMeta meta;
  meta.backend = "sim";
  meta.world_size = config.world;
  meta.device_name = device.name;
  meta.device_memory_bytes = static_cast<std::int64_t>(device.memory_bytes);
  if (!options.trace_path.empty()) {
    write_chrome_trace(options.trace_path, trace, meta);
    std::printf("trace: %s (open it in ui.perfetto.dev)\n", options.trace_path.c_str());
  }
  if (!options.trace_dir.empty()) {
    // Holistic Trace Analysis reads a folder with one file per rank, each naming its rank.
    std::filesystem::create_directories(options.trace_dir);
    for (int r = 0; r < config.world; ++r)
      write_chrome_trace(std::filesystem::path(options.trace_dir) / ("rank" + std::to_string(r) + ".json"), trace, meta, r);
    std::printf("per-rank traces: %s/rank0..%d.json (for Holistic Trace Analysis)\n", options.trace_dir.c_str(),
                config.world - 1);
  }
  return 0;
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "Run a job on the sim device and report its timeline");
  cmd->add_option("--demo", options->demo, "The demo to run")->check(CLI::IsMember({"streams"}));
  cmd->add_option("--world", options->world, "Number of ranks")->check(CLI::Range(1, 1024));
  cmd->add_option("--mode", options->mode, "sync, async, or both (one step each)")
      ->check(CLI::IsMember({"sync", "async", "both"}));
  cmd->add_option("--device-preset", options->device_preset, "Device preset (see `fsdplab presets`)");
  cmd->add_option("--link-preset", options->link_preset, "Link preset; default: the device preset's link");
  cmd->add_option("--presets", options->presets_file, "Preset file to use instead of the built-in one");
  cmd->add_option("--trace", options->trace_path, "Write a Chrome/Perfetto trace JSON of all ranks here");
  cmd->add_option("--trace-dir", options->trace_dir, "Write one trace per rank here (rank0.json ...), for HTA");
  cmd->add_option("--layers", options->layers, "Demo: number of layers")->check(CLI::Range(1, 1000));
  cmd->add_option("--width", options->width, "Demo: layer width")->check(CLI::Range(1, 65536));
  cmd->add_option("--tokens", options->tokens, "Demo: rows of the activations")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--dtype", options->dtype, "Demo: f32 or bf16")->check(CLI::IsMember({"f32", "bf16"}));
  cmd->callback([options] { run_streams_demo(*options); });
}

int run_default_job() { return run_streams_demo(RunOptions{}); }

}  // namespace fsdplab::app
