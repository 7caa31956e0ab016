// PLACEHOLDER while the checks are written.
#include "grader/check_catalog.hpp"
namespace fsdplab::grading {
std::vector<Check> backward_checks() { return {}; }
}  // namespace fsdplab::grading
