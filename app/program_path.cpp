#include "app/program_path.hpp"

#include <filesystem>
#include <optional>
#include <system_error>

#include "app/shell_quote.hpp"
#include "engine/runtime/output_file.hpp"
#include "grader/grade_check.hpp"

namespace fsdplab::app {

namespace {

// This fsdplab's path from `folder` where it lies below it, else (or without a folder) its absolute path; `fallback`
// where the process cannot read its own path.
std::string program_below(const std::optional<std::filesystem::path>& folder, const std::string& fallback) {
  std::error_code error;
  const std::filesystem::path binary = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error || binary.empty()) return fallback;
  if (folder && path_is_within(binary, *folder))
    return shell_quote(binary.lexically_relative(std::filesystem::weakly_canonical(*folder, error)).string());
  return shell_quote(binary.string());
}

}  // namespace

std::string program_from_source_root() { return program_below(FSDPLAB_SOURCE_DIR, grading::kShowProgram); }

std::string program_from_here() {
  std::error_code error;
  const std::filesystem::path here = std::filesystem::current_path(error);
  return program_below(error ? std::nullopt : std::optional(here), "fsdplab");
}

}  // namespace fsdplab::app
