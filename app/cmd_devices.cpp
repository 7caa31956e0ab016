// `fsdplab devices` — the devices a run can use: the sim device always, CUDA GPUs where present; then the commit
// this fsdplab was built from, which a copy carried to a GPU machine cannot learn from git there.
#include <cstdio>

#include "app/build_commit.hpp"
#include "app/commands.hpp"
#include "app/dashboard/device_list.hpp"
#include "app/host_blas_kernel.hpp"

namespace fsdplab::app {

void add_devices_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List the devices a run can use");
  cmd->callback([] {
    const std::vector<std::string> lines = available_devices();
    for (std::size_t i = 0; i < lines.size(); ++i) {
      std::printf("%s\n", lines[i].c_str());
      if (i == 0) std::printf("      %s\n", host_blas_summary().c_str());  // under the sim device's line, the first
    }
    std::printf("fsdplab built from commit %s\n", build_commit().c_str());
  });
}

}  // namespace fsdplab::app
