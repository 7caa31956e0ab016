// mutants.hpp — known-wrong implementations of the lab's tasks: the grader's own test.
//
// Each mutant is one mistake a student makes (padding off by one, a missing event wait, a host sync that
// kills prefetch, no division by W ...), written as the reference with that one defect. `fsdplab grade
// --mutants` grades every mutant in its task and prints whether the checks caught it; `--impl
// 3=mutant:missing-wait` runs one anywhere an implementation is chosen (run, gui, bench, grade), so the
// dashboard shows what the defect looks like. A handout (scripts/make_handout.sh) ships none.
#pragma once
#include <span>
#include <string_view>

#include "engine/fsdp/fsdp_task.hpp"

namespace fsdplab {

struct Mutant {
  int task = 0;
  std::string_view name;    // "missing-wait": what --impl 3=mutant:NAME names
  std::string_view defect;  // the mistake in the student's terms, as the grader's diagnostic should name it
  const FsdpTask& (*impl)() = nullptr;
};

// The one instance of mutant class M, what Mutant::impl returns: {3, "missing-wait", "...", instance<MissingWait>}.
template <class M>
const FsdpTask& instance() {
  static const M m;
  return m;
}

// Every mutant, by task.
std::span<const Mutant> mutant_catalog();

// Task `task`'s mutant `name`; an Error listing the task's mutants when there is none of that name.
const Mutant& find_mutant(int task, std::string_view name);

// Each task's mutants (labs/mutants/taskN_*.cpp), which mutant_catalog() puts together.
std::span<const Mutant> meta_init_mutants();
std::span<const Mutant> flat_parameter_mutants();
std::span<const Mutant> forward_mutants();
std::span<const Mutant> backward_mutants();
std::span<const Mutant> sharded_optimizer_mutants();
std::span<const Mutant> overlap_mutants();
std::span<const Mutant> integration_mutants();
std::span<const Mutant> hybrid_shard_mutants();
std::span<const Mutant> cpu_offload_mutants();

}  // namespace fsdplab
