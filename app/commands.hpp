// commands.hpp — the fsdplab subcommands, one file each. Each add_* registers its options on the
// CLI and the callback that runs it; main.cpp only assembles them.
#pragma once
#include <CLI/CLI.hpp>

namespace fsdplab::app {

void add_run_command(CLI::App& app);
void add_presets_command(CLI::App& app);
void add_devices_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_gui_command(CLI::App& app);
void add_view_command(CLI::App& app);
void add_grade_command(CLI::App& app);
void add_report_command(CLI::App& app);

// The job `fsdplab` runs when given no subcommand: the dashboard on the default run, or without a
// display the same SYNC and ASYNC runs headless (cmd_gui.cpp).
int run_default_job();

}  // namespace fsdplab::app
