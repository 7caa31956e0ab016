// grade_submission.cpp — `fsdplab grade --submission DIR` (grade_submission.hpp): checks that the submission
// holds the nine student.cpp, stages them in a build tree of its own, configures and builds a fsdplab there with
// them, and runs that binary's `grade`. Children are started with posix_spawn and an argument vector, so no shell
// ever reads a path; the build's output is echoed to stderr and read for the compiler's first error.
#include "app/grade_submission.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <string_view>
#include <system_error>

#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/input_file.hpp"
#include "engine/runtime/output_file.hpp"

extern char** environ;

#ifndef FSDPLAB_SOURCE_DIR
#error "FSDPLAB_SOURCE_DIR must name the source tree this fsdplab is built from (app/CMakeLists.txt)"
#endif
#ifndef FSDPLAB_CMAKE_COMMAND
#define FSDPLAB_CMAKE_COMMAND "cmake"
#endif

namespace fsdplab::app {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kWho = "fsdplab grade --submission";
// The build tree's own copy of the submission's nine files (stage_submission), which the build compiles. Its
// last folder is labs/, as in the submission: diagnostics name a student's file from there on
// ("labs/03-forward/student.cpp:42", FsdpTask::where and todo()).
constexpr std::string_view kStagedLabs = "submission/labs";

// "exited with 2" / "was killed by signal 9 (Killed)", and the status a shell would give it.
struct ChildStatus {
  int code = 0;
  std::string said;
};

ChildStatus decode(int wait_status) {
  if (WIFEXITED(wait_status)) {
    const int code = WEXITSTATUS(wait_status);
    return {code, "exited with " + std::to_string(code)};
  }
  if (WIFSIGNALED(wait_status)) {
    const int signal = WTERMSIG(wait_status);
    return {128 + signal, "was killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")"};
  }
  return {1, "ended with wait status " + std::to_string(wait_status)};
}

std::vector<char*> argv_of(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  return argv;
}

ChildStatus wait_for(pid_t pid, const std::string& program) {
  int wait_status = 0;
  while (::waitpid(pid, &wait_status, 0) < 0) {
    if (errno != EINTR) fail("waiting for ", program, ": ", std::strerror(errno));
  }
  return decode(wait_status);
}

// Starts `args` (args[0] looked up on PATH when it has no slash) with its stdout and stderr going to a
// pipe; each line read is copied to our stderr and handed to `on_line`.
ChildStatus run_echoing_to_stderr(std::vector<std::string> args,
                                  const std::function<void(std::string_view)>& on_line) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail("cannot make a pipe for ", args[0], ": ", std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  std::cout.flush();
  std::cerr.flush();
  pid_t pid = 0;
  std::vector<char*> argv = argv_of(args);
  const int spawned = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (spawned != 0) {
    ::close(fds[0]);
    fail("cannot start ", args[0], ": ", std::strerror(spawned));
  }
  std::string pending;
  char buffer[4096];
  for (;;) {
    const ssize_t got = ::read(fds[0], buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    std::cerr.write(buffer, got);
    pending.append(buffer, static_cast<std::size_t>(got));
    std::size_t end = 0;
    while ((end = pending.find('\n')) != std::string::npos) {
      on_line(std::string_view(pending).substr(0, end));
      pending.erase(0, end + 1);
    }
  }
  if (!pending.empty()) on_line(pending);
  std::cerr.flush();
  ::close(fds[0]);
  return wait_for(pid, args[0]);
}

// Starts `args` with this process's stdin, stdout and stderr, and waits for it.
ChildStatus run_in_place(std::vector<std::string> args) {
  std::cout.flush();
  std::cerr.flush();
  pid_t pid = 0;
  std::vector<char*> argv = argv_of(args);
  const int spawned = ::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (spawned != 0) fail("cannot start ", args[0], ": ", std::strerror(spawned));
  return wait_for(pid, args[0]);
}

bool on_path(std::string_view program) {
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "";
  while (!rest.empty()) {
    const std::size_t colon = rest.find(':');
    const std::string_view folder = rest.substr(0, colon);
    const fs::path candidate = fs::path(folder.empty() ? "." : folder) / program;
    if (::access(candidate.c_str(), X_OK) == 0) return true;
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return false;
}

// NAME's value in a CMakeCache.txt ("NAME:TYPE=value"), if it is there.
std::optional<std::string> cache_value(const fs::path& cache, std::string_view name) {
  std::ifstream in(cache);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > name.size() && line.compare(0, name.size(), name) == 0 && line[name.size()] == ':') {
      const std::size_t equals = line.find('=');
      if (equals != std::string::npos) return line.substr(equals + 1);
    }
  }
  return std::nullopt;
}

// A student's file, read whole: far above any lab's solution, and the bound read_input_file needs.
constexpr std::uint64_t kMaxStudentFileBytes = std::uint64_t{16} << 20;

std::string contents_of(const fs::path& file) {
  return read_input_file(file, "a lab's student.cpp", kMaxStudentFileBytes);
}

bool same_folder(const fs::path& a, const fs::path& b) {
  std::error_code error;
  const bool same = fs::equivalent(a, b, error);
  return !error && same;
}

// The submission's folder, made absolute; refused unless it holds all nine student.cpp.
fs::path checked_submission(const fs::path& submission) {
  std::error_code error;
  const fs::file_status status = fs::status(submission, error);
  if (!fs::exists(status)) fail("'", submission.string(), "': no such folder; expected a submission folder holding ",
                                  "labs/NN-name/student.cpp for the nine labs");
  if (!fs::is_directory(status)) fail("'", submission.string(), "' is not a folder; expected a submission folder ",
                                        "holding labs/NN-name/student.cpp for the nine labs");
  const fs::path dir = fs::canonical(submission);
  std::vector<std::string> missing;
  std::string expected;
  for (const fs::path& file : submission_files()) {
    if (!fs::is_regular_file(dir / file, error)) missing.push_back(file.string());
    expected += "\n  " + file.string();
  }
  if (missing.empty()) return dir;
  std::string message = "the submission '" + dir.string() + "' lacks " + std::to_string(missing.size()) + " of the " +
                        std::to_string(kTaskCount) + " lab files:";
  for (const std::string& file : missing) message += "\n  " + file;
  message += "\nexpected, inside the submission folder:" + expected;
  if (fs::is_regular_file(dir / submission_files().front().lexically_relative("labs"), error)) {
    message += "\n('" + dir.string() + "' looks like a labs/ folder itself: pass the folder above it, '" +
               dir.parent_path().string() + "')";
  }
  fail(message);
}

// Stages the submission's `labs` in `staging` (stage_submission) and configures `build` from `source` to compile
// them, unless it already does; says what comes.
void configure(const fs::path& source, const fs::path& build, const fs::path& staging, const fs::path& labs) {
  const fs::path submission = labs.parent_path();
  const fs::path cache = build / "CMakeCache.txt";
  std::error_code error;
  const bool has_cache = fs::is_regular_file(cache, error);
  if (has_cache) {
    const std::optional<std::string> home = cache_value(cache, "CMAKE_HOME_DIRECTORY");
    if (home && !same_folder(*home, source)) {
      fail("the build folder '", build.string(), "' was configured from another source tree ('", *home,
             "'); this fsdplab builds submissions from '", source.string(),
             "'. Remove that folder or choose another build folder");
    }
    const std::optional<std::string> generator = cache_value(cache, "CMAKE_GENERATOR");
    if (generator && *generator != "Ninja") {
      fail("the build folder '", build.string(), "' was configured with the generator '", *generator,
             "'; expected Ninja. Remove that folder or choose another build folder");
    }
  }
  const bool built_before = has_cache && fs::is_regular_file(build / "build.ninja", error);
  const std::optional<std::string> student_dir = has_cache ? cache_value(cache, "FSDPLAB_STUDENT_DIR") : std::nullopt;
  if (built_before && student_dir && same_folder(*student_dir, source / "labs")) {
    fail("the build folder '", build.string(), "' builds this tree's own labs ('", *student_dir,
           "'); the submission needs a build folder of its own (the default is submission-build beside app/)");
  }
  // Only now that the folder is known to be one of ours is anything written into it.
  stage_submission(labs, staging);
  if (built_before && student_dir && same_folder(*student_dir, staging)) {
    std::cerr << kWho << ": rebuilding in '" << build.string() << "' the lab files of '" << submission.string()
              << "' that differ from the last submission built there\n";
    return;
  }
  if (!on_path("ninja") && !on_path("ninja-build")) {
    fail("the submission's build needs Ninja, and neither ninja nor ninja-build is on PATH "
           "(bash scripts/install-deps.sh installs it, Debian package ninja-build)");
  }
  if (built_before) {
    std::cerr << kWho << ": rebuilding in '" << build.string() << "' with the labs of '" << submission.string()
              << "' (only the nine student.cpp recompile)\n";
  } else {
    std::cerr << kWho << ": building fsdplab with the labs of '" << submission.string() << "' in '"
              << build.string() << "', from the source tree '" << source.string()
              << "'. The first build compiles the whole engine: this takes minutes; later submissions reuse it and "
                 "recompile only their nine student.cpp\n";
  }
  const ChildStatus configured = run_echoing_to_stderr(
      {FSDPLAB_CMAKE_COMMAND, "-S", source.string(), "-B", build.string(), "-G", "Ninja",
       "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DFSDPLAB_CUDA=OFF", "-DFSDPLAB_MPI=OFF", "-DBUILD_TESTING=OFF",
       "-DFSDPLAB_STUDENT_DIR:PATH=" + staging.string()},
      [](std::string_view) {});
  if (configured.code != 0) {
    fail("could not configure the submission's build in '", build.string(), "': cmake ", configured.said,
           "; its messages are above");
  }
}

// Builds target fsdplab in `build`; a failure names the compiler's first error, preferring one in the staged
// labs `staging`, which it names by the submission's own `labs` file.
void build_fsdplab(const fs::path& build, const fs::path& staging, const fs::path& labs) {
  std::string first_error;
  std::string first_error_in_submission;
  const std::string labs_prefix = staging.string() + "/";
  const ChildStatus built = run_echoing_to_stderr(
      {FSDPLAB_CMAKE_COMMAND, "--build", build.string(), "--target", "fsdplab"}, [&](std::string_view line) {
        const bool is_error = line.find(": error:") != std::string_view::npos ||
                              line.find(": fatal error:") != std::string_view::npos ||
                              line.find("undefined reference to") != std::string_view::npos;
        if (!is_error) return;
        if (first_error.empty()) first_error = line;
        if (first_error_in_submission.empty() && line.find(labs_prefix) != std::string_view::npos) {
          first_error_in_submission = line;
          const std::size_t at = first_error_in_submission.find(labs_prefix);
          first_error_in_submission.replace(at, labs_prefix.size(), labs.string() + "/");
        }
      });
  if (built.code == 0) return;
  const std::string& shown = first_error_in_submission.empty() ? first_error : first_error_in_submission;
  if (!shown.empty()) {
    fail("the submission does not compile: ", shown, "\n(the compiler's messages are above; the build folder is '",
           build.string(), "')");
  }
  fail("the submission does not compile: building target fsdplab in '", build.string(), "' failed (cmake --build ",
         built.said, "); the messages are above");
}

}  // namespace

std::vector<fs::path> submission_files() {
  std::vector<fs::path> files;
  for (int task = 1; task <= kTaskCount; ++task) files.push_back(fs::path(task_info(task).lab) / "student.cpp");
  return files;
}

std::vector<fs::path> stage_submission(const fs::path& labs, const fs::path& staging) {
  std::vector<fs::path> changed;
  for (const fs::path& file : submission_files()) {
    const fs::path lab_file = file.lexically_relative("labs");
    const fs::path from = labs / lab_file;
    const fs::path to = staging / lab_file;
    const std::string content = contents_of(from);
    std::error_code error;
    if (fs::is_regular_file(to, error) && contents_of(to) == content) continue;
    fs::create_directories(to.parent_path());
    // Written anew rather than copied: a copy could keep the submission's time, and ninja would then
    // think the object built from the last submission newer than this one.
    write_output_file(to, "the staged copy of a lab's student.cpp", [&](std::ostream& out) { out << content; });
    changed.push_back(file);
  }
  return changed;
}

fs::path default_submission_build_dir() {
  std::error_code error;
  const fs::path binary = fs::read_symlink("/proc/self/exe", error);
  if (error || binary.empty()) return fs::current_path() / "submission-build";
  return binary.parent_path().parent_path() / "submission-build";
}

std::vector<std::string> graded_submission_args(const fs::path& submission) {
  fs::path absolute = fs::absolute(submission).lexically_normal();
  if (!absolute.has_filename() && absolute.has_parent_path()) absolute = absolute.parent_path();  // "subs/alice/"
  return {"--graded-submission", submission.string(), absolute.string()};
}

int grade_submission(const fs::path& submission, const std::vector<std::string>& grade_args,
                     const fs::path& build_dir) {
  try {
    const fs::path source = FSDPLAB_SOURCE_DIR;
    std::error_code error;
    if (!fs::is_regular_file(source / "CMakeLists.txt", error)) {
      fail("the source tree this fsdplab was built from ('", source.string(),
             "') is not there any more; --submission builds the submission against it");
    }
    const fs::path dir = checked_submission(submission);
    const fs::path labs = dir / "labs";
    const fs::path build = fs::absolute(build_dir).lexically_normal();
    const fs::path staging = build / kStagedLabs;
    configure(source, build, staging, labs);
    build_fsdplab(build, staging, labs);
    const fs::path binary = build / "app" / "fsdplab";
    if (!fs::is_regular_file(binary, error)) {
      fail("the build in '", build.string(), "' succeeded but left no '", binary.string(), "'");
    }
    std::vector<std::string> args{binary.string(), "grade"};
    args.insert(args.end(), grade_args.begin(), grade_args.end());
    const std::vector<std::string> named = graded_submission_args(submission);
    args.insert(args.end(), named.begin(), named.end());
    const ChildStatus graded = run_in_place(std::move(args));
    if (graded.said.rfind("exited", 0) != 0) {
      std::cerr << kWho << ": the submission's fsdplab grade " << graded.said << "\n";
    }
    return graded.code;
  } catch (const Error& e) {  // what stops a submission from being graded, said once
    std::cerr << kWho << ": " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << kWho << ": error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace fsdplab::app
