// Each lab solved: the reference copied into its student.cpp (tests/labs/as_student.cmake) and run in the
// student's slot with --impl N=student, in a configuration where the engine calls every method of task N.
// It trains exactly as the reference does, and equal to the single-rank baseline (losses and final
// parameters within 1e-5). The slot really holds the copy: its class is in the generated file.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "fsdp_runs.hpp"
#include "labs/student_tasks.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using namespace testing;
namespace fs = std::filesystem;

struct LabCase {
  int task;
  std::string name;  // the configuration, for the test's name
  int world;
  FsdpOptions options;
};

FsdpOptions with(ShardingStrategy strategy) {
  FsdpOptions options;
  options.strategy = strategy;
  return options;
}

std::vector<LabCase> lab_cases() {
  FsdpOptions hybrid = with(ShardingStrategy::hybrid_shard);
  hybrid.hybrid_group = 2;
  FsdpOptions offload;
  offload.offload = true;
  FsdpOptions prefetch_all;
  prefetch_all.prefetch = parse_prefetch("all");
  FsdpOptions pool;
  pool.buffers = UnshardBuffers::pool;
  return {
      {1, "W3", 3, {}},
      {2, "W3", 3, {}},
      {2, "W4", 4, {}},
      {3, "W2", 2, {}},
      {3, "grad_op", 2, with(ShardingStrategy::shard_grad_op)},
      {4, "W2", 2, {}},
      {5, "W2", 2, {}},
      {5, "zero2", 2, with(ShardingStrategy::zero2)},
      {6, "prefetch_all", 2, prefetch_all},
      {6, "sync", 2, sync_schedule({})},
      {6, "pool", 2, pool},
      {7, "W2", 2, {}},
      {8, "hybrid_W4_S2", 4, hybrid},
      {9, "offload_W2", 2, offload},
  };
}

std::string case_name(const ::testing::TestParamInfo<LabCase>& info) {
  return "task" + std::to_string(info.param.task) + "_" + info.param.name;
}

struct Trained {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> params;
};

Trained train(const RunConfig& run, const FsdpOptions* options, const FsdpTasks* tasks, const fs::path& out) {
  RunConfig r = run;
  r.save_final = out.string();
  Trained t;
  if (!options) {
    r.world = 1;
    t.losses = losses_of(train_baseline(r, PresetCatalog::builtin(), nullptr, nullptr));
  } else {
    FsdpRun fsdp;
    fsdp.run = r;
    fsdp.options = *options;
    fsdp.tasks = *tasks;
    t.losses = losses_of(train_fsdp(fsdp, PresetCatalog::builtin(), nullptr));
  }
  t.params = read_params(out);
  return t;
}

class SolvedLab : public TempDirTest, public ::testing::WithParamInterface<LabCase> {};

TEST_P(SolvedLab, TrainsAsTheReferenceAndEqualToTheBaseline) {
  const LabCase& c = GetParam();
  ImplChoice choice;
  choice.of[static_cast<std::size_t>(c.task - 1)] = "student";
  EXPECT_EQ(parse_impl(std::to_string(c.task) + "=student"), choice);
  const FsdpTasks student = tasks_for(choice);
  // The slot holds the copy, every other slot the reference.
  const std::string where = student.task(c.task).where();
  EXPECT_NE(where.find("_as_student.cpp:"), std::string::npos) << where;
  const FsdpTasks reference = reference_tasks();
  for (int n = 1; n <= kTaskCount; ++n) {
    if (n == c.task) continue;
    EXPECT_EQ(&student.task(n), &reference.task(n)) << "task " << n;
  }
  // The reference's code pasted into a lab is the lab's (what the grader grades); the reference's class is not
  // (what it refuses as a student's: TaskGrade::uses_reference).
  EXPECT_FALSE(student.task(c.task).is_a_reference()) << where;
  EXPECT_TRUE(reference.task(c.task).is_a_reference()) << reference.task(c.task).where();

  const RunConfig run = gpt2_run(c.world, 12, 16, 3);  // 12 rows: 2, 3 and 4 ranks split them evenly
  const Trained baseline = train(run, nullptr, nullptr, path("baseline"));
  const Trained ref = train(run, &c.options, &reference, path("reference"));
  const Trained mine = train(run, &c.options, &student, path("student"));
  // The same code in the student's slot: the same numbers, bit for bit.
  EXPECT_EQ(mine.losses, ref.losses);
  EXPECT_EQ(mine.params, ref.params);
  ASSERT_EQ(mine.losses.size(), baseline.losses.size());
  for (std::size_t s = 0; s < mine.losses.size(); ++s)
    EXPECT_NEAR(mine.losses[s], baseline.losses[s], 1e-5 * std::abs(baseline.losses[s])) << "step " << s;
  ASSERT_EQ(mine.params.size(), baseline.params.size());
  for (const auto& [name, values] : baseline.params) {
    const std::vector<float>& got = mine.params.at(name);
    ASSERT_EQ(got.size(), values.size()) << name;
    float worst = 0;
    for (std::size_t i = 0; i < values.size(); ++i) worst = std::max(worst, std::abs(got[i] - values[i]));
    EXPECT_LE(worst, 1e-5f) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Labs, SolvedLab, ::testing::ValuesIn(lab_cases()), case_name);

TEST(SolvedLabs, EveryTaskHasACase) {
  std::array<bool, kTaskCount> covered{};
  for (const LabCase& c : lab_cases()) covered[static_cast<std::size_t>(c.task - 1)] = true;
  for (int n = 1; n <= kTaskCount; ++n) EXPECT_TRUE(covered[static_cast<std::size_t>(n - 1)]) << "task " << n;
}

}  // namespace
}  // namespace fsdplab
