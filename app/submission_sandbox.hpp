// submission_sandbox.hpp — how `fsdplab grade --submission` starts the submission's own fsdplab, the process that
// runs a student's code (its static initialisers before main, its tasks in every check): restricted by Linux's
// Landlock so that it writes nowhere but one scratch folder, opens no TCP connection and signals no process outside
// its own. See [Note: what a submission's code may do] in submission_sandbox.cpp.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace fsdplab::app {

// What this kernel offers: the Landlock ABI version (1 on Linux 5.13; 4 adds TCP, 6 signals), 0 when it has none,
// and then why ("the kernel was built without Landlock, or boots with it off", ...).
struct SandboxSupport {
  int abi = 0;
  std::string why_not;
};
SandboxSupport sandbox_support();

// What a sandboxed child is held to, said in one line for the grader's log ("writes only in '/tmp/x', no TCP, no
// signal outside its own processes (Landlock ABI 7)"), or why it is not held at all.
std::string sandbox_summary(const SandboxSupport& support, const std::filesystem::path& writable);

// Starts the program `args[0]` (a path) with `args`, this process's stdin, stdout and stderr, and its environment
// with each "NAME=value" of `env` set; on a kernel with Landlock it may create, change or remove files only beneath
// `writable` (and write /dev/null), and, as the ABI allows, neither bind nor connect TCP nor signal a process that is
// not its own or its children's. Waits for it and returns its wait status (waitpid's). An Error when it cannot start.
int run_sandboxed(const std::vector<std::string>& args, const std::filesystem::path& writable,
                  const std::vector<std::string>& env);

}  // namespace fsdplab::app
