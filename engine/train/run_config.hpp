// run_config.hpp — everything a training run is told: model, data, optimizer, steps, files.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include "engine/optim/optimizer.hpp"
#include "engine/runtime/dtype.hpp"

namespace fsdplab {

// sim: nodes of `ranks_per_node` consecutive ranks, joined by the link preset `inter_node_link`, so a collective
// whose group spans nodes runs at that link's pace (NodeLayout, engine/runtime/cost_model.hpp); 0 ranks per node:
// every rank on one node. `run`, `gui` and `bench --what overlap` take it as --ranks-per-node and --inter-node-link.
struct NodePlacement {
  int ranks_per_node = 0;
  std::string inter_node_link = "ib-ndr400";

  // "nodes of 2 ranks, nvlink4 within a node, ib-ndr400 between nodes" (`within_link` left out where empty), as
  // run, the dry-run report and the dashboard's title say it; empty on one node.
  std::string describe(const std::string& within_link) const {
    if (ranks_per_node <= 0) return "";
    return "nodes of " + std::to_string(ranks_per_node) + " ranks, " +
           (within_link.empty() ? "" : within_link + " within a node, ") + inter_node_link + " between nodes";
  }
};

struct RunConfig {
  std::string model = "toy";  // toy | mlp | gpt2 | llama
  std::string preset;         // gpt2, llama: a named size (gpt2_preset, llama_preset); empty: "test-tiny"
  std::int64_t mlp_width = 64;
  int mlp_depth = 4;
  // FSDP's wrap policy (model_factory.hpp): block, linear, nested (both) or model (one unit).
  std::string wrap = "block";
  int world = 1;
  int steps = 20;
  std::uint64_t seed = 0;
  std::int64_t batch = 8;  // global rows (sequences) per step, split over the ranks
  // Gradient accumulation (FSDP runs): each rank's rows go through forward and backward in this many
  // micro-batches, gradients summed unsharded and reduced once, after the last (PyTorch's no_sync).
  int accumulate = 1;
  std::int64_t seq = 0;    // gpt2, llama: tokens per sequence; 0: the model's context length
  // gpt2: wte's rows in storage are the vocabulary rounded up to a multiple of this ([Note: the padded
  // vocabulary] in engine/nn/gpt2_model.hpp); 1 stores it unpadded; 0: the preset's (128, the test presets 64).
  std::int64_t vocab_multiple = 0;
  // gpt2, llama: which attention computes (engine/nn/causal_attention.hpp): auto (flash in bf16, exact in f32),
  // exact or flash.
  std::string attention = "auto";
  std::string optimizer = "adamw";
  double lr = 1e-3;
  double momentum = 0;     // sgd only; every other hyper-parameter is PyTorch's default
  // Gradient-norm clipping before each update (torch.nn.utils.clip_grad_norm_): the whole model's gradient scaled
  // to this 2-norm where it is larger; 0: no clipping. Under FSDP the norm is summed across shards ([Note: clipping
  // a sharded gradient], engine/fsdp/sharded_optimizer_reference.cpp).
  double clip_grad_norm = 0;
  // The dtype the single-rank baseline computes in: f32, or bf16 mixed precision as torch.autocast trains
  // (baseline_parameters.hpp: bf16 copies of the f32 master weights compute, their bf16 gradients are
  // widened for the f32 optimizer step). FSDP runs compute in FsdpOptions::param_dtype and refuse this
  // set (fsdp_run_plan.cpp); the command line's --precision sets whichever the run is.
  DType baseline_precision = DType::f32;
  std::string data_file;   // gpt2, llama: a uint16 token file instead of synthetic tokens
  // The device each rank computes on (runtime/device_factory.hpp): sim, cuda, or auto (cuda where a GPU
  // is usable). The deterministic sim device unless asked, as on the command line (where --comm nccl alone asks
  // for cuda).
  std::string device = "sim";
  // How the ranks exchange data: local (threads of this process; on the cuda device every rank shares GPU
  // `gpu`, the collectives are device-to-device copies and a reduction kernel), mpi (a process per rank under
  // mpirun, sim device) or nccl (a GPU per rank, cuda device).
  std::string comm = "local";
  int gpu = 0;
  // How long a rank waiting in a collective lets its peers go without progress before the run fails, each
  // rank saying what it waited for (LocalWorldOptions::timeout; NcclAbortGroup's watchdog). A tool that
  // slows the GPU many times over, such as compute-sanitizer, needs more.
  std::chrono::milliseconds comm_timeout{5000};
  // cuda with local comm: each collective first holds its stream for the link preset's time, so the
  // overlap of a workstation with that link shows with every rank on one GPU (cuda_device.hpp).
  bool emulate_link = false;
  // cuda: trace with CUPTI (kernel-level, labelled by op); false: the trace shows each op's CUDA-event span.
  bool cupti = true;
  // cuda with local comm: each rank computes on its own equal share of the GPU's SMs, as on a GPU of its own
  // (engine/cuda/sm_partition.hpp); false: the ranks' kernels share every SM. Where the driver cannot split
  // them they share every SM with a warning, unless `sm_split_required` (then the run fails, saying why).
  bool sm_split = true;
  bool sm_split_required = false;
  // cuda: how many runs train on the same GPUs at once (the dashboard's side-by-side runs) and this run's place
  // among them. With the SMs split, each run's ranks split the run's own share, so no two ranks share SMs.
  int runs_on_gpu = 1;
  int run_index_on_gpu = 0;
  std::string device_preset = "h100-sxm";  // sim: the device simulated; cuda: its cost model's figures
  std::string link_preset;  // empty: the device preset's default link
  NodePlacement nodes;  // sim only
  // The preset file the caller read its PresetCatalog from (empty: the built-in one): an input the run's
  // outputs must not overwrite (check_run_request).
  std::string presets_file;
  std::string losses_file;  // CSV step,loss
  std::string trace_file;
  std::string trace_dir;    // a trace file per rank (rank0.json, ...)
  std::string save_init;    // folders: model.safetensors + config.json
  std::string load_init;
  std::string save_final;
  // Training checkpoints (FSDP runs; training_checkpoint.hpp): written to `checkpoint_dir` every
  // `checkpoint_every` steps (0: only after the last step) and after the last; `resume_dir` continues
  // from one, up to `steps` in all; with `reshard`, from one of another world size, strategy or wrap.
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  std::string resume_dir;
  bool reshard = false;
  // A step whose loss is NaN or infinite stops the run with an Error naming it, unless this is set.
  bool allow_nonfinite = false;

  OptimizerSpec optimizer_spec() const { return {optimizer, lr, momentum}; }
};

}  // namespace fsdplab
