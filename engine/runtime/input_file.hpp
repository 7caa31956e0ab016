// input_file.hpp — reading a file a user named (a trace, a preset file, a grading case, a token file), safely.
//
// The file is opened without blocking (a FIFO would wait for a writer forever) and judged by fstat of what
// was opened before anything is read, so a directory, a device such as /dev/zero or a pipe is refused by
// its kind and never read; a regular file larger than the caller's bound is refused by its size.
// (output_file.hpp is the writing side.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace fsdplab {

// A regular file opened for reading, as read_input_file opens it (below), for files too large to read whole (a
// token file of billions of tokens): read in pieces, from any thread at once (each read says where it starts).
class InputFile {
 public:
  // An Error "cannot read <what> '<path>': ..." where it cannot be opened or is not a regular file, saying what it
  // is ("it is a directory; expected a regular file (<made_by>)"; made_by may be empty).
  InputFile(const std::filesystem::path& path, std::string_view what, std::string_view made_by = "");
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&&) = delete;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  std::uint64_t size() const { return size_; }  // as fstat saw it when opened
  // out.size() bytes from `offset`; an Error naming the file where fewer are there (it was shortened since).
  void read_at(std::uint64_t offset, std::span<std::byte> out) const;
  // Up to out.size() bytes from `offset`: how many there were (fewer at the end of the file).
  std::size_t read_some_at(std::uint64_t offset, std::span<std::byte> out) const;

 private:
  std::string file_;
  std::string what_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// The whole of `path`, a regular file of at most `max_bytes`. An Error "cannot read <what> '<path>': ..."
// otherwise, saying what it is ("it is a directory; expected a regular file (<made_by>)"; made_by may be empty).
std::string read_input_file(const std::filesystem::path& path, std::string_view what, std::uint64_t max_bytes,
                            std::string_view made_by = "");

}  // namespace fsdplab
