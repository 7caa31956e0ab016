// find_mutant.cpp — a mutant by task and name, for --impl N=mutant:NAME.
#include <string>

#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/runtime/error.hpp"
#include "labs/mutants/mutants.hpp"

namespace fsdplab {

const Mutant& find_mutant(int task, std::string_view name) {
  std::string known;
  for (const Mutant& m : mutant_catalog()) {
    if (m.task != task) continue;
    if (m.name == name) return m;
    known += (known.empty() ? "" : ", ") + std::string(m.name);
  }
  if (mutant_catalog().empty())
    fail("--impl ", task, "=mutant:", name,
         ": this build has no mutants (a handout leaves them to the course's grader)");
  fail("--impl ", task, "=mutant:", name, ": task ", task, " (", task_info(task).interface, ") has no mutant '", name,
       "'; expected one of: ", known.empty() ? std::string("(none)") : known);
}

}  // namespace fsdplab
