// fsdplab — an interactive teaching lab for Fully Sharded Data Parallel training.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <new>
#include <string>
#include <thread>

#include "app/cli_checks.hpp"
#include "app/commands.hpp"
#include "app/host_blas_kernel.hpp"
#include "engine/comm/mpi_comm.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/host_memory_limit.hpp"

namespace {

// A failed command's end: its reason printed, then, under mpirun, the whole MPI world ended, since the other
// processes may be waiting for this one (an option only this process was given, a file only its node lacks).
// Every process of an mpirun runs the same command line, so an option's error is usually every process's: rank 0
// says it and ends the world, and another rank waits a moment before saying its own, by which time it has been
// ended unless the failure was its alone. The line is one write, so two processes' lines never interleave.
int failed(const char* reason) {
  const std::string line = "fsdplab: error: " + std::string(reason) + "\n";
  if (fsdplab::mpi_rank_in_a_world() > 0) std::this_thread::sleep_for(std::chrono::seconds(1));
  std::cerr << line;
  std::cerr.flush();
  fsdplab::mpi_end_world_after_failure(1);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything else: the same losses on every machine ([Note: the same digits on every machine]).
  fsdplab::app::run_on_the_lab_blas_kernel(argv);
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
  fsdplab::app::refuse_unreadable_values(app);
  app.footer(
      "Exit status: 0 when the command did its work (grade: whatever the points); 1 when it failed or refused an "
      "input, the reason on stderr; 2 when the command line could not be read (an unknown option, a value outside "
      "the option's range in this help).");
  try {
    fsdplab::app::refuse_empty_list_items(app, argc, argv);
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) return fsdplab::app::run_default_job();
  } catch (const CLI::RuntimeError& e) {
    // A command that ran and reports its own status (grade: 1 when nothing could be graded, or a mutant was not
    // caught) ends the parse this way too; it is not a command line CLI11 could not read.
    const int status = e.get_exit_code();
    if (status != 0) fsdplab::mpi_end_world_after_failure(status);
    return status;
  } catch (const CLI::ParseError& e) {
    // --help and --version end the parse too, with status 0; CLI11's own codes for the rest (105, 109...) are one
    // code here, as most command-line tools use it: 2, the command line could not be read.
    const int status = app.exit(e) == 0 ? 0 : 2;
    if (status != 0) fsdplab::mpi_end_world_after_failure(status);
    return status;
  } catch (const fsdplab::Error& e) {
    return failed(e.what());
  } catch (const std::bad_alloc&) {
    return failed(fsdplab::out_of_memory_message("in the main thread").c_str());
  } catch (const std::exception& e) {
    // Anything else a library throws (std::filesystem, the JSON reader): said, never an abort.
    return failed(e.what());
  }
  return 0;
}
