// PLACEHOLDER while the checks are written.
#include "grader/check_catalog.hpp"
namespace fsdplab::grading {
std::vector<Check> cpu_offload_checks() { return {}; }
}  // namespace fsdplab::grading
