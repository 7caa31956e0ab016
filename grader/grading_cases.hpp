// grading_cases.hpp — a course's own held-out cases, as data files (`fsdplab grade --cases DIR`).
//
// Each DIR/*.json is one case: a training the graded task must bring to the single-rank baseline's losses
// and final parameters, in a configuration the students never saw. Added without recompiling, so a
// course keeps hidden tests (scripts/make_handout.sh leaves grader/cases/held-out/ out of a handout):
//
//   { "name": "W5 grad_op", "task": 3, "points": 2,
//     "model": "gpt2", "preset": "test-tiny", "world": 5, "batch": 10, "seq": 16, "steps": 3, "seed": 7,
//     "strategy": "grad_op", "tolerance": 1e-5 }
//
// Required: name, task. Optional, with their defaults: points 2; model gpt2 (or llama, toy, mlp), preset test-tiny
// (gpt2 and llama only), mlp_width 64 and mlp_depth 4 (mlp only), world 2,
// batch 12, seq 16, steps 3, seed (the grader's --seed), optimizer adamw, lr 1e-3; strategy full,
// hybrid_group, mode async, prefetch backward-pre,next-step (under mode sync: none), buffers alloc, max_inflight 2,
// offload false; tolerance 1e-5. A case of task 8 must run replica groups (strategy hybrid, 1 < hybrid_group <
// world), one of task 9 offload: elsewhere the task never runs, and the untouched skeleton would earn its points. Any
// other key is refused by name (a typo must not silently test something else), and so is what no run could train (what
// `fsdplab run` would refuse, world above 16, steps 0 or above 100, seq 0), a fraction for a whole-number key, an empty
// name and a name another case has: the reference must earn every case's points (one that cannot train it at all
// blames the case when it runs: CaseNotTrainable, graded_run.hpp).
#pragma once
#include <filesystem>
#include <vector>

#include "grader/grade_check.hpp"

namespace fsdplab::grading {

// The checks of every *.json in `dir`, in file-name order; an Error naming the file and the key for
// anything wrong (and for a folder with no case at all).
std::vector<Check> load_cases(const std::filesystem::path& dir);

}  // namespace fsdplab::grading
