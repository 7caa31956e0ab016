// isolated_main.cpp — the GPU tests' main: every test in a process of its own.
//
// A bad address handed to the driver can crash the process inside libcuda (a SIGSEGV, not an error code), and
// a kernel fault poisons the CUDA context for every test after it. So `fsdplab_gpu_tests` run by hand (as on a
// GPU machine, where there is no ctest) lists the tests its flags select and runs each in a child process;
// a test that crashes is reported with its signal and the others still run. ctest (gtest_discover_tests) runs
// one test per process already: a run that selects a single test, a listing, or a child runs in-process.
// The parent never touches CUDA, so the children start from a clean driver state.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace {

constexpr const char* kChildVariable = "FSDPLAB_GPU_TEST_CHILD";

// Runs this executable with `args` (the child marker in its environment); its stdout when `capture`.
int run_self(const std::vector<std::string>& args, bool capture, std::string* out) {
  std::vector<char*> argv;
  std::vector<std::string> owned = args;
  for (std::string& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_owned;
  for (char** e = environ; *e; ++e) env_owned.emplace_back(*e);
  env_owned.push_back(std::string(kChildVariable) + "=1");
  std::vector<char*> envp;
  for (std::string& e : env_owned) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  int pipe_fds[2] = {-1, -1};
  if (capture) {
    if (pipe(pipe_fds) != 0) return -1;
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  }
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (capture) {
    close(pipe_fds[1]);
    if (spawned == 0) {
      std::array<char, 4096> buffer{};
      ssize_t n = 0;
      while ((n = read(pipe_fds[0], buffer.data(), buffer.size())) > 0)
        out->append(buffer.data(), static_cast<std::size_t>(n));
    }
    close(pipe_fds[0]);
  }
  if (spawned != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return status;
}

// "Suite.\n  Name  # GetParam() = ...\n" (gtest's --gtest_list_tests) as full names.
std::vector<std::string> parse_listing(const std::string& listing) {
  std::vector<std::string> names;
  std::string suite;
  std::size_t at = 0;
  while (at < listing.size()) {
    std::size_t end = listing.find('\n', at);
    if (end == std::string::npos) end = listing.size();
    std::string line = listing.substr(at, end - at);
    at = end + 1;
    if (const std::size_t hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    if (line.empty()) continue;
    if (line[0] != ' ') {
      suite = line;  // ends with '.'
    } else {
      names.push_back(suite + line.substr(line.find_first_not_of(' ')));
    }
  }
  return names;
}

bool selects_one_test(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--gtest_filter=", 0) == 0) {
      const std::string filter = a.substr(std::strlen("--gtest_filter="));
      return filter.find_first_of("*?:-") == std::string::npos;
    }
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> passed_on;  // the caller's flags but the filter, for every child
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind("--gtest_filter=", 0) != 0) passed_on.emplace_back(argv[i]);
  const std::vector<std::string> original(argv, argv + argc);
  ::testing::InitGoogleTest(&argc, argv);
  if (std::getenv(kChildVariable) || GTEST_FLAG_GET(list_tests) || selects_one_test(argc, argv))
    return RUN_ALL_TESTS();

  std::vector<std::string> list_args = original;
  list_args[0] = "fsdplab_gpu_tests";
  list_args.emplace_back("--gtest_list_tests");
  std::string listing;
  if (run_self(list_args, true, &listing) != 0) {
    std::fprintf(stderr, "fsdplab_gpu_tests: listing the tests failed\n");
    return 1;
  }
  const std::vector<std::string> tests = parse_listing(listing);
  std::vector<std::string> failed;
  for (const std::string& test : tests) {
    std::vector<std::string> args{"fsdplab_gpu_tests", "--gtest_filter=" + test};
    args.insert(args.end(), passed_on.begin(), passed_on.end());
    std::fflush(stdout);
    const int status = run_self(args, false, nullptr);
    if (status == 0) continue;
    std::string why = "exit status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : status);
    if (status < 0) why = "could not start";
    if (WIFSIGNALED(status)) why = std::string("crashed with ") + sigabbrev_np(WTERMSIG(status)) + " (signal " +
                                   std::to_string(WTERMSIG(status)) + ")";
    std::printf("[  ISOLATED] %s: %s\n", test.c_str(), why.c_str());
    failed.push_back(test + ": " + why);
  }
  std::printf("\nfsdplab_gpu_tests: %zu tests, each in its own process: %zu passed or skipped, %zu failed\n",
              tests.size(), tests.size() - failed.size(), failed.size());
  for (const std::string& f : failed) std::printf("  FAILED %s\n", f.c_str());
  return failed.empty() ? 0 : 1;
}
