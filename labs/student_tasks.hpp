// student_tasks.hpp — the student's implementations, one per lab folder (labs/NN-name/student.cpp),
// which `--impl` puts in place of the reference's (fsdp_tasks.hpp: parse_impl).
#pragma once
#include <string_view>

#include "engine/fsdp/fsdp_tasks.hpp"

namespace fsdplab {

const MetaInitTask& student_meta_init();                  // labs/01-meta-init/student.cpp
const FlatParameterTask& student_flat_parameter();        // labs/02-flat-parameter/student.cpp
const ForwardTask& student_forward();                     // labs/03-forward/student.cpp
const BackwardTask& student_backward();                   // labs/04-backward/student.cpp
const ShardedOptimizerTask& student_sharded_optimizer();  // labs/05-sharded-optimizer/student.cpp
const OverlapTask& student_overlap();                     // labs/06-prefetch-overlap/student.cpp
const IntegrationTask& student_integration();             // labs/07-integration/student.cpp
const HybridShardTask& student_hybrid_shard();            // labs/08-hybrid-shard/student.cpp
const CpuOffloadTask& student_cpu_offload();              // labs/09-cpu-offload/student.cpp

// All nine.
FsdpTasks student_tasks();

// The SHA-256 of task `task`'s student.cpp (1-9) as this build compiled it, in hex as `sha256sum` prints it; empty
// for another task. Written at build time (labs/student_file_hashes.cmake): a grade records what it graded.
std::string_view student_file_sha256(int task);

// The tasks a run uses under --impl `choice`: the reference's, with the student's or a mutant (labs/mutants/)
// where it says so; an Error for a mutant this build does not have.
FsdpTasks tasks_for(const ImplChoice& choice);

}  // namespace fsdplab
