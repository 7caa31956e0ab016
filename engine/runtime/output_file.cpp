#include "engine/runtime/output_file.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <string>
#include <system_error>
#include <vector>

#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

namespace fs = std::filesystem;

// Linux allows 40 hops before ELOOP; so do we.
constexpr int kMaxLinkHops = 40;

std::string errno_text(int error) { return std::generic_category().message(error); }

// "--losses '/x'" or, without an option, "'/x'".
std::string named(std::string_view what, const fs::path& path) {
  return (what.empty() ? std::string() : std::string(what) + " ") + "'" + path.string() + "'";
}

// The kernel's per-process files (/proc/self/fd/1, which /dev/stdout and /dev/fd/N lead to) are links
// whose targets are not paths ("pipe:[123]") or are the very file a shell redirected into: never renamed over.
bool kernel_link(const fs::path& path) {
  const auto first = ++path.begin();  // after the root
  return path.is_absolute() && first != path.end() && *first == "proc";
}

// The nearest folder above `path` that exists (`path` itself if it does), symbolic links followed.
fs::path nearest_existing(fs::path path) {
  std::error_code ec;
  while (!path.empty() && !fs::exists(path, ec)) path = path.parent_path();
  return path.empty() ? fs::path(".") : path;
}

// An Error unless files can be made in `folder`, or, when the writer creates it (`created`), in the
// folders to be created below its nearest existing ancestor.
void check_can_create_in(const fs::path& folder, bool created, std::string_view what, const fs::path& requested) {
  const fs::path place = folder.empty() ? fs::path(".") : folder;
  const fs::path existing = created ? nearest_existing(place) : place;
  std::error_code ec;
  check(created || fs::exists(existing, ec), named(what, requested), ": the folder '", existing.string(),
        "' does not exist; expected an existing folder");
  check(fs::is_directory(existing, ec), named(what, requested), ": '", existing.string(),
        "' is not a folder, so nothing can be written below it; expected a path in a folder");
  // A file made and removed again, not access(): it says yes to root wherever the mode bits do, in /proc and on a
  // read-only mount too, where the writer then fails after the run.
  const std::string probe = (existing / ".fsdplab-probe-XXXXXX").string();
  std::vector<char> name(probe.begin(), probe.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  const int error = errno;  // before anything else can change it
  // A folder that is there but takes no new file (/proc) answers ENOENT, which would read as "no such folder".
  check(fd >= 0, named(what, requested), ": cannot write into the folder '", existing.string(), "' (",
        error == ENOENT ? "it takes no new files" : errno_text(error), ")");
  ::close(fd);
  ::unlink(name.data());
}

// A std::ostream's buffer over a file descriptor, so a writer can flush (fsync) what it wrote.
class DescriptorBuffer final : public std::streambuf {
 public:
  explicit DescriptorBuffer(int fd) : fd_(fd) { setp(buffer_.data(), buffer_.data() + buffer_.size()); }
  int error() const { return error_; }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  bool drain() {
    for (char* p = pbase(); p < pptr();) {
      const ssize_t n = ::write(fd_, p, static_cast<std::size_t>(pptr() - p));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error_ = n < 0 ? errno : EIO;
        return false;
      }
      p += n;
    }
    setp(buffer_.data(), buffer_.data() + buffer_.size());
    return true;
  }

  int fd_;
  int error_ = 0;
  std::array<char, 1 << 16> buffer_{};
};

}  // namespace

OutputTarget resolve_output(const fs::path& requested, std::string_view what) {
  check(!requested.empty(), what, ": an empty path; expected a file name");
  fs::path current = requested;
  for (int hop = 0;; ++hop) {
    check(hop < kMaxLinkHops, named(what, requested), ": more than ", kMaxLinkHops,
          " symbolic links in a row (a loop?); expected a file");
    struct stat st {};
    if (::lstat(current.c_str(), &st) != 0) {
      const int error = errno;
      // A new file; ENOTDIR: a parent is not a folder, which the folder checks and the writer then name.
      check(error == ENOENT || error == ENOTDIR, named(what, requested), ": cannot look at '", current.string(), "' (",
            errno_text(error), ")");
      return {current, false};
    }
    if (S_ISLNK(st.st_mode)) {
      if (kernel_link(fs::absolute(current))) {
        struct stat target {};
        check(::stat(current.c_str(), &target) == 0, named(what, requested), ": '", current.string(),
              "' leads nowhere (", errno_text(errno), ")");
        check(!S_ISDIR(target.st_mode), named(what, requested), " is a folder; expected a file");
        return {current, true};
      }
      std::error_code ec;
      const fs::path target = fs::read_symlink(current, ec);
      check(!ec, named(what, requested), ": cannot read the symbolic link '", current.string(), "': ", ec.message());
      current = target.is_absolute() ? target : current.parent_path() / target;
      continue;
    }
    check(!S_ISDIR(st.st_mode), named(what, requested), " is a folder; expected a file");
    return {current, !S_ISREG(st.st_mode)};
  }
}

void check_output_file(const fs::path& requested, std::string_view what) {
  const OutputTarget target = resolve_output(requested, what);
  if (target.in_place) {
    check(::access(target.path.c_str(), W_OK) == 0, named(what, requested), ": cannot write to '",
          target.path.string(), "' (", errno_text(errno), ")");
    return;
  }
  check_can_create_in(target.path.parent_path(), false, what, requested);
}

void check_output_folder(const fs::path& dir, std::string_view what) {
  check(!dir.empty(), what, ": an empty path; expected a folder");
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);  // links followed
  if (fs::exists(status)) {
    check(fs::is_directory(status), named(what, dir), " is not a folder (a file or a device); expected a folder");
    check(::access(dir.c_str(), W_OK | X_OK) == 0, named(what, dir), ": cannot write into it (", errno_text(errno),
          ")");
    return;
  }
  check(!fs::is_symlink(fs::symlink_status(dir, ec)), named(what, dir),
        " is a symbolic link to nothing; expected a folder");
  check_can_create_in(dir.parent_path(), true, what, dir);
}

bool path_is_within(const fs::path& path, const fs::path& folder) {
  std::error_code ec;
  const fs::path inner = fs::weakly_canonical(fs::absolute(path, ec), ec);
  const fs::path outer = fs::weakly_canonical(fs::absolute(folder, ec), ec);
  if (ec) return false;
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

namespace {

// A device or a pipe (symbolic links followed): written in place, it keeps nothing a write could destroy.
bool is_stream_node(const fs::path& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  return !ec && fs::exists(status) && !fs::is_regular_file(status) && !fs::is_directory(status);
}

// The Error for `inner`, which lies in the folder `outer` (one of them written).
[[noreturn]] void fail_inside(const PathUse& inner, const PathUse& outer) {
  fail(named(inner.option, inner.path), " lies in ", named(outer.option, outer.path), ", a folder the run ",
       outer.written ? "writes" : "reads", "; expected ",
       inner.written ? "a path outside it" : "the run's inputs outside the folders it writes");
}

}  // namespace

bool same_file(const fs::path& a, const fs::path& b) {
  // stat, not std::filesystem::equivalent, which libstdc++ refuses for two devices (/dev/null twice).
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  return path_is_within(a, b) && path_is_within(b, a);
}

void check_paths_apart(std::span<const PathUse> uses) {
  for (std::size_t i = 0; i < uses.size(); ++i) {
    for (std::size_t j = i + 1; j < uses.size(); ++j) {
      // The written one first: the message names what would be overwritten.
      const bool swap = !uses[i].written;
      const PathUse& a = swap ? uses[j] : uses[i];
      const PathUse& b = swap ? uses[i] : uses[j];
      // One option's paths (a folder's files) are apart by construction.
      if (a.path.empty() || b.path.empty() || !a.written || a.option == b.option) continue;
      if (same_file(a.path, b.path)) {
        if (is_stream_node(a.path)) continue;
        fail(named(a.option, a.path), " is the same ", a.folder ? "folder" : "file", " as ", named(b.option, b.path),
             b.written ? ", another output of the run: one would overwrite the other"
                       : ", which the run reads: writing it would destroy it",
             "; expected a path of its own");
      }
      if (path_is_within(a.path, b.path)) fail_inside(a, b);
      if (path_is_within(b.path, a.path)) fail_inside(b, a);
    }
  }
}

void write_output_file(const fs::path& requested, std::string_view what,
                       const std::function<void(std::ostream&)>& write, bool flush_to_disk) {
  const std::string name = named(what, requested);
  const OutputTarget target = resolve_output(requested, what);
  fs::path tmp;
  if (!target.in_place) {
    tmp = target.path;
    tmp += ".tmp";
  }
  const fs::path& file = target.in_place ? target.path : tmp;
  const int fd = target.in_place ? ::open(file.c_str(), O_WRONLY | O_CLOEXEC | O_TRUNC)
                                 : ::open(file.c_str(), O_WRONLY | O_CLOEXEC | O_CREAT | O_TRUNC, 0666);
  check(fd >= 0, "cannot write ", name, ": cannot open '", file.string(), "': ", errno_text(errno));
  int error = 0;
  try {
    DescriptorBuffer buffer(fd);
    std::ostream out(&buffer);
    write(out);
    out.flush();
    error = buffer.error() != 0 ? buffer.error() : out.good() ? 0 : EIO;
  } catch (...) {
    ::close(fd);
    if (!tmp.empty()) ::unlink(tmp.c_str());
    throw;
  }
  if (error == 0 && flush_to_disk && !target.in_place && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0 && !target.in_place) error = errno;
  std::error_code ec;
  if (error == 0 && !target.in_place) fs::rename(tmp, target.path, ec);
  if (error != 0 || ec) {
    if (!tmp.empty()) ::unlink(tmp.c_str());
    fail("cannot write ", name, ": ", error != 0 ? "writing '" : "renaming '", file.string(),
         "' failed: ", error != 0 ? errno_text(error) : ec.message());
  }
}

}  // namespace fsdplab
