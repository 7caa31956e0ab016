// input_file.hpp — reading a whole file a user named (a trace, a preset file, a grading case), safely.
//
// The file is opened without blocking (a FIFO would wait for a writer forever) and judged by fstat of what
// was opened before anything is read, so a directory, a device such as /dev/zero or a pipe is refused by
// its kind and never read; a regular file larger than the caller's bound is refused by its size.
// (output_file.hpp is the writing side.)
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace fsdplab {

// The whole of `path`, a regular file of at most `max_bytes`. An Error "cannot read <what> '<path>': ..."
// otherwise, saying what it is ("it is a directory; expected a regular file (<made_by>)"; made_by may be empty).
std::string read_input_file(const std::filesystem::path& path, std::string_view what, std::uint64_t max_bytes,
                            std::string_view made_by = "");

}  // namespace fsdplab
