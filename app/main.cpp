// fsdplab — an interactive teaching lab for Fully Sharded Data Parallel training.
#include <cstdlib>
#include <iostream>
#include <new>

#include "app/commands.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/host_memory_limit.hpp"

int main(int argc, char** argv) {
  // Ranks sharing a GPU each drive 4 streams, and the dashboard runs two sets of ranks at once. Past the
  // driver's default of 8 hardware work queues, streams of different ranks share one, and a kernel then waits
  // behind another rank's on the same queue, whatever their SMs (cuda.h on green contexts). Set before any
  // thread starts or CUDA reads it; a value the user set is kept.
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  CLI::App app{
      "fsdplab: a teaching lab for Fully Sharded Data Parallel training.\n"
      "With no subcommand it opens the dashboard on the default run (GPT-2 test-small, 2 ranks of the sim "
      "device, SYNC and ASYNC side by side); without a display it runs the same comparison headless."};
  app.require_subcommand(0, 1);
  fsdplab::app::add_run_command(app);
  fsdplab::app::add_presets_command(app);
  fsdplab::app::add_devices_command(app);
  fsdplab::app::add_bench_command(app);
  fsdplab::app::add_gui_command(app);
  fsdplab::app::add_view_command(app);
  fsdplab::app::add_grade_command(app);
  fsdplab::app::add_report_command(app);
  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) return fsdplab::app::run_default_job();
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const fsdplab::Error& e) {
    std::cerr << "fsdplab: error: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "fsdplab: error: " << fsdplab::out_of_memory_message("in the main thread") << "\n";
    return 1;
  } catch (const std::exception& e) {
    // Anything else a library throws (std::filesystem, the JSON reader): said, never an abort.
    std::cerr << "fsdplab: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
