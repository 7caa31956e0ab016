// `fsdplab devices` — the devices a run can use: the sim device always, CUDA GPUs where present.
#include <cstdio>

#include "app/commands.hpp"
#ifdef FSDPLAB_HAVE_CUDA
#include "engine/cuda/gpu_inventory.hpp"
#endif

namespace fsdplab::app {

void add_devices_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List the devices a run can use");
  cmd->callback([] {
    std::printf("sim   always available: host numerics on a virtual clock (see `fsdplab presets`)\n");
#ifdef FSDPLAB_HAVE_CUDA
    const GpuInventory inventory = probe_gpus();
    std::printf("cuda  built with CUDA runtime %d.%d\n", inventory.runtime_version / 1000,
                inventory.runtime_version % 1000 / 10);
    if (inventory.gpus.empty()) std::printf("      no GPU usable: %s\n", inventory.why_none.c_str());
    for (const GpuInfo& g : inventory.gpus) {
      std::printf("      gpu %d: %s, sm_%d%d, %.1f GiB, %d SMs\n", g.index, g.name.c_str(), g.compute_major,
                  g.compute_minor, g.memory_bytes / (1024.0 * 1024 * 1024), g.multiprocessors);
    }
#else
    std::printf("cuda  not built: nvcc was not found when fsdplab was configured\n");
#endif
  });
}

}  // namespace fsdplab::app
