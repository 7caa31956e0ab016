#include "engine/train/run_device.hpp"

#include "engine/runtime/error.hpp"

namespace fsdplab {

std::string_view sm_split_description(std::string_view choice) {
  if (choice == "off") return "every SM shared";
  if (choice == "on") return "each rank on its own share of the SMs";
  return "each rank on its own share of the SMs where the driver can split them";
}

void set_sm_split(RunConfig& run, std::string_view choice) {
  check(choice == "auto" || choice == "on" || choice == "off", "--sm-split '", choice, "'; expected auto, on or off");
  run.sm_split = choice != "off";
  run.sm_split_required = choice == "on";
}

void check_cuda_options_unused(const RunConfig& run, DeviceKind kind) {
  if (kind != DeviceKind::sim) return;
  check(run.cupti,
        "--cupti off chooses how the cuda device traces its ops (CUPTI or CUDA events); this run is on the "
        "sim device, traced on its virtual clock: drop --cupti or add --device cuda");
  check(run.sm_split && !run.sm_split_required, "--sm-split ", run.sm_split_required ? "on" : "off",
        " splits a GPU's SMs between the ranks sharing it; this run is on the sim device: drop --sm-split or add "
        "--device cuda");
}

void check_whole_nodes(const NodePlacement& nodes, int world) {
  const int per_node = nodes.ranks_per_node;
  check(per_node == 0 || world % per_node == 0, "--ranks-per-node ", per_node,
        " with --world ", world, ": expected whole nodes, a world that is a multiple of the ranks per node");
}

void check_link_used(const std::string& link_preset, int world) {
  check(link_preset.empty() || world > 1, "--link-preset ", link_preset, " with --world ", world,
        ": a single rank has no link, so no collective would take it; drop --link-preset or add --world 2 or more");
}

DeviceSpec run_device_spec(const RunConfig& run, const PresetCatalog& presets, bool dry_run) {
  DeviceSpec spec;
  // auto follows the communicator where it allows one device only: MPI carries the sim device's data, NCCL
  // the GPUs'.
  std::string_view device = run.device;
  if (device == "auto" && run.comm == "mpi") device = "sim";
  if (run.comm == "nccl" && !dry_run) {
    if (auto why = cuda_unavailable())
      fail("--comm nccl runs a rank on each GPU: ", *why, "; here, use --comm local (threads) or --comm mpi "
           "(processes) on the sim device");
    if (device == "auto") device = "cuda";
  }
  spec.kind = resolve_device(device, dry_run);
  spec.preset = presets.device(run.device_preset);
  spec.link = presets.link_for(spec.preset, run.link_preset);
  spec.dry_run = dry_run;
  spec.gpu = run.gpu;
  spec.emulate_link = run.emulate_link;
  spec.cupti = run.cupti;
  spec.sm_split = run.sm_split;
  check(run.runs_on_gpu >= 1 && run.run_index_on_gpu >= 0 && run.run_index_on_gpu < run.runs_on_gpu, "run ",
        run.run_index_on_gpu, " of ", run.runs_on_gpu, " sharing the GPU; expected 0 <= run < runs");
  spec.sm = {run.run_index_on_gpu, run.runs_on_gpu, run.sm_split_required};
  if (run.nodes.ranks_per_node > 0) {
    check(spec.kind == DeviceKind::sim, "--ranks-per-node places the sim device's ranks on nodes; the cuda "
          "device's nodes are the machine's own (drop --ranks-per-node, or use --device sim)");
    spec.nodes = NodeLayout{run.nodes.ranks_per_node, presets.link(run.nodes.inter_node_link, "--inter-node-link")};
  }
  if (spec.kind == DeviceKind::sim) {
    check(!run.emulate_link, "--emulate-link holds a real GPU's collective streams for the link's time; the sim "
          "device always runs its link on the virtual clock (--link-preset picks it); use --device cuda");
    check(run.gpu == 0, "--gpu ", run.gpu, " picks a GPU for the cuda device; this run is on the sim device");
  }
  return spec;
}

}  // namespace fsdplab
