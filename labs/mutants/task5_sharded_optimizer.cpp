// PLACEHOLDER while the mutants are written.
#include "labs/mutants/mutants.hpp"
namespace fsdplab {
std::span<const Mutant> sharded_optimizer_mutants() { return {}; }
}  // namespace fsdplab
