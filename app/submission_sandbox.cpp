// submission_sandbox.cpp — the submission's fsdplab, started under Landlock (submission_sandbox.hpp).
//
// [Note: what a submission's code may do]
// A submission's fsdplab is built from the student's nine student.cpp and this tree's libraries, so the student's
// code runs inside the grader: a static initialiser runs before main, a task's method in each check's process. Run
// with the grader's rights, it could write anywhere the TA can: another student's grades/*.json, the held-out cases,
// this tree. So grade_submission starts it here, under a Landlock ruleset it cannot undo (no_new_privs, inherited by
// every process it starts), which forbids making, changing or removing a file anywhere but beneath one scratch folder
// (the checks' scratch folders and the grade's JSON go there; the parent moves the JSON to where --json asked, and
// reads nothing else back), and, where the kernel's ABI allows, binding or connecting TCP (no sending a held-out case
// away) and signalling a process outside the sandbox (the TA's shell, the grader waiting for it). Reading is left
// open: the grader reads the tree, the build, the held-out cases and the system's libraries, and a list of those
// that holds on every course's machine is more than this lab should guess.
// What stays possible: writing the grade it is computing (its own JSON and text; a student can forge their own
// grade, not another's), and printing what it can read into its own grade text. grader/README.md says so.
// The ruleset is built before fork, so the child only calls prctl, landlock_restrict_self and execve (a forked
// child of a threaded process may call nothing that takes a lock).
#include "app/submission_sandbox.hpp"

#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <string_view>

#include "engine/runtime/error.hpp"
#include "engine/trace/tcp_socket.hpp"  // OwnedFd

extern char** environ;

namespace fsdplab::app {
namespace fs = std::filesystem;
namespace {

// The kernel's ABI, as linux/landlock.h grew after the Debian 12 header this builds with (ABI 2): the ruleset's
// fields and the rights of ABI 3 (truncate), 4 (TCP) and 6 (scopes). A kernel reads only the fields it knows, and
// takes a longer struct whose unknown fields are zero.
struct RulesetAttr {
  std::uint64_t handled_access_fs = 0;
  std::uint64_t handled_access_net = 0;  // ABI 4
  std::uint64_t scoped = 0;              // ABI 6
};
constexpr std::uint64_t kAccessFsTruncate = 1ULL << 14;        // ABI 3
constexpr std::uint64_t kAccessNetBindTcp = 1ULL << 0;         // ABI 4
constexpr std::uint64_t kAccessNetConnectTcp = 1ULL << 1;      // ABI 4
constexpr std::uint64_t kScopeAbstractUnixSocket = 1ULL << 0;  // ABI 6
constexpr std::uint64_t kScopeSignal = 1ULL << 1;              // ABI 6

// Every right that makes, changes or removes a file: the ruleset handles these (denied unless a rule allows them),
// and no others (reading and executing stay open).
std::uint64_t write_rights(int abi) {
  std::uint64_t rights = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                         LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR |
                         LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                         LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2) rights |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) rights |= kAccessFsTruncate;
  return rights;
}

// The rights that apply to a file rather than a folder (a rule on /dev/null may name only these).
std::uint64_t file_write_rights(int abi) { return LANDLOCK_ACCESS_FS_WRITE_FILE | (abi >= 3 ? kAccessFsTruncate : 0); }

void allow(int ruleset, const fs::path& path, std::uint64_t rights) {
  const OwnedFd target(::open(path.c_str(), O_PATH | O_CLOEXEC));
  if (!target.open()) fail("cannot open '", path.string(), "' to allow writes there: ", std::strerror(errno));
  landlock_path_beneath_attr rule{};
  rule.allowed_access = rights;
  rule.parent_fd = target.fd();
  if (::syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0) != 0)
    fail("cannot allow writes in '", path.string(), "' (landlock_add_rule): ", std::strerror(errno));
}

// The ruleset of [Note: what a submission's code may do], for `abi` (its descriptor is close-on-exec).
OwnedFd make_ruleset(int abi, const fs::path& writable) {
  RulesetAttr attr;
  attr.handled_access_fs = write_rights(abi);
  if (abi >= 4) attr.handled_access_net = kAccessNetBindTcp | kAccessNetConnectTcp;
  if (abi >= 6) attr.scoped = kScopeAbstractUnixSocket | kScopeSignal;
  OwnedFd ruleset(static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0)));
  if (!ruleset.open()) fail("cannot make a Landlock ruleset (ABI ", abi, "): ", std::strerror(errno));
  allow(ruleset.fd(), writable, write_rights(abi));
  allow(ruleset.fd(), "/dev/null", file_write_rights(abi));
  return ruleset;
}

// Writes `text` to stderr with write(2) alone (all a forked child of a threaded parent may call before execve).
void say_from_child(std::string_view text) {
  while (!text.empty()) {
    const ssize_t wrote = ::write(STDERR_FILENO, text.data(), text.size());
    if (wrote <= 0) return;
    text.remove_prefix(static_cast<std::size_t>(wrote));
  }
}

}  // namespace

SandboxSupport sandbox_support() {
  const long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi > 0) return {static_cast<int>(abi), ""};
  switch (errno) {
    case ENOSYS:
      return {0, "this kernel has no Landlock (Linux 5.13 or later has it)"};
    case EOPNOTSUPP:
      return {0, "this kernel was built with Landlock but boots with it off (lsm= on its command line)"};
    default:
      return {0, std::string("Landlock cannot be used here: ") + std::strerror(errno)};
  }
}

std::string sandbox_summary(const SandboxSupport& support, const fs::path& writable) {
  if (support.abi == 0)
    return "the submission's code runs with your rights: " + support.why_not + "; grade in a container or as a user " +
           "that can write only the build folder and the grade files";
  std::string summary = "the submission's code may write only in '" + writable.string() + "'";
  if (support.abi >= 4) summary += ", open no TCP connection";
  if (support.abi >= 6) summary += ", signal no process but its own";
  return summary + " (Landlock ABI " + std::to_string(support.abi) + ")";
}

int run_sandboxed(const std::vector<std::string>& args, const fs::path& writable, const std::vector<std::string>& env) {
  check(!args.empty() && fs::path(args[0]).is_absolute(), "run_sandboxed: expected a program's absolute path");
  const SandboxSupport support = sandbox_support();
  const OwnedFd ruleset = support.abi > 0 ? make_ruleset(support.abi, writable) : OwnedFd();
  // Everything the child needs, made before fork.
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view name = std::string_view(*entry).substr(0, std::string_view(*entry).find('='));
    bool replaced = false;
    for (const std::string& setting : env)
      replaced |= setting.compare(0, name.size() + 1, std::string(name) + "=") == 0;
    if (!replaced) environment.emplace_back(*entry);
  }
  environment.insert(environment.end(), env.begin(), env.end());
  std::vector<char*> argv, envp;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  for (const std::string& setting : environment) envp.push_back(const_cast<char*>(setting.c_str()));
  envp.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();

  const pid_t pid = ::fork();
  if (pid < 0) fail("cannot start ", args[0], ": fork: ", std::strerror(errno));
  if (pid == 0) {
    if (ruleset.open()) {
      if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
          ::syscall(SYS_landlock_restrict_self, ruleset.fd(), 0) != 0) {
        say_from_child(
            "fsdplab grade --submission: cannot restrict the submission's fsdplab (landlock_restrict_self); "
            "it was not started\n");
        ::_exit(126);
      }
    }
    ::execve(argv[0], argv.data(), envp.data());
    say_from_child("fsdplab grade --submission: cannot start the submission's fsdplab (execve)\n");
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) fail("waiting for ", args[0], ": ", std::strerror(errno));
  }
  return status;
}

}  // namespace fsdplab::app
