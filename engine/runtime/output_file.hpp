// output_file.hpp — writing a file a user named (--losses, --trace, --save-final...), and checking
// before a run that it can be written.
//
// What is at the path decides how it is written:
//   - nothing yet, or a regular file: written to a temporary name beside it (`name.tmp`) and renamed
//     over it, so an interrupted write leaves the old file or the new one, never half of one;
//   - a symbolic link: followed (every hop) to what it names, which is then written as above: the link
//     stays a link, and the temporary sits beside the target, on the target's file system;
//   - anything else that is not a folder (/dev/null, a terminal, a FIFO, /dev/stdout and the other
//     /proc/self/fd links): written in place. Renaming over such a node would replace it with a regular
//     file (as root, the machine's /dev/null).
// A folder is refused.
#pragma once
#include <filesystem>
#include <functional>
#include <ostream>
#include <span>
#include <string_view>

namespace fsdplab {

struct OutputTarget {
  std::filesystem::path path;  // where the bytes go: the requested path with its symbolic links followed
  bool in_place = false;       // not a regular file: written directly, never through a temporary and a rename
};

// Where a write to `path` goes (above). An Error naming `what` (the option, e.g. "--losses") and the path
// for a folder or a loop of symbolic links.
OutputTarget resolve_output(const std::filesystem::path& path, std::string_view what);

// Before a run: an Error naming `what` and the path unless the file can be written: resolve_output's
// checks, then a node written in place must be writable, and the folder a regular file goes in must be
// one this process may write into. Creates nothing.
void check_output_file(const std::filesystem::path& path, std::string_view what);

// The same for a folder the run writes files into and creates if missing (--save-final, --trace-dir): a
// folder, or nothing yet below an existing folder this process may write into.
void check_output_folder(const std::filesystem::path& dir, std::string_view what);

// True when `path` is `folder` or lies inside it, symbolic links followed (as far as they exist).
bool path_is_within(const std::filesystem::path& path, const std::filesystem::path& folder);

// True when `a` and `b` name the same file or folder: the same device and inode where both exist (so hard
// links too), else the same path with symbolic links followed (as far as they exist).
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b);

// A path a command reads or writes and the option that named it ("--data"); an empty path: not given.
struct PathUse {
  std::string_view option;
  std::filesystem::path path;
  bool written = false;  // an output; else an input the command reads
  bool folder = false;   // a folder (--save-final), else a file: as the messages name it
};

// Before a run: an Error naming both options when a path written and another of `uses` are the same file
// (same_file) or one lies in the other (a folder, path_is_within): the write would destroy an input, or one output
// another. A device or pipe already there (/dev/null) may be named twice: written in place, it keeps nothing to
// destroy. Paths of one option (the files a folder holds) are not compared with each other.
void check_paths_apart(std::span<const PathUse> uses);

// Writes `path` (resolved as above; its folder must exist) with what `write` puts in the stream.
// `flush_to_disk`: a regular file is fsync'ed before its rename, so a crash soon after cannot
// leave the new name on an empty file. An Error "cannot write <what> '<path>': <why>" for any failure
// (the temporary removed, what was at the path left as it was).
void write_output_file(const std::filesystem::path& path, std::string_view what,
                       const std::function<void(std::ostream&)>& write, bool flush_to_disk = false);

}  // namespace fsdplab
