// submission_sandbox.cpp — the submission's fsdplab, started under Landlock (submission_sandbox.hpp).
//
// [Note: what a submission's code may do]
// A submission's fsdplab is built from the student's nine student.cpp and this tree's libraries, so the student's
// code runs inside the grader: a static initialiser runs before main, a task's method in each check's process. Run
// with the grader's rights, it could read and write anything the TA can: another student's submission and
// grades/*.json, the course's files, this tree. So grade_submission starts it here, under a Landlock ruleset it
// cannot undo (no_new_privs, inherited by every process it starts), which forbids
// - reading or running a file but the system's (system_files: the libraries, the tools a check runs, /proc) and what
//   its grading reads (SandboxRules::readable: its build folder, which holds its fsdplab and the labs' sources the
//   reference check reads, and the held-out cases it is graded on);
// - making, changing or removing a file anywhere but beneath one scratch folder (the checks' scratch folders and the
//   grade's JSON go there; the parent moves the JSON to where --json asked, and reads nothing else back);
// - where the kernel's ABI allows, binding or connecting TCP (no sending a held-out case away) and signalling a
//   process outside the sandbox (the TA's shell, the grader waiting for it).
// What stays possible: writing the grade it is computing (its own JSON and text; a student can forge their own
// grade, not another's), and printing what it may read into that text: the held-out cases among it, as any
// autograder's tests are the input the graded code runs on. grader/README.md says so.
// The ruleset is built before fork, so the child makes system calls only (open, dup2, setrlimit, prctl,
// landlock_restrict_self, execve, and write and _exit to report a failure): a forked child of a threaded process
// may call nothing that takes a lock.
#include "app/submission_sandbox.hpp"

#include <fcntl.h>
#include <link.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <set>
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

// Every right that reads or runs a file or lists a folder.
constexpr std::uint64_t kReadRights =
    LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;

// Every right that makes, changes or removes a file.
std::uint64_t write_rights(int abi) {
  std::uint64_t rights = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                         LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR |
                         LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                         LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2) rights |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) rights |= kAccessFsTruncate;
  return rights;
}

// The rights that apply to a file rather than a folder (a rule on a file may name only these).
std::uint64_t file_rights(int abi) {
  return LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE |
         (abi >= 3 ? kAccessFsTruncate : 0);
}

// Allows `rights` beneath the folder `path`, or on the file `path` those of them that apply to a file.
void allow(int abi, int ruleset, const fs::path& path, std::uint64_t rights) {
  const OwnedFd target(::open(path.c_str(), O_PATH | O_CLOEXEC));
  if (!target.open()) fail("cannot open '", path.string(), "' to allow the sandbox in: ", std::strerror(errno));
  std::error_code error;
  landlock_path_beneath_attr rule{};
  rule.allowed_access = fs::is_directory(path, error) ? rights : rights & file_rights(abi);
  rule.parent_fd = target.fd();
  if (::syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0) != 0)
    fail("cannot allow the sandbox in '", path.string(), "' (landlock_add_rule): ", std::strerror(errno));
}

// The ruleset of [Note: what a submission's code may do], for `abi` (its descriptor is close-on-exec).
OwnedFd make_ruleset(int abi, const SandboxRules& rules) {
  RulesetAttr attr;
  attr.handled_access_fs = kReadRights | write_rights(abi);
  if (abi >= 4) attr.handled_access_net = kAccessNetBindTcp | kAccessNetConnectTcp;
  if (abi >= 6) attr.scoped = kScopeAbstractUnixSocket | kScopeSignal;
  OwnedFd ruleset(static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0)));
  if (!ruleset.open()) fail("cannot make a Landlock ruleset (ABI ", abi, "): ", std::strerror(errno));
  for (const fs::path& path : system_files()) allow(abi, ruleset.fd(), path, kReadRights);
  for (const fs::path& path : rules.readable) allow(abi, ruleset.fd(), path, kReadRights);
  allow(abi, ruleset.fd(), rules.writable, kReadRights | write_rights(abi));
  allow(abi, ruleset.fd(), "/dev/null", kReadRights | write_rights(abi));
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

std::vector<fs::path> system_files() {
  std::set<fs::path> files;
  for (const char* path : {"/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/proc",
                           "/sys", "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}) {
    std::error_code error;
    if (fs::exists(path, error)) files.insert(path);
  }
  // The loader names each shared object by the path it opened ("" for the program itself).
  ::dl_iterate_phdr(
      [](dl_phdr_info* object, std::size_t, void* found) {
        const fs::path file = object->dlpi_name == nullptr ? fs::path() : fs::path(object->dlpi_name);
        if (file.is_absolute()) static_cast<std::set<fs::path>*>(found)->insert(file.parent_path());
        return 0;
      },
      &files);
  return {files.begin(), files.end()};
}

std::string sandbox_summary(const SandboxSupport& support, const SandboxRules& rules) {
  if (support.abi == 0)
    return "the submission's code runs with your rights: " + support.why_not + "; grade in a container or as a user " +
           "that can read only the system, the build folder and the cases, and write only the build folder and the " +
           "grade files";
  std::string summary = "the submission's code may read only the system's files";
  for (std::size_t i = 0; i < rules.readable.size(); ++i)
    summary += (i + 1 == rules.readable.size() ? " and '" : ", '") + rules.readable[i].string() + "'";
  summary += ", write only in '" + rules.writable.string() + "'";
  if (support.abi >= 4) summary += ", open no TCP connection";
  if (support.abi >= 6) summary += ", signal no process but its own";
  return summary + " (Landlock ABI " + std::to_string(support.abi) + ")";
}

pid_t start_sandboxed(const SandboxSupport& support, const std::vector<std::string>& args, const SandboxRules& rules,
                      const std::vector<std::string>& env, int output) {
  check(!args.empty() && fs::path(args[0]).is_absolute(), "start_sandboxed: expected a program's absolute path");
  const OwnedFd ruleset = support.abi > 0 ? make_ruleset(support.abi, rules) : OwnedFd();
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
    if (output >= 0) {
      const int nothing = ::open("/dev/null", O_RDONLY);
      if (nothing < 0 || ::dup2(nothing, STDIN_FILENO) < 0 || ::dup2(output, STDOUT_FILENO) < 0 ||
          ::dup2(output, STDERR_FILENO) < 0)
        ::_exit(127);
    }
    const auto limit = [](int resource, std::uint64_t most) {
      const rlimit bound{static_cast<rlim_t>(most), static_cast<rlim_t>(most)};
      return most == 0 || ::setrlimit(resource, &bound) == 0;
    };
    if (!limit(RLIMIT_AS, rules.memory_bytes) || !limit(RLIMIT_CPU, rules.cpu_seconds)) {
      say_from_child("fsdplab grade --submission: cannot limit the program's memory or time (setrlimit)\n");
      ::_exit(126);
    }
    if (ruleset.open()) {
      if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
          ::syscall(SYS_landlock_restrict_self, ruleset.fd(), 0) != 0) {
        say_from_child(
            "fsdplab grade --submission: cannot restrict the submission's program (landlock_restrict_self); "
            "it was not started\n");
        ::_exit(126);
      }
    }
    ::execve(argv[0], argv.data(), envp.data());
    say_from_child("fsdplab grade --submission: cannot start the submission's program (execve)\n");
    ::_exit(127);
  }
  return pid;
}

}  // namespace fsdplab::app
