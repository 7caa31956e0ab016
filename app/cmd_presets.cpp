// `fsdplab presets` — the device and link presets the sim device's cost model can use.
#include <algorithm>
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
    // The name columns as wide as their longest entry (a file's presets may have longer names than ours).
    int name_width = 12, link_width = 4;
    for (const auto& name : c.device_names()) {
      name_width = std::max(name_width, static_cast<int>(name.size()));
      link_width = std::max(link_width, static_cast<int>(c.device(name).default_link.size()));
    }
    for (const auto& name : c.link_names()) name_width = std::max(name_width, static_cast<int>(name.size()));
    std::printf("devices:\n  %-*s %10s %10s %10s  %-*s  %s\n", name_width, "name", "bf16 TF/s", "f32 TF/s",
                "mem TB/s", link_width, "link", "description");
    for (const auto& name : c.device_names()) {
      const DevicePreset& d = c.device(name);
      std::printf("  %-*s %10.1f %10.1f %10.2f  %-*s  %s\n", name_width, name.c_str(), d.matmul_flops_bf16 / 1e12,
                  d.matmul_flops_f32 / 1e12, d.memory_bandwidth / 1e12, link_width, d.default_link.c_str(),
                  d.description.c_str());
    }
    std::printf("links:\n  %-*s %10s %10s  %s\n", name_width, "name", "GB/s", "lat us", "description");
    for (const auto& name : c.link_names()) {
      const LinkPreset& l = c.link(name);
      std::printf("  %-*s %10.1f %10.1f  %s\n", name_width, name.c_str(), l.bandwidth / 1e9, l.latency_us,
                  l.description.c_str());
    }
  });
}

}  // namespace fsdplab::app
