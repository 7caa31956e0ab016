#include "grader/check_process.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <typeinfo>

#include "engine/comm/communicator.hpp"
#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/fsdp/lab_todo.hpp"
#include "engine/runtime/error.hpp"
#include "grader/budget_line_json.hpp"
#include "grader/graded_run.hpp"

namespace fsdplab::grading {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// ---- the outcome on the wire: 'R' and JSON, 'C' and 'H' crash records, 'X' for exit() ---------------------

nlohmann::json to_json(const CheckOutcome& o) {
  return {{"fraction", o.fraction}, {"expected", o.expected}, {"got", o.got},     {"cause", o.cause},
          {"budget", o.budget},     {"show", o.show},         {"raced", o.raced}, {"unseen", o.unseen}};
}

CheckOutcome from_json(const nlohmann::json& j) {
  CheckOutcome o;
  o.fraction = j.at("fraction").get<double>();
  o.expected = j.at("expected").get<std::string>();
  o.got = j.at("got").get<std::string>();
  o.cause = j.at("cause").get<std::string>();
  o.show = j.at("show").get<std::string>();
  o.raced = j.at("raced").get<bool>();
  o.unseen = j.at("unseen").get<bool>();
  o.budget = j.at("budget").get<std::vector<BudgetLine>>();
  return o;
}

constexpr int kMaxFrames = 48;
// A thread's stack on the pipe: 'C' for the thread that crashed, 'H' for each thread of a check that ran out of
// time. Smaller than PIPE_BUF, so the records of several threads written at once never interleave.
struct CrashRecord {
  char tag = 'C';
  int signal = 0;
  int tid = 0;
  int frames = 0;
  void* frame[kMaxFrames] = {};
};
static_assert(sizeof(CrashRecord) < PIPE_BUF);

int g_result_fd = -1;  // the child's end of the pipe, for the crash handler

// [Note: where a crash happened]
// A crashing student's code must be named in the report. The child's handler of SIGSEGV, SIGBUS, SIGFPE,
// SIGILL and SIGABRT takes the faulting thread's stack (backtrace(), warmed up once beforehand so that it
// does not allocate in the handler), writes the raw return addresses to the pipe, and re-raises the
// signal so the parent sees how the child died. The child is a fork of the parent, so the addresses mean
// the same in the parent, which resolves them with addr2line against its own executable's debug
// information — anonymous-namespace classes included, which no dynamic symbol table holds — and names
// the first frame in a task implementation (labs/, a *_reference.cpp, a *_as_student.cpp, labs/mutants/).
void on_crash(int sig) {
  CrashRecord record;
  record.signal = sig;
  record.frames = backtrace(record.frame, kMaxFrames);
  [[maybe_unused]] const ssize_t n = write(g_result_fd, &record, sizeof record);
  signal(sig, SIG_DFL);
  raise(sig);
}

// [Note: exit() in the graded code]
// exit() called in the middle of a check (std::exit in a task method, perhaps on a rank's thread) runs the process's
// static destructors while the other ranks' threads still use what they destroy: the child then often crashed
// on its way out, and the report named a SIGSEGV somewhere in the engine. The child's first exit handler runs
// before any of those destructors: it says so on the pipe and ends the process at once, which the parent reports
// as what it was.
void on_exit_called() {
  const char tag = 'X';
  [[maybe_unused]] const ssize_t n = write(g_result_fd, &tag, 1);
  _exit(0);
}

// [Note: where a hang was]
// A check out of time is asked where it is before it is killed: the parent sends each of the child's threads
// kWhereSignal (noting which threads were running, not waiting), and each writes its stack to the pipe, as a crash
// does. The parent names a thread that was running (an infinite loop: its own frame) or, where every thread waited
// (a deadlock, a collective never joined), the task code a waiting thread is in. Under ThreadSanitizer a thread
// spinning in uninstrumented calls may take the signal only after the kill: the report then names no place.
constexpr int kWhereSignal = SIGUSR2;

void on_where_asked(int) {
  CrashRecord record;
  record.tag = 'H';
  record.tid = static_cast<int>(gettid());
  record.frames = backtrace(record.frame, kMaxFrames);
  [[maybe_unused]] const ssize_t n = write(g_result_fd, &record, sizeof record);
}

void install_crash_handlers(int fd) {
  g_result_fd = fd;
  void* warm[1];
  backtrace(warm, 1);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) signal(sig, on_crash);
  signal(kWhereSignal, on_where_asked);  // BSD semantics: a wait it interrupts restarts
}

void write_all(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

// ---- naming a crash site ----------------------------------------------------------------------------

struct MainObject {
  std::uintptr_t base = 0;
  std::string path;
};

MainObject main_object() {
  MainObject m;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        static_cast<MainObject*>(data)->base = info->dlpi_addr;  // the first object is the executable
        return 1;
      },
      &m);
  m.path = fs::read_symlink("/proc/self/exe").string();
  return m;
}

bool in_main_object(void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return true;  // no shared object claims it
  std::error_code ec;
  return fs::equivalent(info.dli_fname, "/proc/self/exe", ec) || std::string(info.dli_fname).empty();
}

// "(anonymous namespace)::StudentForward::all_gather(fsdplab::Device&, ...) const" -> "StudentForward::all_gather".
std::string short_function(std::string f) {
  for (std::string_view noise : {"fsdplab::", "(anonymous namespace)::"}) {
    for (std::size_t at; (at = f.find(noise)) != std::string::npos;) f.erase(at, noise.size());
  }
  if (const std::size_t paren = f.find('('); paren != std::string::npos && paren > 0) f.resize(paren);
  return f;
}

// The place `record`'s stack names: its first frame in task code, else (unless `task_code_only`) its first frame
// with a name; "" for none.
std::string crash_site(const CrashRecord& record, bool task_code_only = false) {
  const MainObject exe = main_object();
  std::ostringstream command;
  command << "addr2line -C -f -e '" << exe.path << "'";
  int resolved = 0;
  // Frame 0 is the handler itself, frame 1 the signal trampoline; a return address points after its call.
  for (int i = 2; i < record.frames && i < kMaxFrames; ++i) {
    if (!in_main_object(record.frame[i])) continue;
    command << " 0x" << std::hex << (reinterpret_cast<std::uintptr_t>(record.frame[i]) - exe.base - (i > 2 ? 1 : 0));
    ++resolved;
  }
  if (resolved == 0 || exe.path.find('\'') != std::string::npos) return "";
  FILE* pipe = popen(command.str().c_str(), "r");
  if (!pipe) return "";
  std::vector<std::pair<std::string, std::string>> frames;  // function, file:line
  std::array<char, 4096> line{};
  std::string function;
  bool want_function = true;
  while (fgets(line.data(), static_cast<int>(line.size()), pipe)) {
    std::string text(line.data());
    if (!text.empty() && text.back() == '\n') text.pop_back();
    // "student.cpp:13 (discriminator 1)": which of a line's basic blocks, no help to the student.
    if (const std::size_t at = text.find(" (discriminator "); at != std::string::npos) text.resize(at);
    if (want_function) function = text;
    else frames.emplace_back(function, std::string(repository_path(text)));
    want_function = !want_function;
  }
  pclose(pipe);
  const auto is_task_code = [](const std::string& file) {
    return file.starts_with("labs/") || file.find("_reference.cpp") != std::string::npos ||
           file.find("_as_student.cpp") != std::string::npos;
  };
  for (const auto& [f, file] : frames)
    if (is_task_code(file)) return short_function(f) + " (" + file + ")";
  if (task_code_only) return "";
  for (const auto& [f, file] : frames)
    if (f != "??") return short_function(f) + (file.starts_with("??") ? "" : " (" + file + ")");
  return "";
}

// ---- the child ---------------------------------------------------------------------------------------

[[noreturn]] void child_main(const CheckJob& job, const fs::path& scratch, int fd) {
  // A parent's interrupt handler (app/temporary_folders.hpp) would swallow the child's Ctrl-C: the default ends it.
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) signal(sig, SIG_DFL);
  // And the check ends with its grade: an interrupted grade leaves no check running (and writing in its scratch).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  install_crash_handlers(fd);
  std::atexit(on_exit_called);  // the child itself ends with _exit(0), which runs no handler
  // What the graded code prints goes to a file of the check's, shown when it crashes.
  const int out = open((scratch / "output.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out >= 0) {
    dup2(out, STDOUT_FILENO);
    dup2(out, STDERR_FILENO);
    close(out);
  }
  const CheckRun run = run_here(job, scratch);
  nlohmann::json j = to_json(run.outcome);
  j["end"] = static_cast<int>(run.end);
  write_all(fd, "R" + j.dump());
  close(fd);
  _exit(0);
}

std::string tail_of(const fs::path& file, std::size_t lines) {
  std::ifstream in(file);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (std::size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += "\n    | " + all[i];
  return out;
}

// ---- the parent --------------------------------------------------------------------------------------

struct Running {
  std::size_t job = 0;
  pid_t pid = -1;
  int fd = -1;
  std::string bytes;
  Clock::time_point deadline;
  fs::path scratch;
  bool asked_where = false;  // out of time, and its threads asked where they are ([Note: where a hang was])
  std::set<int> running;     // the threads that were running, not waiting, when asked
};

// How long a check out of time has to say where its threads are before it is killed.
constexpr auto kWhereGrace = std::chrono::milliseconds(500);

// Sends kWhereSignal to each thread of process `pid`; returns those that were running (state R) at the time.
std::set<int> ask_threads_where(pid_t pid) {
  std::set<int> running;
  std::error_code error;
  const fs::path tasks = fs::path("/proc") / std::to_string(pid) / "task";
  for (const fs::directory_entry& entry : fs::directory_iterator(tasks, error)) {
    const int tid = std::atoi(entry.path().filename().c_str());
    if (tid <= 0) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    // "tid (comm) S ...": the state follows the last ')', as comm may hold one.
    if (const std::size_t close = line.rfind(')');
        close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'R')
      running.insert(tid);
    syscall(SYS_tgkill, pid, tid, kWhereSignal);
  }
  return running;
}

// Where a check out of time was: " in F (file:line)" for a thread that was running, " waiting in F (file:line)" for
// one waiting inside task code; "" where no record names either.
std::string hang_site(const std::string& bytes, const std::set<int>& running) {
  std::vector<CrashRecord> records;
  for (std::size_t at = 0; at + sizeof(CrashRecord) <= bytes.size() && bytes[at] == 'H'; at += sizeof(CrashRecord)) {
    CrashRecord record;
    std::memcpy(&record, bytes.data() + at, sizeof record);
    records.push_back(record);
  }
  for (const CrashRecord& r : records)
    if (running.contains(r.tid))
      if (const std::string site = crash_site(r); !site.empty()) return " in " + site;
  for (const CrashRecord& r : records)
    if (const std::string site = crash_site(r, true); !site.empty()) return " waiting in " + site;
  return "";
}

fs::path make_scratch() {
  std::string pattern = (fs::temp_directory_path() / "fsdplab-grade-XXXXXX").string();
  check(mkdtemp(pattern.data()) != nullptr, "grade: cannot make a scratch folder in ",
        fs::temp_directory_path().string(), ": ", std::strerror(errno));
  return pattern;
}

CheckRun ended(CheckEnd end, std::string got, std::string cause) {
  return {end, CheckOutcome::fail("the check to run to its end", std::move(got), std::move(cause))};
}

std::string seconds_text(double s) {
  std::ostringstream o;
  o << s;
  return o.str();
}

// Why a check of task `task` ran out of time. Task 1 draws on the host and waits for nothing: there a time-out is
// work. Elsewhere the wait that cannot end is for a collective another rank never calls: a wait for an event never
// recorded is refused at once on both devices, and a loop polling Device::completed ends on the sim device too
// ([Note: a host that polls an event]).
std::string time_out_cause(int task) {
  if (task == 1)
    return "an infinite loop, or far more drawn than the shard: every element from the parameter's first "
           "(param_begin ignored), or the whole parameter, where each slice's count is all there is to draw";
  return "an infinite loop, or a rank waiting for something that never happens (a collective another rank never "
         "calls)";
}

// `task`: the graded task's number (time_out_cause).
CheckRun collect(const Running& child, int task, int status, bool timed_out, double limit) {
  if (timed_out)
    return ended(CheckEnd::timed_out,
                 "check timed out after " + seconds_text(limit) + " s" + hang_site(child.bytes, child.running),
                 time_out_cause(task));
  if (!child.bytes.empty() && child.bytes[0] == 'R') {
    try {
      const nlohmann::json j = nlohmann::json::parse(child.bytes.substr(1));
      return {static_cast<CheckEnd>(j.at("end").get<int>()), from_json(j)};
    } catch (const std::exception&) {
      // fall through: a torn record is reported as how the process ended
    }
  }
  const std::string output = tail_of(child.scratch / "output.txt", 6);
  if (!child.bytes.empty() && child.bytes[0] == 'X')
    return ended(CheckEnd::crashed, "the process ended in the middle of the check: exit() was called" + output,
                 "exit() (or std::exit) in the graded code: a task method reports what it refuses by throwing "
                 "(check(...)), and never ends the process");
  if (child.bytes.size() >= sizeof(CrashRecord) && child.bytes[0] == 'C') {
    CrashRecord record;
    std::memcpy(&record, child.bytes.data(), sizeof record);
    const std::string site = crash_site(record);
    return ended(CheckEnd::crashed, "crashed with " + std::string(sigabbrev_np(record.signal) ? "SIG" : "") +
                                        (sigabbrev_np(record.signal) ? sigabbrev_np(record.signal) : "a signal") +
                                        (site.empty() ? "" : " in " + site) + output,
                 "a bad pointer or an index out of range in the graded code (or an abort it caused)");
  }
  if (WIFSIGNALED(status))
    return ended(CheckEnd::crashed,
                 "crashed with SIG" +
                     std::string(sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status)) : "?") + output,
                 "the process died before it could say where (a stack overflow?)");
  return ended(CheckEnd::crashed,
               "the check's process exited with status " + std::to_string(WEXITSTATUS(status)) + output,
               "the graded code ended the process (_exit(), or an uncaught error on a thread of its own)");
}

// "std::invalid_argument": the dynamic type of `e`, as the source names it.
std::string exception_type_name(const std::exception& e) {
  int status = 0;
  const std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status), std::free);
  return status == 0 && demangled ? demangled.get() : typeid(e).name();
}

}  // namespace

std::string_view check_end_name(CheckEnd end) {
  switch (end) {
    case CheckEnd::finished: return "finished";
    case CheckEnd::threw: return "threw";
    case CheckEnd::crashed: return "crashed";
    case CheckEnd::timed_out: return "timed out";
    case CheckEnd::not_built:
      return "not built";
    case CheckEnd::uses_reference:
      return "uses the reference";
  }
  return "?";
}

CheckRun run_here(const CheckJob& job, const fs::path& scratch) {
  const FsdpTasks reference = reference_tasks();
  const CheckContext context{job.check->task, job.tasks, reference, job.impl, job.seed, scratch};
  try {
    return {CheckEnd::finished, job.check->run(context)};
  } catch (const Error& e) {
    // A TODO thrown on a rank's thread reaches here as the world's Error ("rank 0 failed: task 3, ..."), which
    // carries it.
    if (caused_by<TaskNotImplemented>(e))
      return {CheckEnd::threw, CheckOutcome::fail("the check to run to its end",
                                                  "a TODO is left: " + without_failed_rank(e.what()), kTodoLeft)};
    if (caused_by<CaseNotTrainable>(e))
      return {CheckEnd::threw,
              CheckOutcome::fail(
                  "the check to run to its end", std::string("the check's case cannot be trained: ") + e.what(),
                  "the case, not the graded code: the single-rank baseline or the reference fails "
                  "it too (a held-out case's settings diverge, or ask more than a check can run); the "
                  "course must fix the case (`fsdplab grade --impl reference --cases DIR` earns every point when each "
                  "case is sound)")};
    // An Error is what the engine's own checks raise (an event waited on but never recorded, a wrong size...) as
    // well as the graded code's check(...): its message says what was refused, so it is the diagnostic.
    CheckOutcome stopped =
        CheckOutcome::fail("the check to run to its end", std::string("the run stopped with an error: ") + e.what(),
                           caused_by<HostTouchedDeviceMemory>(e) ? kRawPointerCause
                           : caused_by<CollectiveTimedOut>(e)
                               ? kCollectiveHangCause
                               : "the error above, on input the task's contract accepts: raised by the graded code, "
                                 "or by an engine call it made that refused what it was given");
    stopped.raced = caused_by<RaceError>(e);
    return {CheckEnd::threw, stopped};
  } catch (const std::exception& e) {
    // Not an Error: the engine's checks raise Errors, so this came from the graded code (or the library it called).
    return {CheckEnd::threw,
            CheckOutcome::fail("the check to run to its end", "threw " + exception_type_name(e) + ": " + e.what(),
                               "an exception that is not an fsdplab::Error: where the task's contract names an error, "
                               "raise it with check() or fail() (engine/runtime/error.hpp), which the engine and the "
                               "grader catch as the refusal; elsewhere the contract throws nothing")};
  }
}

std::vector<CheckRun> run_isolated(std::span<const CheckJob> jobs, const IsolationLimits& limits) {
  std::vector<CheckRun> runs(jobs.size());
  std::vector<Running> running;
  std::size_t next = 0;
  const auto limit = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits.seconds));
  std::fflush(nullptr);  // nothing buffered may be written twice, by parent and child
  while (next < jobs.size() || !running.empty()) {
    while (next < jobs.size() && static_cast<int>(running.size()) < std::max(1, limits.parallel)) {
      int fds[2];
      check(pipe2(fds, O_CLOEXEC) == 0, "grade: cannot make a pipe: ", std::strerror(errno));
      Running child;
      child.job = next++;
      child.scratch = make_scratch();
      const pid_t pid = fork();
      check(pid >= 0, "grade: cannot fork a check's process: ", std::strerror(errno));
      if (pid == 0) {
        close(fds[0]);
        child_main(jobs[child.job], child.scratch, fds[1]);
      }
      close(fds[1]);
      child.pid = pid;
      child.fd = fds[0];
      child.deadline = Clock::now() + limit;
      running.push_back(std::move(child));
    }
    std::vector<pollfd> polls;
    Clock::time_point soonest = Clock::time_point::max();
    for (const Running& c : running) {
      polls.push_back({c.fd, POLLIN, 0});
      soonest = std::min(soonest, c.deadline);
    }
    const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(soonest - Clock::now()).count();
    poll(polls.data(), polls.size(), static_cast<int>(std::clamp<long long>(wait_ms + 1, 0, 1000)));
    for (std::size_t i = running.size(); i-- > 0;) {
      Running& c = running[i];
      bool done = false, timed_out = false;
      if (polls[i].revents != 0) {
        char buffer[65536];
        const ssize_t n = read(c.fd, buffer, sizeof buffer);
        if (n > 0) c.bytes.append(buffer, static_cast<std::size_t>(n));
        else done = true;  // EOF: the child closed its end or died
      } else if (Clock::now() >= c.deadline && !c.asked_where) {
        c.running = ask_threads_where(c.pid);
        c.asked_where = true;
        c.deadline = Clock::now() + kWhereGrace;
      } else if (Clock::now() >= c.deadline) {
        kill(c.pid, SIGKILL);
        done = timed_out = true;
      }
      // A check that ended while it was asked where it was had still run out of time.
      if (done && c.asked_where && (c.bytes.empty() || c.bytes[0] != 'R')) timed_out = true;
      if (!done) continue;
      int status = 0;
      waitpid(c.pid, &status, 0);
      close(c.fd);
      runs[c.job] = collect(c, jobs[c.job].check->task, status, timed_out, limits.seconds);
      std::error_code ignored;
      fs::remove_all(c.scratch, ignored);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return runs;
}

}  // namespace fsdplab::grading
