// `fsdplab devices` — the devices a run can use: the sim device always, CUDA GPUs where present.
#include <cstdio>

#include "app/commands.hpp"
#include "app/dashboard/device_list.hpp"

namespace fsdplab::app {

void add_devices_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List the devices a run can use");
  cmd->callback([] {
    for (const std::string& line : available_devices()) std::printf("%s\n", line.c_str());
  });
}

}  // namespace fsdplab::app
