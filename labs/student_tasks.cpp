#include "labs/student_tasks.hpp"

#include "labs/mutants/mutants.hpp"

namespace fsdplab {

FsdpTasks student_tasks() {
  return {&student_meta_init(),         &student_flat_parameter(), &student_forward(),
          &student_backward(),          &student_sharded_optimizer(), &student_overlap(),
          &student_integration(),       &student_hybrid_shard(),   &student_cpu_offload()};
}

FsdpTasks tasks_for(const ImplChoice& choice) {
  FsdpTasks tasks = reference_tasks();
  const FsdpTasks student = student_tasks();
  for (int n = 1; n <= kTaskCount; ++n) {
    const std::string& impl = choice.of[static_cast<std::size_t>(n - 1)];
    if (impl == "student") tasks.set(n, student.task(n));
    if (impl.starts_with("mutant:")) tasks.set(n, find_mutant(n, std::string_view(impl).substr(7)).impl());
  }
  return tasks;
}

}  // namespace fsdplab
