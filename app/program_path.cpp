#include "app/program_path.hpp"

#include <filesystem>
#include <system_error>

#include "app/report/markdown_table.hpp"
#include "grader/grade_check.hpp"

namespace fsdplab::app {

std::string program_from_source_root() {
  std::error_code error;
  const std::filesystem::path binary = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error || binary.empty()) return grading::kShowProgram;
  const std::filesystem::path root = std::filesystem::weakly_canonical(FSDPLAB_SOURCE_DIR, error);
  const std::filesystem::path relative = binary.lexically_relative(root);
  if (!error && !relative.empty() && *relative.begin() != "..") return shell_quote(relative.string());
  return shell_quote(binary.string());
}

}  // namespace fsdplab::app
