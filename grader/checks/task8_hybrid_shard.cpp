// PLACEHOLDER while the checks are written.
#include "grader/check_catalog.hpp"
namespace fsdplab::grading {
std::vector<Check> hybrid_shard_checks() { return {}; }
}  // namespace fsdplab::grading
