#include "engine/train/stream_demo.hpp"

#include <algorithm>
#include <cstring>

#include "engine/runtime/error.hpp"
#include "engine/tensor/matmul.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

std::string_view exec_mode_name(ExecMode m) { return m == ExecMode::sync ? "SYNC" : "ASYNC"; }

namespace {

// One rank's state for one step.
struct Rank {
  SimDevice* device;
  Tensor shard;                    // this rank's 1/W of every layer, [layers, width*width/W]
  Tensor activations;              // the current layer input
  std::vector<Tensor> full;        // the gathered weight of each layer, freed after use
  std::vector<Event> gathered;     // recorded after layer i's gather
  std::vector<Event> consumed;     // recorded after layer i's matmul: its full buffer may be reused
};

class Demo {
 public:
  Demo(const StreamDemoConfig& config, std::vector<SimDevice*> devices) : config_(config) {
    const std::int64_t chunk = config.width * config.width / config.world;
    for (std::size_t r = 0; r < devices.size(); ++r) {
      Rank rank{devices[r], Tensor::empty(*devices[r], {config.layers, chunk}, config.dtype, MemTag::param_shard,
                                          "weight shard"),
                {}, {}, {}, {}};
      // Deterministic weights and inputs: rank r's shard of layer i is filled from (i, r).
      std::vector<float> values(static_cast<std::size_t>(rank.shard.numel()));
      for (std::size_t k = 0; k < values.size(); ++k)
        values[k] = 0.01f * static_cast<float>((k * 2654435761u + r * 97) % 201) / 100.f - 0.01f;
      rank.shard.copy_from(values);
      ranks_.push_back(std::move(rank));
    }
  }

  StreamDemoStep step(int index, ExecMode mode) {
    const Lane gather_lane = mode == ExecMode::async ? Lane::all_gather : Lane::compute;
    StreamDemoStep result{mode, 0, 0, {}};
    for (Rank& rank : ranks_) {
      rank.device->synchronize();
      result.begin = std::max(result.begin, rank.device->host_time());
      rank.full.assign(static_cast<std::size_t>(config_.layers), Tensor());
      rank.gathered.assign(static_cast<std::size_t>(config_.layers), Event("gathered"));
      rank.consumed.assign(static_cast<std::size_t>(config_.layers), Event("consumed"));
      rank.activations = Tensor::empty(*rank.device, {config_.tokens, config_.width}, config_.dtype,
                                       MemTag::activation, "activations");
      std::vector<float> x(static_cast<std::size_t>(rank.activations.numel()), 0.5f);
      rank.activations.copy_from(x);
    }
    all_gather(index, 0, gather_lane);
    for (int layer = 0; layer < config_.layers; ++layer) {
      // ASYNC prefetches the next layer's weight before computing this one; SYNC gathers it after.
      if (mode == ExecMode::async && layer + 1 < config_.layers) all_gather(index, layer + 1, gather_lane);
      for (Rank& rank : ranks_) forward(index, rank, layer);
      if (mode == ExecMode::sync && layer + 1 < config_.layers) all_gather(index, layer + 1, gather_lane);
    }
    for (Rank& rank : ranks_) {
      rank.device->synchronize();
      result.end = std::max(result.end, rank.device->host_time());
      double sum = 0;
      for (float v : rank.activations.to_vector()) sum += v;
      result.output_sum.push_back(sum);
      rank.activations = Tensor();
    }
    return result;
  }

 private:
  // The collective: every rank's op starts at the same virtual time, when the slowest rank's stream
  // is ready, and each rank's full buffer receives every rank's shard.
  void all_gather(int step, int layer, Lane lane) {
    const auto i = static_cast<std::size_t>(layer);
    SimTime start = 0;
    for (Rank& rank : ranks_) {
      LabelScope labels(*rank.device, {step, layer, "forward"});
      rank.full[i] = Tensor::empty(*rank.device, {config_.width, config_.width}, config_.dtype, MemTag::param_full,
                                   "layer " + std::to_string(layer) + " full weight");
      // The buffer may reuse the block of the layer freed two layers ago: wait until its matmul is done.
      if (layer >= 2) rank.device->wait(lane, rank.consumed[i - 2]);
      start = std::max(start, rank.device->earliest_start(lane));
    }
    const std::int64_t full_bytes = ranks_[0].full[i].nbytes();
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      Rank& rank = ranks_[r];
      LabelScope labels(*rank.device, {step, layer, "forward"});
      OpSpec spec;
      spec.name = "all_gather layer " + std::to_string(layer);
      spec.category = OpCategory::all_gather;
      spec.duration = rank.device->cost_model().collective(OpCategory::all_gather, full_bytes, config_.world);
      spec.not_before = start;
      spec.bytes_moved = full_bytes;
      const Tensor own = rank.shard.rows(layer, 1);
      spec.reads = {own.access()};
      spec.writes = {rank.full[i].access()};
      rank.device->launch(lane, std::move(spec), [this, &rank, i, layer] { copy_shards(rank.full[i], layer); });
      rank.device->record(rank.gathered[i], lane);
    }
  }

  // The numerics of one rank's all-gather: its full buffer receives every rank's shard, in rank order.
  void copy_shards(const Tensor& full, int layer) const {
    const auto chunk_bytes = static_cast<std::size_t>(full.nbytes()) / ranks_.size();
    for (std::size_t r = 0; r < ranks_.size(); ++r)
      std::memcpy(full.raw() + r * chunk_bytes, ranks_[r].shard.rows(layer, 1).raw(), chunk_bytes);
  }

  void forward(int step, Rank& rank, int layer) {
    const auto i = static_cast<std::size_t>(layer);
    LabelScope labels(*rank.device, {step, layer, "forward"});
    rank.device->wait(Lane::compute, rank.gathered[i]);
    Tensor out = Tensor::empty(*rank.device, {config_.tokens, config_.width}, config_.dtype, MemTag::activation,
                               "activations");
    matmul(rank.device->stream(Lane::compute), rank.activations, rank.full[i], out);
    rank.device->record(rank.consumed[i], Lane::compute);
    rank.activations = std::move(out);
    rank.full[i] = Tensor();  // reshard: the full weight goes back to the allocator
  }

  StreamDemoConfig config_;
  std::vector<Rank> ranks_;
};

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

  std::vector<std::unique_ptr<SimDevice>> devices;
  std::vector<SimDevice*> raw;
  for (int r = 0; r < config.world; ++r) {
    devices.push_back(std::make_unique<SimDevice>(r, device, link));
    if (!sinks.empty()) devices.back()->add_sink(sinks[static_cast<std::size_t>(r)]);
    raw.push_back(devices.back().get());
  }
  std::vector<StreamDemoStep> steps;
  {
    Demo demo(config, raw);
    for (std::size_t s = 0; s < config.modes.size(); ++s) steps.push_back(demo.step(static_cast<int>(s), config.modes[s]));
  }
  return steps;
}

}  // namespace fsdplab
