#include "engine/runtime/device_factory.hpp"

#include "engine/runtime/error.hpp"
#include "engine/runtime/sim_device.hpp"

#if FSDPLAB_HAVE_CUDA
#include "engine/cuda/cuda_device.hpp"
#include "engine/cuda/gpu_inventory.hpp"
#endif

namespace fsdplab {

std::optional<std::string> cuda_unavailable() {
#if FSDPLAB_HAVE_CUDA
  // Asked once: the answer does not change while the process runs, and probing costs a driver call.
  static const std::optional<std::string> why = []() -> std::optional<std::string> {
    const GpuInventory inventory = probe_gpus();
    if (inventory.gpus.empty()) return "no usable GPU (" + inventory.why_none + ")";
    return std::nullopt;
  }();
  return why;
#else
  return "this fsdplab was built without the CUDA backend (nvcc was not found when it was configured)";
#endif
}

int usable_gpu_count() {
#if FSDPLAB_HAVE_CUDA
  static const int count = static_cast<int>(probe_gpus().gpus.size());
  return count;
#else
  return 0;
#endif
}

std::string_view device_kind_name(DeviceKind kind) { return kind == DeviceKind::cuda ? "cuda" : "sim"; }

DeviceKind resolve_device(std::string_view choice, bool dry_run) {
  if (choice == "sim") return DeviceKind::sim;
  if (choice == "auto") return dry_run || cuda_unavailable() ? DeviceKind::sim : DeviceKind::cuda;
  if (choice != "cuda") fail("--device '", choice, "'; expected auto, sim or cuda");
  check(!dry_run, "--device cuda with --dry-run: a dry run plans shapes, time and memory on the sim device; "
        "drop --dry-run to train on the GPU, or use --device sim");
  if (auto why = cuda_unavailable()) fail("--device cuda: ", *why, "; use --device sim (or auto)");
  return DeviceKind::cuda;
}

std::unique_ptr<Device> make_device(int rank, const DeviceSpec& spec) {
  if (spec.kind == DeviceKind::sim) {
    SimDeviceOptions options;
    options.dry_run = spec.dry_run;
    options.races = spec.races;
    options.nodes = spec.nodes;
    return std::make_unique<SimDevice>(rank, spec.preset, spec.link, options);
  }
  check(!spec.dry_run, "rank ", rank, ": the cuda device runs real kernels; a dry run is the sim device's");
#if FSDPLAB_HAVE_CUDA
  if (auto why = cuda_unavailable()) fail("rank ", rank, ": cannot use the cuda device: ", *why);
  CudaDeviceOptions options;
  options.gpu = spec.gpu;
  options.emulate_link = spec.emulate_link;
  options.cupti = spec.cupti;
  if (spec.sm_split) {
    options.sm = spec.sm;
  }
  return std::make_unique<CudaDevice>(rank, spec.preset, spec.link, options);
#else
  fail("rank ", rank, ": cannot use the cuda device: ", *cuda_unavailable());
#endif
}

}  // namespace fsdplab
