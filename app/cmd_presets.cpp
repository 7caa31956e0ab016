// `fsdplab presets` — the device and link presets the sim device's cost model can use.
#include <cstdio>

#include "app/cli_checks.hpp"
#include "app/commands.hpp"
#include "engine/runtime/presets.hpp"

namespace fsdplab::app {

void add_presets_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("presets", "List the device and link presets of the sim device's cost model");
  auto file = std::make_shared<std::string>();
  cmd->add_option("--presets", *file, "Read presets from this file instead of the built-in catalogue")
      ->check(non_empty("a preset file"));
  cmd->callback([file] {
    const PresetCatalog c = PresetCatalog::builtin_or_file(*file);
    std::printf("devices:\n  %-12s %10s %10s %10s %9s  %s\n", "name", "bf16 TF/s", "f32 TF/s", "mem TB/s", "link",
                "description");
    for (const auto& name : c.device_names()) {
      const DevicePreset& d = c.device(name);
      std::printf("  %-12s %10.1f %10.1f %10.2f %9s  %s\n", name.c_str(), d.matmul_flops_bf16 / 1e12,
                  d.matmul_flops_f32 / 1e12, d.memory_bandwidth / 1e12, d.default_link.c_str(), d.description.c_str());
    }
    std::printf("links:\n  %-12s %10s %10s  %s\n", "name", "GB/s", "lat us", "description");
    for (const auto& name : c.link_names()) {
      const LinkPreset& l = c.link(name);
      std::printf("  %-12s %10.1f %10.1f  %s\n", name.c_str(), l.bandwidth / 1e9, l.latency_us, l.description.c_str());
    }
  });
}

}  // namespace fsdplab::app
