// mutant_catalog.cpp — every task's mutants in one list (mutants.hpp). A handout replaces this file with
// an empty catalogue (scripts/make_handout.sh).
#include <vector>

#include "labs/mutants/mutants.hpp"

namespace fsdplab {

std::span<const Mutant> mutant_catalog() {
  static const std::vector<Mutant> all = [] {
    std::vector<Mutant> out;
    for (std::span<const Mutant> task :
         {meta_init_mutants(), flat_parameter_mutants(), forward_mutants(), backward_mutants(),
          sharded_optimizer_mutants(), overlap_mutants(), integration_mutants(), hybrid_shard_mutants(),
          cpu_offload_mutants()})
      out.insert(out.end(), task.begin(), task.end());
    return out;
  }();
  return all;
}

}  // namespace fsdplab
