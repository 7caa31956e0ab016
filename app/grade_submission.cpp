// grade_submission.cpp — `fsdplab grade --submission DIR` (grade_submission.hpp): checks what the submission
// holds of the nine student.cpp, stages them in a build tree of its own, configures and builds a fsdplab there with
// them (a lab missing or that does not build replaced by its skeleton), and runs that binary's `grade`. Children are
// started with an argument vector, so no shell ever reads a path: cmake's configure by posix_spawn, the build and the
// grade in the sandbox (start_sandboxed: fork and execve); the build's output is echoed to stderr and read for what
// failed.
#include "app/grade_submission.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string_view>
#include <system_error>
#include <thread>

#include "app/submission_sandbox.hpp"
#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/input_file.hpp"
#include "engine/runtime/output_file.hpp"
#include "grader/grade_report.hpp"

extern char** environ;

#ifndef FSDPLAB_SOURCE_DIR
#error "FSDPLAB_SOURCE_DIR must name the source tree this fsdplab is built from (app/CMakeLists.txt)"
#endif
#ifndef FSDPLAB_BINARY_DIR
#error "FSDPLAB_BINARY_DIR must name the build this fsdplab is built in (app/CMakeLists.txt)"
#endif
#ifndef FSDPLAB_CMAKE_COMMAND
#define FSDPLAB_CMAKE_COMMAND "cmake"
#endif

namespace fsdplab::app {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kWho = "fsdplab grade --submission";
// What the course build's libraries were compiled from, written in the build once they are built (CMakeLists.txt).
constexpr std::string_view kCompiledSources = "fsdplab-compiled-sources.txt";
// The build tree's own copy of the submission's nine files (stage_submission), which the build compiles. Its
// last folder is labs/, as in the submission: diagnostics name a student's file from there on
// ("labs/03-forward/student.cpp:42", FsdpTask::where and todo()).
constexpr std::string_view kStagedLabs = "submission/labs";

// ---- children: started from an argument vector, waited for, their output echoed ---------------------------

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

// wait_for, but a child still running after `limit` is killed (SIGKILL: its code may ignore any other signal), and
// said so. Its own children are the grade's checks, each ended by its time limit.
ChildStatus wait_at_most(pid_t pid, const std::string& program, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int wait_status = 0;
    const pid_t ended = ::waitpid(pid, &wait_status, WNOHANG);
    if (ended == pid) return decode(wait_status);
    if (ended < 0 && errno != EINTR) fail("waiting for ", program, ": ", std::strerror(errno));
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      wait_for(pid, program);
      return {124, "ran past its " + std::to_string(limit.count()) + " s and was stopped"};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Starts `args` (args[0] looked up on PATH when it has no slash; an absolute path under `sandbox`) with its stdout and
// stderr going to a pipe and its stdin from /dev/null, held to `sandbox` where one is given (start_sandboxed, its
// temporary files in the writable folder); each line read is copied to our stderr, as `shown` rewrites it where given,
// and handed to `on_line` as read.
ChildStatus run_echoing_to_stderr(std::vector<std::string> args, const std::function<void(std::string_view)>& on_line,
                                  const std::function<std::string(std::string_view)>& shown = {},
                                  const SandboxRules* sandbox = nullptr) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail("cannot make a pipe for ", args[0], ": ", std::strerror(errno));
  std::cout.flush();
  std::cerr.flush();
  pid_t pid = 0;
  int spawned = 0;
  if (sandbox) {
    try {
      pid = start_sandboxed(sandbox_support(), args, *sandbox, {"TMPDIR=" + sandbox->writable.string()}, fds[1]);
    } catch (const Error&) {
      ::close(fds[0]);
      ::close(fds[1]);
      throw;
    }
  } else {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
    // Nothing the build runs reads ours (a student's #include "/dev/stdin" would wait for the grader's terminal).
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    std::vector<char*> argv = argv_of(args);
    spawned = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
  }
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
    pending.append(buffer, static_cast<std::size_t>(got));
    std::size_t end = 0;
    while ((end = pending.find('\n')) != std::string::npos) {
      const std::string_view line = std::string_view(pending).substr(0, end);
      std::cerr << (shown ? shown(line) : std::string(line)) << '\n';
      on_line(line);
      pending.erase(0, end + 1);
    }
  }
  if (!pending.empty()) {
    std::cerr << (shown ? shown(pending) : pending) << '\n';
    on_line(pending);
  }
  std::cerr.flush();
  ::close(fds[0]);
  return wait_for(pid, args[0]);
}

// ---- files, folders and a CMake cache ---------------------------------------------------------------------

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

// Whether `a` was written after `b` (false when either cannot be read).
bool newer(const fs::path& a, const fs::path& b) {
  std::error_code error_a, error_b;
  const fs::file_time_type time_a = fs::last_write_time(a, error_a);
  const fs::file_time_type time_b = fs::last_write_time(b, error_b);
  return !error_a && !error_b && time_a > time_b;
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

// ---- what the submission holds ----------------------------------------------------------------------------

// The submission's folder, made absolute; the folder its labs are in; and the lab files it lacks or that cannot be
// read, each with why. Refused when it holds none of the nine.
struct CheckedSubmission {
  fs::path dir;
  fs::path labs;                             // dir/labs, or where the returned folder has them (labs_folder)
  std::string moved;                         // how `labs` differs from dir/labs, "" where it does not
  std::map<fs::path, std::string> unusable;  // as submission_files names them
};

constexpr const char* kOneAtATime = "grade each folder in it, one after the other, as grader/README.md's loop does";

// How many of the nine lab files (NN-name/student.cpp) folder `labs` holds.
std::size_t lab_files_in(const fs::path& labs) {
  std::error_code error;
  std::size_t found = 0;
  for (const fs::path& file : submission_files())
    if (fs::exists(fs::symlink_status(labs / file.lexically_relative("labs"), error))) ++found;
  return found;
}

// Where a returned folder keeps its labs: DIR/labs as the handout has them; else DIR itself (the labs/ level left
// out: DIR/03-forward/student.cpp) or the one folder inside DIR that holds a labs/ (an archive's extra level:
// DIR/handout/labs/...), each said in `moved`. A student's packing costs no points; an ambiguous one is refused.
std::pair<fs::path, std::string> labs_folder(const fs::path& dir) {
  if (lab_files_in(dir / "labs") > 0) return {dir / "labs", ""};
  if (lab_files_in(dir) > 0) return {dir, "its lab folders are in the submission folder itself, not in a labs/"};
  std::vector<fs::path> inside;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error))
    if (entry.is_directory(error) && lab_files_in(entry.path() / "labs") > 0) inside.push_back(entry.path());
  if (inside.size() == 1)
    return {inside.front() / "labs",
            "its labs/ is one folder down, in '" + inside.front().filename().string() + "/labs'"};
  if (inside.size() > 1)
    fail("the folder '", dir.string(), "' holds no labs/ of its own, and ", inside.size(), " folders that do ('",
         inside[0].filename().string(), "', '", inside[1].filename().string(),
         "'...); expected one submission: ", kOneAtATime);
  return {dir / "labs", ""};
}

// What to do with an archive given where a folder is expected.
std::string unpack_hint(const fs::path& submission) {
  const std::string name = submission.filename().string();
  for (const std::string_view archive : {".zip", ".tar", ".tar.gz", ".tgz", ".tar.xz"})
    if (name.ends_with(archive))
      return "; '" + name + "' looks like an archive: unpack it into a folder of its own and grade that folder";
  return "";
}

CheckedSubmission checked_submission(const fs::path& submission) {
  std::error_code error;
  const fs::file_status status = fs::status(submission, error);
  if (!fs::exists(status)) fail("'", submission.string(), "': no such folder; expected a submission folder holding ",
                                  "labs/NN-name/student.cpp for the nine labs");
  if (!fs::is_directory(status))
    fail("'", submission.string(), "' is not a folder; expected a submission folder holding ",
         "labs/NN-name/student.cpp for the nine labs", unpack_hint(submission));
  const fs::path dir = fs::canonical(submission);
  const auto [labs, moved] = labs_folder(dir);
  std::map<fs::path, std::string> unusable;
  std::size_t absent = 0;
  std::string expected;
  for (const fs::path& file : submission_files()) {
    expected += "\n  " + file.string();
    const fs::path path = labs / file.lexically_relative("labs");
    const fs::file_status entry = fs::symlink_status(path, error);
    if (!fs::exists(entry)) {
      unusable[file] = file.string() + " is not in the submission";
      ++absent;
    } else if (!fs::is_regular_file(fs::status(path, error))) {
      unusable[file] = file.string() + " is not a file that can be compiled (a folder, a device, or a broken link)";
    } else if (const fs::path target = fs::canonical(path, error); error || !path_is_within(target, dir)) {
      unusable[file] = file.string() + " is a link to '" + target.string() +
                       "', outside the submission folder; expected the student's own file in it (a copy, not a link)";
    } else {
      try {
        contents_of(path);
      } catch (const Error& e) {
        unusable[file] = file.string() + " cannot be read: " + e.what();
      }
    }
  }
  // A submission lacking some labs is graded without them; one lacking all is no submission (or the wrong folder).
  if (absent < submission_files().size()) return {dir, labs, moved, unusable};
  std::string message = "the folder '" + dir.string() + "' holds none of the " + std::to_string(kTaskCount) +
                        " lab files; expected, inside the submission folder:" + expected;
  std::size_t submissions = 0;  // folders inside holding lab folders: a class's, each graded on its own
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error))
    if (entry.is_directory(error) && lab_files_in(entry.path()) > 0) ++submissions;
  if (submissions > 1)
    message += "\n('" + dir.string() + "' holds " + std::to_string(submissions) + " submissions: " + kOneAtATime + ")";
  fail(message);
}

// ---- configuring the submission's build -------------------------------------------------------------------

// What a submission's build reuses of this fsdplab's own build (see [Note: a submission's build] in CMakeLists.txt):
// its compiled libraries, and its settings as an initial cache.
fs::path course_settings(const fs::path& course_build) {
  const fs::path settings = course_build / "fsdplab-submission-settings.cmake";
  std::error_code error;
  if (!fs::is_regular_file(settings, error) ||
      !fs::is_regular_file(course_build / "fsdplab-compiled-libraries.cmake", error)) {
    fail("the build this fsdplab was built in ('", course_build.string(), "') has no '", settings.filename().string(),
           "' and 'fsdplab-compiled-libraries.cmake' beside it, which a submission's build links against: is the "
           "folder gone? (bash scripts/build.sh writes them)");
  }
  return settings;
}

// Stages `submission`'s `labs` in `staging` (stage_submission, `from_skeleton` from this tree's labs) and configures
// `build` from `source` to compile them and link them with `course_build`'s libraries, unless it already does; says
// what comes.
void configure(const fs::path& source, const fs::path& course_build, const fs::path& build, const fs::path& staging,
               const fs::path& submission, const fs::path& labs, const std::set<fs::path>& from_skeleton) {
  const fs::path settings = course_settings(course_build);
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
    fail("the build folder '", build.string(), "' builds this tree's own labs ('", source.string(),
           "/labs'); the submission needs a build folder of its own (the default is submission-build beside app/)");
  }
  // Only now that the folder is known to be one of ours is anything written into it.
  stage_submission(labs, staging, source / "labs", from_skeleton);
  const std::optional<std::string> linked = has_cache ? cache_value(cache, "FSDPLAB_COURSE_BUILD") : std::nullopt;
  // Configured for another build's libraries (or by an older fsdplab, which compiled the whole engine there), or
  // before this build's settings last changed: configured again from scratch (cmake --fresh), with ours.
  const bool fresh = has_cache && (!linked || !same_folder(*linked, course_build) || newer(settings, cache));
  if (built_before && !fresh && student_dir && same_folder(*student_dir, staging)) {
    if (fs::is_regular_file(build / "app" / "fsdplab", error))
      std::cerr << kWho << ": rebuilding in '" << build.string() << "' the lab files of '" << submission.string()
                << "' that differ from the last submission built there\n";
    else
      std::cerr << kWho << ": finishing in '" << build.string() << "' a first build that did not finish (with the "
                << "labs of '" << submission.string() << "')\n";
    return;
  }
  if (!on_path("ninja") && !on_path("ninja-build")) {
    fail("the submission's build needs Ninja, and neither ninja nor ninja-build is on PATH "
           "(bash scripts/install-deps.sh installs it, Debian package ninja-build)");
  }
  if (fresh) {
    std::cerr << kWho << ": configuring '" << build.string() << "' again, to link the libraries of '"
              << course_build.string() << "' as they are built now\n";
  } else if (built_before) {
    std::cerr << kWho << ": rebuilding in '" << build.string() << "' with the labs of '" << submission.string()
              << "' (only the nine student.cpp recompile)\n";
  } else {
    std::cerr << kWho << ": building fsdplab with the labs of '" << submission.string() << "' in '" << build.string()
              << "': the labs compile, and link the engine, grader and dashboard this fsdplab's "
              << "build compiled ('" << course_build.string() << "')\n";
  }
  std::vector<std::string> args{FSDPLAB_CMAKE_COMMAND, "-S", source.string(), "-B", build.string(), "-G", "Ninja"};
  args.insert(args.end(), {"-C", settings.string(), "-DFSDPLAB_STUDENT_DIR:PATH=" + staging.string()});
  if (fresh) args.emplace_back("--fresh");
  const ChildStatus configured = run_echoing_to_stderr(std::move(args), [](std::string_view) {});
  if (configured.code != 0) {
    fail("could not configure the submission's build in '", build.string(), "': cmake ", configured.said,
           "; its messages are above");
  }
}

// ---- building it in the sandbox, a lab that does not build replaced by its skeleton -----------------------

// [Note: a submission's build in a sandbox]
// The compiler reads what a lab's student.cpp includes: run with the grader's rights, `#include "/home/ta/returned/
// bob/labs/01-meta-init/student.cpp"` would compile another student's work, and `#include "/dev/zero"` would eat the
// machine's memory. So the build runs under the sandbox the grade does (submission_sandbox.hpp), with other folders:
// it reads the system's files, this tree (the headers, CMakeLists) and the course build (the libraries it links),
// writes only in its own build folder (where the labs are staged), and each of its processes has 8 GiB of address
// space and 10 minutes of CPU at most (a compile of a lab takes well under a GiB and a few seconds).
SandboxRules build_sandbox(const fs::path& build) {
  SandboxRules rules{build, {fs::path(FSDPLAB_SOURCE_DIR), fs::path(FSDPLAB_BINARY_DIR)}};
  rules.memory_bytes = std::uint64_t{8} << 30;
  rules.cpu_seconds = 600;
  return rules;
}

// Builds target fsdplab in `build`, going on past a failure (ninja -k 0) so that every lab that does not compile
// shows in one build; the lines that say what failed (build_failures reads them), none when it built. The compiler's
// messages echoed name each staged copy the build compiles by the file it was copied from (`originals`: the
// submission's own, or this tree's skeleton in place of a lab that did not build), so that an editor opens the file at
// the line; the commands ninja echoes keep the files they ran on.
std::optional<std::vector<std::string>> build_fsdplab(const fs::path& build,
                                                      const std::map<std::string, std::string>& originals) {
  std::vector<std::string> lines;
  const SandboxRules rules = build_sandbox(build);
  const ChildStatus built = run_echoing_to_stderr(
      {FSDPLAB_CMAKE_COMMAND, "--build", build.string(), "--target", "fsdplab", "--", "-k", "0"},
      [&](std::string_view line) { lines.emplace_back(line); },
      [&](std::string_view line) {
        for (const auto& [staged, original] : originals)
          if (line.starts_with(staged)) return original + std::string(line.substr(staged.size()));
        return std::string(line);
      },
      &rules);
  if (built.code == 0) return std::nullopt;
  lines.push_back("cmake --build " + built.said);
  return lines;
}

// Builds the staged labs, each lab that does not build replaced by its skeleton and built again, until the build
// succeeds; `not_built` gains each replaced lab with its reason. A failure outside the labs stops it.
void build_with_skeletons_for_failures(const fs::path& source, const fs::path& build, const fs::path& staging,
                                       const fs::path& labs, std::map<fs::path, std::string>& not_built) {
  for (;;) {
    std::map<std::string, std::string> originals;
    for (const fs::path& file : submission_files()) {
      const fs::path lab_file = file.lexically_relative("labs");
      originals[(staging / lab_file).string()] =
          ((not_built.contains(file) ? source / "labs" : fs::absolute(labs)).lexically_normal() / lab_file).string();
    }
    const std::optional<std::vector<std::string>> failed = build_fsdplab(build, originals);
    if (!failed) return;
    BuildFailures failures = build_failures(*failed, staging);
    std::erase_if(failures.labs, [&](const auto& lab) { return not_built.contains(lab.first); });
    if (failures.elsewhere || failures.labs.empty()) {
      const auto step = std::find_if(failed->begin(), failed->end(),
                                     [](const std::string& line) { return line.rfind("FAILED: ", 0) == 0; });
      fail("the submission's fsdplab does not build, and not only because of a lab's student.cpp: ",
           step == failed->end() ? failed->back() : *step, "\n(the messages are above; the build folder is '",
           build.string(), "')");
    }
    std::set<fs::path> from_skeleton;
    for (const auto& [file, reason] : not_built) from_skeleton.insert(file);
    std::string replaced;
    for (auto& [file, reason] : failures.labs) {
      std::cerr << kWho << ": " << reason << "\n";
      replaced += (replaced.empty() ? "" : ", ") + file.string();
      from_skeleton.insert(file);
      not_built[file] = std::move(reason);
    }
    std::cerr << kWho << ": building again with this tree's skeleton in place of " << replaced
              << ", so that the rest is graded\n";
    stage_submission(labs, staging, source / "labs", from_skeleton);
  }
}

// ---- the submission's grade, in the sandbox ---------------------------------------------------------------

// Runs the submission's `fsdplab grade` (`args`, with `cases` added when one is named) as [Note: what a submission's
// code may do] says: reading only the system's files, `build` and `cases`, in a scratch folder made here and removed
// after (its checks' scratch folders and its JSON go there, the only place it may write), for at most
// `bounds.seconds`. The JSON it writes there is how this process knows the grade got to its end: one that is missing
// or unsound (`bounds`) is an Error, the grade not filed; else it is written to `json` when one is named, and named
// on stdout as grade names it.
ChildStatus run_submissions_grade(std::vector<std::string> args, const fs::path& build, const fs::path& cases,
                                  const fs::path& json, const SubmissionBounds& bounds) {
  std::string pattern = (fs::temp_directory_path() / "fsdplab-graded-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr)
    fail("cannot make a scratch folder in ", fs::temp_directory_path().string(), ": ", std::strerror(errno));
  const struct RemovedAtEnd {
    fs::path dir;
    ~RemovedAtEnd() {
      std::error_code error;
      fs::remove_all(dir, error);
    }
  } scratch{pattern};
  const fs::path written = scratch.dir / "grade.json";
  args.insert(args.end(), {"--json", written.string()});  // always: the proof that the grade got to its end
  if (!cases.empty()) args.insert(args.end(), {"--cases", cases.string()});
  const SandboxRules rules{scratch.dir, read_by_the_grade(build, cases)};
  const SandboxSupport support = sandbox_support();
  std::cerr << kWho << ": " << sandbox_summary(support, rules) << "\n";
  const ChildStatus graded =
      wait_at_most(start_sandboxed(support, args, rules, {"TMPDIR=" + scratch.dir.string()}), args[0], bounds.seconds);
  std::error_code error;
  std::string unsound = "wrote no grade";
  std::string text;
  if (fs::is_regular_file(written, error)) {
    constexpr std::uint64_t kMaxGradeBytes = std::uint64_t{64} << 20;  // a grade's JSON is tens of kB
    text = read_input_file(written, "the submission's grade", kMaxGradeBytes);
    if (const std::string problem = grading::unsound_grade_json(text, bounds.tasks); !problem.empty())
      unsound = "the grade it wrote is unsound: " + problem;
    else
      unsound.clear();
  }
  if (!unsound.empty())
    fail("the submission's fsdplab grade ", graded.said, ", and ", unsound,
         ": the student's code ended or stopped the grade (a static initialiser, an exit or abort, an endless loop "
         "outside a check), or wrote the grade itself; nothing it printed is a grade. Read the submission's "
         "student.cpp files for code that runs outside the tasks' methods");
  if (!json.empty()) {
    write_output_file(json, "the grade's --json", [&](std::ostream& out) { out << text; });
    // On stderr, with the TA's other notes: stdout is the text that goes back to the student.
    std::cerr << kWho << ": the grade's JSON is in '" << json.string() << "'\n";
  }
  return graded;
}

// ---- the course build's record of its sources -------------------------------------------------------------

// A record app/compiled_sources.cmake wrote ("HASH  PATH" lines): each path's SHA-256.
std::map<std::string, std::string> source_record(const fs::path& file) {
  constexpr std::uint64_t kMaxRecordBytes = std::uint64_t{16} << 20;  // a line a file: far above the tree's
  std::istringstream lines(read_input_file(file, "the record of a build's sources", kMaxRecordBytes,
                                           "written by app/compiled_sources.cmake"));
  std::map<std::string, std::string> hashes;
  std::string line;
  while (std::getline(lines, line)) {
    const std::size_t gap = line.find("  ");
    if (gap == std::string::npos || gap == 0 || gap + 2 == line.size()) {
      fail("'", file.string(), "' holds the line '", line,
           "'; expected 'SHA256  PATH' lines, as app/compiled_sources.cmake writes them");
    }
    hashes[line.substr(gap + 2)] = line.substr(0, gap);
  }
  return hashes;
}

// A submission's labs compile against this tree's headers and link the course build's libraries ([Note: a
// submission's build]). After a pull, a checkout or an edit that was not built, the two differ, and the grade would
// come from code that is neither the tree's nor the build's (or crash on a class whose layout changed): refused,
// naming what changed, before anything is written.
void refuse_a_course_build_older_than_its_tree(const fs::path& source, const fs::path& course_build) {
  const std::vector<std::string> changed = sources_changed_since_build(source, course_build);
  if (changed.empty()) return;
  constexpr std::size_t kNamed = 4;
  std::string named;
  for (std::size_t i = 0; i < std::min(kNamed, changed.size()); ++i) named += (i == 0 ? "" : ", ") + changed[i];
  if (changed.size() > kNamed) named += " (and " + std::to_string(changed.size() - kNamed) + " more)";
  fail("the source tree '", source.string(), "' has changed since this fsdplab's build ('", course_build.string(),
       "') compiled the libraries a submission links: ", named, ". A submission built now would compile against ",
       "the new headers and run the old engine and grader. Build it again (cmake --build ", course_build.string(),
       "), then grade");
}

}  // namespace

std::vector<std::string> sources_changed_since_build(const fs::path& source, const fs::path& course_build) {
  const fs::path recorded = course_build / kCompiledSources;
  std::error_code error;
  if (!fs::is_regular_file(recorded, error)) {
    fail("the build this fsdplab was built in ('", course_build.string(), "') has no '", kCompiledSources,
         "', which it writes once the libraries a submission links are built: its last build stopped before that, ",
         "or an older fsdplab built it. Build it again (cmake --build ", course_build.string(), "), then grade");
  }
  const std::map<std::string, std::string> built = source_record(recorded);
  std::string now_file = (fs::temp_directory_path() / "fsdplab-sources-XXXXXX").string();
  const int fd = ::mkstemp(now_file.data());
  if (fd < 0) fail("cannot make a temporary file in ", fs::temp_directory_path().string(), ": ", std::strerror(errno));
  ::close(fd);
  std::map<std::string, std::string> now;
  try {
    record_compiled_sources(source, now_file);
    now = source_record(now_file);
  } catch (...) {
    fs::remove(now_file, error);
    throw;
  }
  fs::remove(now_file, error);
  std::vector<std::string> changed;
  for (const auto& [file, hash] : now) {
    const auto was = built.find(file);
    if (was == built.end())
      changed.push_back(file + " is new");
    else if (was->second != hash)
      changed.push_back(file + " changed");
  }
  for (const auto& [file, hash] : built)
    if (!now.contains(file)) changed.push_back(file + " is gone");
  std::sort(changed.begin(), changed.end());
  return changed;
}

void record_compiled_sources(const fs::path& source, const fs::path& out) {
  const fs::path script = source / "app" / "compiled_sources.cmake";
  const ChildStatus listed = run_echoing_to_stderr(
      {FSDPLAB_CMAKE_COMMAND, "-DSOURCE_DIR=" + source.string(), "-DOUT=" + out.string(), "-P", script.string()},
      [](std::string_view) {});
  if (listed.code != 0) {
    fail("could not list the sources of '", source.string(), "': cmake -P ", script.string(), " ", listed.said,
         "; its messages are above");
  }
}

// ---- the build folder -------------------------------------------------------------------------------------

// Refuses a build folder where a grading must write nothing: the submission itself or a folder inside it (nothing
// in a submission is written), the course's build (its labs and libraries are what the submission is graded
// against), a file, or a folder holding files that no submission build made (neither a CMakeCache.txt nor the
// staged labs a first build interrupted before it configured leaves). A new or empty folder is fine. Checked before
// the lock, which makes the folder.
void check_build_folder(const fs::path& build, const fs::path& submission, const fs::path& course_build) {
  std::error_code error;
  if (path_is_within(build, submission)) {
    fail("--submission-build '", build.string(), "' is inside the submission '", submission.string(),
         "', where nothing is written; expected a folder outside it, e.g. --submission-build /tmp/submission-build "
         "(the default, submission-build beside this fsdplab's app/, is inside it where the submission holds this "
         "fsdplab's build: a tree graded from its own build/)");
  }
  if (same_folder(build, course_build)) {
    fail("--submission-build '", build.string(), "' is the build of this fsdplab ('", course_build.string(),
         "'), whose libraries and labs the submission is graded against; expected a folder of the submission's own "
         "(the default is submission-build beside this fsdplab's app/). Nothing was written there");
  }
  const fs::file_status status = fs::status(build, error);
  if (!fs::exists(status)) return;
  if (!fs::is_directory(status)) {
    fail("--submission-build '", build.string(),
         "' is not a folder; expected a new folder, or one an earlier --submission built in");
  }
  if (fs::is_empty(build, error) || fs::exists(build / "CMakeCache.txt", error) ||
      fs::exists(build / kStagedLabs, error)) {
    return;
  }
  fail("--submission-build '", build.string(), "' holds files and is not a submission's build (no CMakeCache.txt); ",
       "expected a new or empty folder, or one an earlier --submission built in. Nothing was written there");
}

// ---- staging the nine lab files ---------------------------------------------------------------------------

std::vector<fs::path> submission_files() {
  std::vector<fs::path> files;
  for (int task = 1; task <= kTaskCount; ++task) files.push_back(fs::path(task_info(task).lab) / "student.cpp");
  return files;
}

std::vector<fs::path> stage_submission(const fs::path& labs, const fs::path& staging, const fs::path& skeletons,
                                       const std::set<fs::path>& from_skeleton) {
  std::vector<fs::path> changed;
  for (const fs::path& file : submission_files()) {
    const fs::path lab_file = file.lexically_relative("labs");
    const fs::path from = (from_skeleton.contains(file) ? skeletons : labs) / lab_file;
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

// ---- reading a failed build for the lab that failed -------------------------------------------------------

namespace {

// The lab whose folder and file ("03-forward/student.cpp") `text` names: its object in ninja's FAILED line, its
// staged source in the compiler's and the linker's messages.
std::optional<fs::path> lab_named(std::string_view text) {
  for (const fs::path& file : submission_files())
    if (text.find("/" + file.lexically_relative("labs").string()) != std::string_view::npos) return file;
  return std::nullopt;
}

// A lab's entry point that `line` says is undefined ("undefined reference to `fsdplab::student_cpu_offload()'": a
// lab file left empty, or its function renamed), and its lab. Each lab's folder ends with its entry point's name,
// '_' as '-' (labs/student_tasks.hpp: student_overlap() in 06-prefetch-overlap).
struct EntryPoint {
  fs::path lab;
  std::string function;  // "fsdplab::student_cpu_offload()"
};

std::optional<EntryPoint> undefined_entry_point(std::string_view line) {
  const std::string_view prefix = "undefined reference to `fsdplab::student_";
  const std::size_t at = line.find(prefix);
  const std::size_t open = line.find('(', at);
  if (at == std::string_view::npos || open == std::string_view::npos) return std::nullopt;
  const std::string name(line.substr(at + prefix.size(), open - at - prefix.size()));
  std::string folder_end = "-" + name;
  std::replace(folder_end.begin(), folder_end.end(), '_', '-');
  for (const fs::path& file : submission_files())
    if (file.parent_path().filename().string().ends_with(folder_end))
      return EntryPoint{file, "fsdplab::student_" + name + "()"};
  return std::nullopt;
}

// A symbol two labs define, where `line` says so ("...04-backward/student.cpp:54: multiple definition of `helper()';
// ...01-meta-init/student.cpp:40: first defined here"): the symbol and the other lab. A helper at namespace scope in
// two labs clashes at the link, though each lab alone is right.
struct SharedDefinition {
  std::string symbol;  // "helper()"
  fs::path other;      // the lab that defined it first
};

std::optional<SharedDefinition> defined_in_two_labs(std::string_view line, const fs::path& lab) {
  const std::string_view phrase = "multiple definition of `";
  const std::size_t at = line.find(phrase);
  if (at == std::string_view::npos) return std::nullopt;
  const std::size_t begin = at + phrase.size(), end = line.find('\'', begin);
  const std::size_t first = line.find("; ", begin);
  if (end == std::string_view::npos || first == std::string_view::npos) return std::nullopt;
  const std::optional<fs::path> other = lab_named(line.substr(first));
  if (!other || *other == lab) return std::nullopt;
  return SharedDefinition{std::string(line.substr(begin, end - begin)), *other};
}

// `line` without the object files the linker names ("labs/CMakeFiles/.../02-flat-parameter/student.cpp.o:"): the
// build's, not the student's; the source file and line beside each stay.
std::string without_objects(const std::string& line) {
  static const std::regex object(R"([^\s:;']+\.o:)");
  return std::regex_replace(line, object, "");
}

bool is_link_error(std::string_view line) {
  return line.find("undefined reference to") != std::string_view::npos ||
         line.find("multiple definition of") != std::string_view::npos;
}

bool is_compile_error(std::string_view line) {
  return line.find(": error:") != std::string_view::npos || line.find(": fatal error:") != std::string_view::npos;
}

}  // namespace

BuildFailures build_failures(const std::vector<std::string>& lines, const fs::path& staging) {
  BuildFailures out;
  const std::string staged = staging.string() + "/";
  // The staged copy named as the student's own tree names the file: the diagnostic goes back to them.
  const auto as_submitted = [&](std::string line) {
    for (std::size_t at = line.find(staged); at != std::string::npos; at = line.find(staged, at))
      line.replace(at, staged.size(), "labs/");
    return line;
  };
  // Ninja prints a failed step's output whole, after its FAILED line, up to the next step's "[n/m]" or FAILED line.
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("FAILED: ", 0) != 0) continue;
    const std::string& failed = lines[i];
    std::vector<std::string_view> body;
    for (std::size_t j = i + 1; j < lines.size() && lines[j].rfind("FAILED: ", 0) != 0 && lines[j].rfind("[", 0) != 0 &&
                                lines[j].rfind("ninja: ", 0) != 0;
         ++j)
      body.push_back(lines[j]);
    const std::optional<fs::path> compiled = lab_named(failed);
    if (compiled && failed.find("student.cpp.o") != std::string::npos) {
      // The compiler's first error in the lab's own file; else where the lab led into an engine header's error
      // ("required from here"), with that error.
      // Ninja echoes the failed command first, which names the lab too: not a message.
      const auto command = [](std::string_view l) {
        return l.find(" -c ") != std::string_view::npos && l.find(" -o ") != std::string_view::npos;
      };
      const auto in_lab = [&](std::string_view l) { return l.find(staged) != std::string_view::npos && !command(l); };
      const auto first = [&](const auto& wanted) -> std::string {
        const auto found = std::find_if(body.begin(), body.end(), wanted);
        return found == body.end() ? "" : std::string(*found);
      };
      const auto lab_error = [&](std::string_view l) { return in_lab(l) && is_compile_error(l); };
      std::string why = first(lab_error);
      if (const auto errors = std::count_if(body.begin(), body.end(), lab_error); errors > 1)
        why += " (and " + std::to_string(errors - 1) + " more error" + (errors > 2 ? "s" : "") +
               " in the file: the build's messages on stderr)";
      if (why.empty()) {
        const std::string error = first(is_compile_error);
        std::string from_lab = first(
            [&](std::string_view l) { return in_lab(l) && l.find("required from here") != std::string_view::npos; });
        if (from_lab.empty()) from_lab = first(in_lab);
        why = from_lab.empty() ? error : error.empty() ? from_lab : from_lab + " — " + error;
        // A message of the compiler's own ("cc1plus: out of memory allocating ...", the sandbox's limit).
        if (why.empty()) why = first([&](std::string_view l) { return !l.empty() && !command(l); });
      }
      out.labs.try_emplace(*compiled,
                           compiled->string() + " does not compile" +
                               (why.empty() ? " (the compiler's messages are above)" : ": " + as_submitted(why)));
      continue;
    }
    if (failed.find("app/fsdplab") == std::string::npos) {
      out.elsewhere = true;  // an engine object, or a step no lab accounts for
      continue;
    }
    // The link: each error blames the file it is reported in (the text before "undefined reference" or "multiple
    // definition"), or, for a lab's entry point missing, that lab.
    bool blamed = false;
    for (std::string_view line : body) {
      if (!is_link_error(line)) continue;
      const std::size_t phrase = std::min(line.find("undefined reference to"), line.find("multiple definition of"));
      std::optional<fs::path> lab = lab_named(line.substr(0, phrase));
      std::string why = without_objects(as_submitted(std::string(line)));
      if (const std::optional<EntryPoint> entry = lab ? std::nullopt : undefined_entry_point(line)) {
        // The linker's line names the course tree's labs/student_tasks.cpp and its objects: not the student's.
        lab = entry->lab;
        why = "it defines no " + entry->function +
              ", which labs/student_tasks.cpp calls: the function at the end of the skeleton, renamed or removed";
      } else if (const std::optional<SharedDefinition> shared = lab ? defined_in_two_labs(line, *lab) : std::nullopt) {
        why = "it defines " + shared->symbol + ", which " + shared->other.string() +
              " defines too: a lab's own helpers go in an anonymous namespace (or are static), so that two labs' "
              "helpers never clash at the link (" +
              why + ")";
      }
      if (!lab) continue;
      blamed = true;
      out.labs.try_emplace(*lab, lab->string() + " does not link: " + why);
    }
    if (!blamed) out.elsewhere = true;  // the engine's, or the build's
  }
  return out;
}

// ---- one grading at a time in a build folder --------------------------------------------------------------

BuildFolderLock::BuildFolderLock(const fs::path& build, std::chrono::milliseconds remind_every) {
  using std::chrono::steady_clock;
  fs::create_directories(build);
  fd_ = ::open(build.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) fail("cannot open the build folder '", build.string(), "': ", std::strerror(errno));
  const steady_clock::time_point start = steady_clock::now();
  steady_clock::time_point remind_at = start + remind_every;
  bool said = false;
  // Polled rather than a blocking flock, so that the wait can be told as it goes on.
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) {
      const int error = errno;
      ::close(fd_);
      fail("cannot lock the build folder '", build.string(), "': ", std::strerror(error));
    }
    if (!said) {
      std::cerr << kWho << ": waiting for another grading that uses the build folder '" << build.string()
                << "' (one at a time; --submission-build gives this one a folder of its own)\n";
      said = true;
    } else if (steady_clock::now() >= remind_at) {
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(steady_clock::now() - start);
      std::cerr << kWho << ": still waiting for the build folder '" << build.string() << "' (" << waited.count()
                << " s so far)\n";
      remind_at += remind_every;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

BuildFolderLock::~BuildFolderLock() { ::close(fd_); }

// ---- the sandbox's folders and the child's arguments ------------------------------------------------------

std::vector<fs::path> read_by_the_grade(const fs::path& build, const fs::path& cases) {
  std::vector<fs::path> readable{build};
  if (cases.empty()) return readable;
  readable.push_back(cases);
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(cases, error)) {
    if (!entry.is_symlink(error)) continue;
    const fs::path target = fs::canonical(entry.path(), error);
    if (!error) readable.push_back(target);
  }
  return readable;
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

// ---- grade --submission -----------------------------------------------------------------------------------

int grade_submission(const fs::path& submission, const std::vector<std::string>& grade_args, const fs::path& build_dir,
                     const fs::path& cases, const fs::path& json, const SubmissionBounds& bounds) {
  // Not graded at all: said once, on stdout too (the student's text, which may already hold what the submission's
  // code printed), and, for a gradebook built from the --json files, written there too.
  const auto refused = [&](const std::string& why) {
    std::cout.flush();
    std::cout << kWho << ": not graded: " << why << "\n";
    std::cout.flush();
    std::cerr << kWho << ": " << why << "\n";
    if (json.empty()) return 1;
    const std::vector<std::string> named = graded_submission_args(submission);
    try {
      grading::write_refused_grade_json(json, {named.at(1), named.at(2)}, why);
      std::cerr << kWho << ": " << json.string() << " says it was not graded, and why\n";
    } catch (const Error& e) {
      std::cerr << kWho << ": " << e.what() << "\n";
    }
    return 1;
  };
  try {
    const fs::path source = FSDPLAB_SOURCE_DIR;
    std::error_code error;
    if (!fs::is_regular_file(source / "CMakeLists.txt", error)) {
      fail("the source tree this fsdplab was built from ('", source.string(),
             "') is not there any more; --submission builds the submission against it");
    }
    refuse_a_course_build_older_than_its_tree(source, FSDPLAB_BINARY_DIR);
    const CheckedSubmission checked = checked_submission(submission);
    const fs::path labs = checked.labs;
    if (!checked.moved.empty())
      std::cerr << kWho << ": '" << submission.string() << "': " << checked.moved << "; graded from '" << labs.string()
                << "'\n";
    const fs::path build = fs::absolute(build_dir).lexically_normal();
    const fs::path staging = build / kStagedLabs;
    check_build_folder(build, checked.dir, FSDPLAB_BINARY_DIR);
    const BuildFolderLock lock(build);  // until this grade is done: its build is what it grades
    std::map<fs::path, std::string> not_built = checked.unusable;
    for (const auto& [file, reason] : not_built)
      std::cerr << kWho << ": " << reason << ": its task scores 0 and the lab's skeleton is built instead\n";
    std::set<fs::path> from_skeleton;
    for (const auto& [file, reason] : not_built) from_skeleton.insert(file);
    configure(source, FSDPLAB_BINARY_DIR, build, staging, checked.dir, labs, from_skeleton);
    build_with_skeletons_for_failures(source, build, staging, labs, not_built);
    const fs::path binary = build / "app" / "fsdplab";
    if (!fs::is_regular_file(binary, error)) {
      fail("the build in '", build.string(), "' succeeded but left no '", binary.string(), "'");
    }
    std::vector<std::string> args{binary.string(), "grade"};
    args.insert(args.end(), grade_args.begin(), grade_args.end());
    const std::vector<std::string> named = graded_submission_args(submission);
    args.insert(args.end(), named.begin(), named.end());
    const std::vector<fs::path> files = submission_files();
    for (const auto& [file, reason] : not_built) {
      const auto task = std::find(files.begin(), files.end(), file) - files.begin() + 1;
      args.insert(args.end(), {"--not-built", std::to_string(task) + ":" + reason});
    }
    const ChildStatus graded =
        run_submissions_grade(std::move(args), build, cases.empty() ? cases : fs::absolute(cases), json, bounds);
    if (graded.said.rfind("exited", 0) != 0) {
      std::cerr << kWho << ": the submission's fsdplab grade " << graded.said << "\n";
    }
    // The text's commands are the student's (build/app/fsdplab in their tree); the course runs them with this build.
    std::cerr << kWho << ": to run a \"see it\" command here, call '" << fs::absolute(binary).string()
              << "' (this submission's build, its labs as graded now: grade again after an edit) in place of "
                 "build/app/fsdplab\n";
    return graded.code;
  } catch (const Error& e) {  // what stops a submission from being graded
    return refused(e.what());
  } catch (const std::exception& e) {
    return refused(std::string("error: ") + e.what());
  }
}

}  // namespace fsdplab::app
