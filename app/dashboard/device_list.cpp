#include "app/dashboard/device_list.hpp"

#include <cstdio>

#ifdef FSDPLAB_HAVE_CUDA
#include "engine/cuda/gpu_inventory.hpp"
#endif

namespace fsdplab::app {

std::vector<std::string> available_devices() {
  std::vector<std::string> lines = {"sim   always available: host numerics on a virtual clock (see `fsdplab presets`)"};
#ifdef FSDPLAB_HAVE_CUDA
  const GpuInventory inventory = probe_gpus();
  char line[256];
  std::snprintf(line, sizeof line, "cuda  built with CUDA runtime %d.%d", inventory.runtime_version / 1000,
                inventory.runtime_version % 1000 / 10);
  lines.emplace_back(line);
  if (inventory.gpus.empty()) lines.push_back("      no GPU usable: " + inventory.why_none);
  for (const GpuInfo& g : inventory.gpus) {
    std::snprintf(line, sizeof line, "      gpu %d: %s, sm_%d%d, %.1f GiB, %d SMs", g.index, g.name.c_str(),
                  g.compute_major, g.compute_minor, g.memory_bytes / (1024.0 * 1024 * 1024), g.multiprocessors);
    lines.emplace_back(line);
  }
#else
  lines.emplace_back("cuda  not built: nvcc was not found when fsdplab was configured");
#endif
  return lines;
}

}  // namespace fsdplab::app
