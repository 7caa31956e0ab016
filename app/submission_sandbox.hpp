// submission_sandbox.hpp — how `fsdplab grade --submission` starts the submission's own fsdplab, the process that
// runs a student's code (its static initialisers before main, its tasks in every check): restricted by Linux's
// Landlock so that it reads only the system's files and what its grading reads, writes nowhere but one scratch
// folder, opens no TCP connection and signals no process outside its own. See [Note: what a submission's code may
// do] in submission_sandbox.cpp.
#pragma once
#include <sys/types.h>

#include <cstdint>
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

// What a sandboxed program may touch besides the system's files (system_files).
struct SandboxRules {
  std::filesystem::path writable;               // read, write, make and remove beneath it: a scratch folder
  std::vector<std::filesystem::path> readable;  // read and run beneath each folder, or the file itself
  std::uint64_t memory_bytes = 0;               // each process's address space (RLIMIT_AS), 0 for no limit
  std::uint64_t cpu_seconds = 0;                // each process's CPU time (RLIMIT_CPU), 0 for no limit
};

// The files every program here reads and runs: the system's folders that exist (/usr, /lib, /lib32, /lib64,
// /libx32, /bin, /sbin, /etc, /proc, /sys), the device files a program opens (/dev/null, /dev/zero, /dev/full,
// /dev/random, /dev/urandom), and each folder this process loaded a shared library from (a toolkit installed
// elsewhere, in /opt say). Not the users' folders, /tmp, /opt (where a course may keep its files), /srv, /mnt, /media
// or the rest of /dev (its shared memory among them).
std::vector<std::filesystem::path> system_files();

// What a sandboxed child is held to, said in one line for the grader's log ("the submission's code may read only the
// system's files and '/b', write only in '/tmp/x', open no TCP connection, signal no process but its own (Landlock
// ABI 7)"), or why it is not held at all.
std::string sandbox_summary(const SandboxSupport& support, const SandboxRules& rules);

// Starts the program `args[0]` (an absolute path) with `args`, this process's stdin, stdout and stderr (or, where
// `output` is a descriptor, stdin from /dev/null and stdout and stderr into `output`), and its environment with each
// "NAME=value" of `env` set, each of its processes held to `rules.memory_bytes` and `rules.cpu_seconds`. On a kernel
// with Landlock (`support`, from sandbox_support) it may read and run only system_files() and `rules.readable`, create,
// change or remove files only beneath `rules.writable` (and write /dev/null), and, as the ABI allows, neither bind nor
// connect TCP nor signal a process that is not its own or its children's. Returns its pid, for waitpid; an Error when
// it cannot start.
pid_t start_sandboxed(const SandboxSupport& support, const std::vector<std::string>& args, const SandboxRules& rules,
                      const std::vector<std::string>& env, int output = -1);

}  // namespace fsdplab::app
