// check_catalog.hpp — the built-in checks of each task (grader/checks/taskN_*.cpp), public: a student
// reads them to see what is graded, and `fsdplab grade` in a handout runs them. A course adds held-out
// cases as data (grading_cases.hpp).
#pragma once
#include <vector>

#include "grader/grade_check.hpp"

namespace fsdplab::grading {

std::vector<Check> meta_init_checks();          // checks/task1_meta_init.cpp
std::vector<Check> flat_parameter_checks();     // checks/task2_flat_parameter.cpp
std::vector<Check> forward_checks();            // checks/task3_forward.cpp
std::vector<Check> backward_checks();           // checks/task4_backward.cpp
std::vector<Check> sharded_optimizer_checks();  // checks/task5_sharded_optimizer.cpp
std::vector<Check> overlap_checks();            // checks/task6_overlap.cpp
std::vector<Check> integration_checks();        // checks/task7_integration.cpp
std::vector<Check> hybrid_shard_checks();       // checks/task8_hybrid_shard.cpp
std::vector<Check> cpu_offload_checks();        // checks/task9_cpu_offload.cpp

// Task `task`'s built-in checks (1..9); an Error for another number.
std::vector<Check> task_checks(int task);

}  // namespace fsdplab::grading
