#include "engine/train/stream_demo.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "engine/comm/local_comm.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/host_memory_limit.hpp"
#include "engine/runtime/sim_device.hpp"
#include "engine/tensor/matmul.hpp"
#include "engine/tensor/tensor.hpp"
#include "engine/train/rank_launch.hpp"

namespace fsdplab {

namespace {

// What one rank measured of one step; the steps' reports combine every rank's.
struct RankStep {
  SimTime begin = 0;
  SimTime end = 0;
  double output_sum = 0;
};

// One rank of the demo, run on its own thread.
class DemoRank {
 public:
  DemoRank(const StreamDemoConfig& config, Device& device, Communicator& comm)
      : config_(config), device_(device), comm_(comm) {
    const std::int64_t chunk = config.width * config.width / config.world;
    shard_ = Tensor::empty(device, {config.layers, chunk}, config.dtype, MemTag::param_shard, "weight shard");
    // Deterministic weights: rank r's shard of layer i is filled from (element, r).
    std::vector<float> values(static_cast<std::size_t>(shard_.numel()));
    for (std::size_t k = 0; k < values.size(); ++k)
      values[k] = 0.01f * static_cast<float>((k * 2654435761u + static_cast<std::size_t>(comm.rank()) * 97) % 201) /
                      100.f -
                  0.01f;
    shard_.copy_from(values);
  }

  RankStep step(int index, OverlapMode mode) {
    const Lane gather_lane = mode == OverlapMode::async ? Lane::all_gather : Lane::compute;
    const auto layers = static_cast<std::size_t>(config_.layers);
    device_.synchronize();
    RankStep result{device_.host_time(), 0, 0};
    full_.assign(layers, Tensor());
    gathered_.assign(layers, Event("gathered"));
    consumed_.assign(layers, Event("consumed"));
    activations_ = Tensor::empty(device_, {config_.tokens, config_.width}, config_.dtype, MemTag::activation,
                                 "activations");
    activations_.copy_from(std::vector<float>(static_cast<std::size_t>(activations_.numel()), 0.5f));

    all_gather(index, 0, gather_lane);
    for (int layer = 0; layer < config_.layers; ++layer) {
      // ASYNC prefetches the next layer's weight before computing this one; SYNC gathers it after.
      if (mode == OverlapMode::async && layer + 1 < config_.layers) all_gather(index, layer + 1, gather_lane);
      forward(index, layer);
      if (mode == OverlapMode::sync && layer + 1 < config_.layers) all_gather(index, layer + 1, gather_lane);
    }
    device_.synchronize();
    result.end = device_.host_time();
    for (float v : activations_.to_vector()) result.output_sum += v;
    activations_ = Tensor();
    return result;
  }

 private:
  void all_gather(int step, int layer, Lane lane) {
    const auto i = static_cast<std::size_t>(layer);
    LabelScope labels(device_, {step, layer, "forward"});
    full_[i] = Tensor::empty(device_, {config_.width, config_.width}, config_.dtype, MemTag::param_full,
                             "layer " + std::to_string(layer) + " full weight");
    // The buffer may reuse the block of the layer freed two layers ago: wait until its matmul is done.
    if (layer >= 2) device_.wait(lane, consumed_[i - 2]);
    // The collective starts on every rank when the slowest rank's stream is ready: the wait between ranks.
    comm_.all_gather(device_.stream(lane), shard_.rows(layer, 1), full_[i]);
    device_.record(gathered_[i], lane);
  }

  void forward(int step, int layer) {
    const auto i = static_cast<std::size_t>(layer);
    LabelScope labels(device_, {step, layer, "forward"});
    device_.wait(Lane::compute, gathered_[i]);
    Tensor out = Tensor::empty(device_, {config_.tokens, config_.width}, config_.dtype, MemTag::activation,
                               "activations");
    matmul(device_.stream(Lane::compute), activations_, full_[i], out);
    device_.record(consumed_[i], Lane::compute);
    activations_ = std::move(out);
    full_[i] = Tensor();  // reshard: the full weight goes back to the allocator
  }

  const StreamDemoConfig& config_;
  Device& device_;
  Communicator& comm_;
  Tensor shard_;             // this rank's 1/W of every layer, [layers, width*width/W]
  Tensor activations_;       // the current layer input
  std::vector<Tensor> full_;  // the gathered weight of each layer, freed after use
  std::vector<Event> gathered_;  // recorded after layer i's gather
  std::vector<Event> consumed_;  // recorded after layer i's matmul: its full buffer may be reused
};

// The sim device keeps its tensors in host RAM, as fsdp_run_plan.cpp's check says for training: the ranks of
// this process (of all the run's processes on this host, where ranks are processes) must fit in what they may use
// (RAM, free memory, rlimit or cgroup limit) before any of them starts, rather than one rank dying of
// std::bad_alloc midway. Per rank: its shards, up to three full layers in flight (one
// prefetched, one in use, one waiting for reuse) and two activation buffers. Counted in double: a width
// whose square overflows an int64 is refused here too.
void check_demo_fits_host_memory(const StreamDemoConfig& config, const RankLayout& layout) {
  const auto ranks_here = layout.ranks_here.size();
  const auto width = static_cast<double>(config.width), element = static_cast<double>(dtype_size(config.dtype));
  const double per_rank = element * (static_cast<double>(config.layers) * width * width / config.world +
                                     3 * width * width + 2 * static_cast<double>(config.tokens) * width);
  std::ostringstream who;
  who << "streams demo: " << (layout.processes ? "" : std::to_string(ranks_here) + " ") << "ranks of " << config.layers
      << " layers of " << config.width << "x" << config.width << " and " << config.tokens << " tokens"
      << (layout.processes ? ", one in each process," : "");
  check_ranks_fit_host_memory(layout, per_rank * static_cast<double>(ranks_here), who.str(),
                              "use fewer ranks, layers, tokens or a smaller width");
}

}  // namespace

std::vector<StreamDemoStep> run_stream_demo(const StreamDemoConfig& config, const DevicePreset& device,
                                            const LinkPreset& link, const std::vector<TraceSink*>& sinks) {
  check(config.world >= 1, "streams demo: world size ", config.world, "; expected at least 1");
  check(config.layers >= 1, "streams demo: ", config.layers, " layers; expected at least 1");
  check(config.width > 0 && (config.width * config.width) % config.world == 0, "streams demo: a ", config.width,
        "x", config.width, " layer does not split evenly over ", config.world, " ranks");
  check(config.tokens > 0, "streams demo: ", config.tokens, " tokens; expected at least 1");
  check(sinks.empty() || static_cast<int>(sinks.size()) == config.world, "streams demo: ", sinks.size(),
        " trace sinks for ", config.world, " ranks");

  const auto world = static_cast<std::size_t>(config.world);
  const RankLayout layout = rank_layout(config.comm, config.world, DeviceKind::sim, 0);
  check(layout.world == config.world, "streams demo: ", config.world, " ranks asked, ", layout.world, " launched");
  check_demo_fits_host_memory(config, layout);
  // Each rank's measurements as bytes, so processes can send theirs to the one that reports.
  std::vector<std::string> measured(world);
  run_ranks(layout, [&](RankSeat& seat) {
    const int r = seat.rank();
    const auto rank = static_cast<std::size_t>(r);
    SimDevice dev(r, device, link);
    if (!sinks.empty()) dev.add_sink(sinks[rank]);
    const std::unique_ptr<Communicator> comm = seat.connect(dev);
    DemoRank demo(config, dev, *comm);
    std::vector<RankStep> steps;
    for (std::size_t s = 0; s < config.modes.size(); ++s)
      steps.push_back(demo.step(static_cast<int>(s), config.modes[s]));
    measured[rank].assign(reinterpret_cast<const char*>(steps.data()), steps.size() * sizeof(RankStep));
  });
  const std::vector<std::string> all = gather_for_report(layout, std::move(measured));
  if (all.empty()) return {};  // a process that does not report

  std::vector<StreamDemoStep> steps;
  for (std::size_t s = 0; s < config.modes.size(); ++s) {
    StreamDemoStep step{config.modes[s], 0, 0, {}};
    for (std::size_t r = 0; r < world; ++r) {
      RankStep m;
      check(all[r].size() == config.modes.size() * sizeof m, "streams demo: rank ", r, " sent ", all[r].size(),
            " bytes of measurements; expected ", config.modes.size() * sizeof m);
      std::memcpy(&m, all[r].data() + s * sizeof m, sizeof m);
      step.begin = std::max(step.begin, m.begin);
      step.end = std::max(step.end, m.end);
      step.output_sum.push_back(m.output_sum);
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

}  // namespace fsdplab
