#include "engine/runtime/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

#include "engine/runtime/error.hpp"

namespace fsdplab {

namespace {

std::string error_words(int error) { return std::error_code(error, std::generic_category()).message(); }

}  // namespace

InputFile::InputFile(const std::filesystem::path& path, std::string_view what, std::string_view made_by)
    : file_(path.string()), what_(what) {
  fd_ = ::open(file_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) fail("cannot read ", what_, " '", file_, "': cannot open it: ", error_words(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int error = errno;
    ::close(fd_);
    fail("cannot read ", what_, " '", file_, "': ", error_words(error));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    fail("cannot read ", what_, " '", file_, "': it is ", kind, "; expected a regular file",
         made_by.empty() ? std::string() : " (" + std::string(made_by) + ")");
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
}

InputFile::InputFile(InputFile&& other) noexcept
    : file_(std::move(other.file_)), what_(std::move(other.what_)), fd_(other.fd_), size_(other.size_) {
  other.fd_ = -1;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t InputFile::read_some_at(std::uint64_t offset, std::span<std::byte> out) const {
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::pread(fd_, out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot read ", what_, " '", file_, "': reading failed: ", error_words(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  return got;
}

void InputFile::read_at(std::uint64_t offset, std::span<std::byte> out) const {
  const std::size_t got = read_some_at(offset, out);
  check(got == out.size(), "cannot read ", what_, " '", file_, "': ", out.size(), " bytes at byte ", offset, " of the ",
        size_, " it had when opened, and ", got, " are there (was it shortened since?)");
}

std::string read_input_file(const std::filesystem::path& path, std::string_view what, std::uint64_t max_bytes,
                            std::string_view made_by) {
  const InputFile input(path, what, made_by);
  const std::string file = path.string();
  if (input.size() > max_bytes)
    fail("cannot read ", what, " '", file, "': it has ", input.size(), " bytes; expected at most ", max_bytes);
  // Read what fstat reported and one byte more: a file still growing is cut off at the limit, not followed.
  std::string text(static_cast<std::size_t>(input.size()) + 1, '\0');
  const std::size_t got = input.read_some_at(0, std::as_writable_bytes(std::span<char>(text)));
  if (got > max_bytes) fail("cannot read ", what, " '", file, "': it grew past ", max_bytes, " bytes while being read");
  text.resize(got);
  return text;
}

}  // namespace fsdplab
