#include "labs/student_tasks.hpp"

namespace fsdplab {

FsdpTasks student_tasks() {
  return {&student_meta_init(),         &student_flat_parameter(), &student_forward(),
          &student_backward(),          &student_sharded_optimizer(), &student_overlap(),
          &student_integration(),       &student_hybrid_shard(),   &student_cpu_offload()};
}

FsdpTasks tasks_for(const ImplChoice& choice) { return select_tasks(choice, student_tasks()); }

}  // namespace fsdplab
