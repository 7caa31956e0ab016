#include "engine/train/checkpoint_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "engine/runtime/error.hpp"

namespace fsdplab {

std::filesystem::path CheckpointLock::lock_file(const std::filesystem::path& dir) {
  std::filesystem::path clean = dir.lexically_normal();
  if (clean.has_filename() == false) clean = clean.parent_path();  // "ck/" locks as "ck"
  return clean.string() + ".fsdplab-lock";
}

CheckpointLock::CheckpointLock(const std::filesystem::path& dir) {
  const std::filesystem::path path = lock_file(dir);
  fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  check(fd_ >= 0, "--checkpoint '", dir.string(), "': cannot make its lock file '", path.string(),
        "': ", std::strerror(errno));
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int why = errno;
    char holder[32] = {};
    [[maybe_unused]] const ssize_t n = pread(fd_, holder, sizeof holder - 1, 0);
    close(fd_);
    fd_ = -1;
    check(why != EWOULDBLOCK, "--checkpoint '", dir.string(), "': another run (process ", holder[0] ? holder : "?",
          ") is writing checkpoints there; wait for it to end, or give this run another folder");
    fail("--checkpoint '", dir.string(), "': cannot lock '", path.string(), "': ", std::strerror(why));
  }
  const std::string pid = std::to_string(getpid());
  if (ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t n = pwrite(fd_, pid.data(), pid.size(), 0);
  }
}

CheckpointLock::~CheckpointLock() {
  if (fd_ >= 0) close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace fsdplab
