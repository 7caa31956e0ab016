#include "app/temporary_folders.hpp"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

namespace fs = std::filesystem;

constexpr std::array kSignals{SIGINT, SIGTERM, SIGHUP};

// The pipe the live TemporaryFolders' watcher reads; -1 when none lives. A handler may only do what is
// async-signal-safe: write() is, removing folders is not, so the watcher does that.
int wake_fd = -1;
std::array<struct sigaction, kSignals.size()> previous_actions{};

void on_signal(int signal) {
  const int saved = errno;
  const unsigned char number = static_cast<unsigned char>(signal);
  [[maybe_unused]] const ssize_t written = ::write(wake_fd, &number, 1);
  errno = saved;
}

}  // namespace

TemporaryFolders::TemporaryFolders(std::string command) : command_(std::move(command)) {
  check(wake_fd == -1, command_, ": a second TemporaryFolders while one lives");
  if (::pipe(wake_) != 0) fail(command_, ": cannot make the pipe that signals wake on: ", std::strerror(errno));
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

  std::string removed;
  {
    const std::lock_guard lock(mutex_);
    for (const fs::path& folder : folders_) removed += (removed.empty() ? "" : ", ") + folder.string();
  }
  remove_all_not_kept();
  const char* name = signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "SIGHUP";
  std::fprintf(stderr, "%s: interrupted by %s%s%s\n", command_.c_str(), name, removed.empty() ? "" : "; removed ",
               removed.c_str());
  // Ends the process as the signal's default action would: a shell sees the signal, not an exit status.
  std::signal(signal, SIG_DFL);
  ::kill(::getpid(), signal);
  std::_Exit(128 + signal);  // not reached unless the signal is blocked in every thread
}

}  // namespace fsdplab
