// temporary_folders.hpp — the folders a long command makes for itself, removed however it ends short.
//
// An error unwinds the stack and runs destructors; Ctrl-C, SIGTERM and SIGHUP run none, so a scratch folder of
// traces and checkpoints would be left in /tmp and a half-made output folder beside the user's files. While a
// TemporaryFolders lives, those signals are caught: a handler (any thread may take the signal) wakes a watcher
// thread, which ends the process's child processes, says what it removes, and ends the process by the same signal,
// as the default action would have, so a shell still sees "killed by SIGINT". A process of its own removes the
// folders once this one has ended, since its threads and its children could write into them until then. A child
// process forked without exec inherits the handler, so it sets the signals back to their default first (a child
// that execs gets them back by itself).
#pragma once
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace fsdplab {

class TemporaryFolders {
 public:
  // `command` names the command in the message an interrupt prints ("fsdplab report"). One at a time per process.
  explicit TemporaryFolders(std::string command);
  // Removes every folder not kept, and gives the signals back to what handled them before.
  ~TemporaryFolders();
  TemporaryFolders(const TemporaryFolders&) = delete;
  TemporaryFolders& operator=(const TemporaryFolders&) = delete;

  // A new folder of this command's in the system's temporary folder (TMPDIR), named `prefix` and six characters,
  // removed whole when the command ends.
  std::filesystem::path make_scratch(const std::string& prefix);
  // `folder`, which this command made, is removed whole when it ends, unless kept first.
  void remove_at_end(const std::filesystem::path& folder);
  // `folder` is the command's result from now on: it stays.
  void keep(const std::filesystem::path& folder);

 private:
  void watch();
  void remove_all_not_kept();

  std::string command_;
  std::mutex mutex_;
  std::vector<std::filesystem::path> folders_;
  int wake_[2] = {-1, -1};  // the handler's pipe to the watcher: a signal's number, or 0 to stop
  std::thread watcher_;
};

}  // namespace fsdplab
