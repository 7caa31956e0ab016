#include "engine/runtime/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "engine/runtime/error.hpp"

namespace fsdplab {

std::string read_input_file(const std::filesystem::path& path, std::string_view what, std::uint64_t max_bytes,
                            std::string_view made_by) {
  const std::string file = path.string();
  const auto error_words = [](int error) { return std::error_code(error, std::generic_category()).message(); };
  const int fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail("cannot read ", what, " '", file, "': cannot open it: ", error_words(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail("cannot read ", what, " '", file, "': ", error_words(errno));
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    fail("cannot read ", what, " '", file, "': it is ", kind, "; expected a regular file",
         made_by.empty() ? std::string() : " (" + std::string(made_by) + ")");
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > max_bytes)
    fail("cannot read ", what, " '", file, "': it has ", size, " bytes; expected at most ", max_bytes);
  // Read what fstat reported and one byte more: a file still growing is cut off at the limit, not followed.
  std::string text(static_cast<std::size_t>(size) + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot read ", what, " '", file, "': reading failed: ", error_words(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > max_bytes) fail("cannot read ", what, " '", file, "': it grew past ", max_bytes, " bytes while being read");
  text.resize(got);
  return text;
}

}  // namespace fsdplab
