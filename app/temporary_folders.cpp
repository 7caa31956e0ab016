#include "app/temporary_folders.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

namespace fs = std::filesystem;

constexpr std::array kSignals{SIGINT, SIGTERM, SIGHUP};

// The pipe the live TemporaryFolders' watcher reads; -1 when none lives. A handler may only do what is
// async-signal-safe: write() is, and the watcher does the rest.
int wake_fd = -1;
std::array<struct sigaction, kSignals.size()> previous_actions{};

// Ends this process's child processes (a grade's checks, a build) and waits until they have: one still running
// would write into a folder as it is removed, and make it again.
void stop_child_processes() {
  const pid_t self = ::getpid();
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string text;
    std::getline(stat, text);
    // "pid (command) state ppid ...": the command may hold spaces and parentheses, so read after the last ')'.
    const std::size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(text.substr(close + 1));
    char state = 0;
    pid_t parent = 0;
    if (!(fields >> state >> parent) || parent != self) continue;
    const pid_t child = static_cast<pid_t>(std::stol(name));
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);  // the command's own wait may reap it first: then this returns at once
  }
}

// Removes `folders` from a process of its own (a shell, in a session of its own so that a second Ctrl-C does not stop
// it) once this process has ended, and with it the children that end with it (PR_SET_PDEATHSIG, as a grade's checks
// do): then nothing writes into them any more.
void remove_after_this_process(const std::vector<fs::path>& folders) {
  static constexpr const char* kScript =
      "while read -r stat 2>/dev/null < /proc/$0/stat; do"
      "  case \"${stat##*) }\" in Z*) break ;; esac;"  // ended, not yet reaped by its parent
      "  sleep 0.05; "
      "done; sleep 0.2; rm -rf -- \"$@\"";
  std::vector<std::string> words = {"/bin/sh", "-c", kScript, std::to_string(::getpid())};
  for (const fs::path& folder : folders) words.push_back(folder.string());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSID);
  pid_t cleaner = 0;
  if (const int error = ::posix_spawn(&cleaner, "/bin/sh", nullptr, &attributes, argv.data(), environ); error != 0)
    std::fprintf(stderr, "fsdplab: cannot start the process that removes the scratch folders: %s\n",
                 std::strerror(error));
  posix_spawnattr_destroy(&attributes);
}

void on_signal(int signal) {
  const int saved = errno;
  const unsigned char number = static_cast<unsigned char>(signal);
  [[maybe_unused]] const ssize_t written = ::write(wake_fd, &number, 1);
  errno = saved;
}

}  // namespace

TemporaryFolders::TemporaryFolders(std::string command) : command_(std::move(command)) {
  check(wake_fd == -1, command_, ": a second TemporaryFolders while one lives");
  if (::pipe2(wake_, O_CLOEXEC) != 0) fail(command_, ": cannot make the pipe that signals wake on: ", std::strerror(errno));
  wake_fd = wake_[1];
  watcher_ = std::thread([this] { watch(); });
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a system call the signal interrupts in another thread goes on
  for (std::size_t i = 0; i < kSignals.size(); ++i) {
    ::sigaction(kSignals[i], nullptr, &previous_actions[i]);
    // A signal the process was started to ignore (SIGHUP under nohup, SIGINT in a background job) stays ignored.
    if (previous_actions[i].sa_handler != SIG_IGN) ::sigaction(kSignals[i], &action, nullptr);
  }
}

TemporaryFolders::~TemporaryFolders() {
  for (std::size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &previous_actions[i], nullptr);
  const unsigned char stop = 0;
  [[maybe_unused]] const ssize_t written = ::write(wake_[1], &stop, 1);
  watcher_.join();
  wake_fd = -1;
  ::close(wake_[0]);
  ::close(wake_[1]);
  remove_all_not_kept();
}

fs::path TemporaryFolders::make_scratch(const std::string& prefix) {
  std::string pattern = (fs::temp_directory_path() / (prefix + "XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr)
    fail(command_, ": cannot make a scratch folder in ", fs::temp_directory_path().string(), ": ",
         std::strerror(errno));
  remove_at_end(pattern);
  return pattern;
}

void TemporaryFolders::remove_at_end(const fs::path& folder) {
  const std::lock_guard lock(mutex_);
  folders_.push_back(folder);
}

void TemporaryFolders::keep(const fs::path& folder) {
  const std::lock_guard lock(mutex_);
  std::erase(folders_, folder);
}

void TemporaryFolders::remove_all_not_kept() {
  const std::lock_guard lock(mutex_);
  for (const fs::path& folder : folders_) {
    std::error_code ignored;
    fs::remove_all(folder, ignored);
  }
  folders_.clear();
}

void TemporaryFolders::watch() {
  unsigned char signal = 0;
  ssize_t got = 0;
  do {
    got = ::read(wake_[0], &signal, 1);
  } while (got < 0 && errno == EINTR);
  if (got != 1 || signal == 0) return;  // the command ended: its destructor removes what is left

  // The other threads go on until the process ends, and may write into the folders again: they are removed by a
  // process of their own once this one has ended (remove_after_this_process).
  stop_child_processes();
  std::vector<fs::path> folders;
  {
    const std::lock_guard lock(mutex_);
    folders = folders_;
  }
  std::string removed;
  for (const fs::path& folder : folders) removed += (removed.empty() ? "" : ", ") + folder.string();
  if (!folders.empty()) remove_after_this_process(folders);
  const char* name = signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "SIGHUP";
  std::fprintf(stderr, "%s: interrupted by %s%s%s\n", command_.c_str(), name, removed.empty() ? "" : "; removing ",
               removed.c_str());
  // Ends the process as the signal's default action would: a shell sees the signal, not an exit status.
  std::signal(signal, SIG_DFL);
  ::kill(::getpid(), signal);
  std::_Exit(128 + signal);  // not reached unless the signal is blocked in every thread
}

}  // namespace fsdplab
