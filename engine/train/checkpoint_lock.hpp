// checkpoint_lock.hpp — one run at a time writes a --checkpoint folder.
//
// Two runs given the same --checkpoint DIR would each stage into DIR.fsdplab-tmp and swap it in, failing
// each other with confusing messages. The run that writes checkpoints (the process hosting rank 0) takes
// an exclusive lock first: a file DIR.fsdplab-lock beside the folder (the folder itself is replaced at
// every commit), locked with flock and holding the locker's process id. The kernel drops the lock when
// the process ends, however it ends, so a crashed run never leaves the folder locked; the file stays.
#pragma once
#include <filesystem>

namespace fsdplab {

class CheckpointLock {
 public:
  // Locks checkpoint folder `dir`; an Error naming the process that holds it, or why the lock file
  // cannot be made.
  explicit CheckpointLock(const std::filesystem::path& dir);
  ~CheckpointLock();
  CheckpointLock(const CheckpointLock&) = delete;
  CheckpointLock& operator=(const CheckpointLock&) = delete;

  // Where the lock lives: DIR.fsdplab-lock.
  static std::filesystem::path lock_file(const std::filesystem::path& dir);

 private:
  int fd_ = -1;
};

}  // namespace fsdplab
