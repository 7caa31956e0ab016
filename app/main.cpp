// fsdplab — an interactive teaching lab for Fully Sharded Data Parallel training.
#include <iostream>

#include "app/commands.hpp"
#include "engine/runtime/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "fsdplab: a teaching lab for Fully Sharded Data Parallel training.\n"
      "With no subcommand it runs the default job: the streams demo on the sim device with 2 ranks, "
      "SYNC against ASYNC."};
  app.require_subcommand(0, 1);
  fsdplab::app::add_run_command(app);
  fsdplab::app::add_presets_command(app);
  fsdplab::app::add_devices_command(app);
  fsdplab::app::add_bench_command(app);
  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) return fsdplab::app::run_default_job();
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const fsdplab::Error& e) {
    std::cerr << "fsdplab: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
