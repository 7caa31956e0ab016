// Task 7, integration: the wrap policies (fully_sharded_model.hpp, model_factory.hpp) — a unit per
// transformer block, per Linear and Embedding as the assignment's tests wrap, both nested (a Block unit holding its
// Linear units), and the whole model as one unit — all train GPT-2 like the single-rank baseline, in
// SYNC and in ASYNC with every prefetch, and the memory model's chains of nested units match the ledger.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "engine/fsdp/fully_sharded_model.hpp"
#include "engine/fsdp/integration_task.hpp"
#include "engine/fsdp/memory_model.hpp"
#include "engine/runtime/error.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/model_factory.hpp"
#include "fsdp_runs.hpp"

namespace fsdplab {
namespace {

using testing::losses_of;

RunConfig gpt2_tiny(int world, const std::string& wrap) {
  RunConfig run = testing::gpt2_run(world, 6, 16, 20);
  run.wrap = wrap;
  return run;
}

const std::vector<double>& baseline_losses() {
  static const std::vector<double> losses =
      losses_of(train_baseline(gpt2_tiny(1, "block"), PresetCatalog::builtin(), nullptr, nullptr));
  return losses;
}

TEST(FsdpWrap, PoliciesMakeTheUnitsTheyName) {
  struct Expected {
    std::string wrap;
    std::size_t units;
    int nested;  // units whose parent is not the root
  };
  // gpt2 test-tiny: 2 Blocks of 4 Linears (c_attn, attn.c_proj, c_fc, mlp.c_proj); wpe an Embedding.
  for (const Expected& e : {Expected{"block", 3, 0}, Expected{"linear", 10, 0}, Expected{"nested", 12, 8},
                            Expected{"model", 1, 0}}) {
    const BuiltModel built = build_model(gpt2_tiny(1, e.wrap));
    const std::vector<UnitPlan> plans = reference_integration().plan_units(*built.model, built.unit_kinds);
    EXPECT_EQ(plans.size(), e.units) << e.wrap;
    EXPECT_EQ(plans.front().name, "(root)") << e.wrap;
    int nested = 0;
    for (const UnitPlan& p : plans) nested += p.parent > 0 ? 1 : 0;
    EXPECT_EQ(nested, e.nested) << e.wrap;
    for (const UnitPlan& p : plans) {
      // gpt2's wte is tied to the LM head: it stays in the root under every policy.
      for (const Parameter* param : p.params) {
        if (param->name == "transformer.wte.weight") {
          EXPECT_EQ(p.name, "(root)") << e.wrap;
        }
      }
    }
  }
  RunConfig bad = gpt2_tiny(1, "layers");
  try {
    build_model(bad);
    FAIL() << "an unknown wrap policy was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--wrap 'layers'; expected block"), std::string::npos) << e.what();
  }
}

struct Case {
  std::string wrap;
  int world;
  OverlapMode mode;
  std::string prefetch;
};

class FsdpWrapEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(FsdpWrapEquivalence, TrainsLikeTheBaseline) {
  const Case c = GetParam();
  FsdpRun fsdp;
  fsdp.run = gpt2_tiny(c.world, c.wrap);
  fsdp.options.mode = c.mode;
  fsdp.options.prefetch = parse_prefetch(c.prefetch);
  const std::vector<double> losses = losses_of(train_fsdp(fsdp, PresetCatalog::builtin(), nullptr));
  const std::vector<double>& base = baseline_losses();
  ASSERT_EQ(losses.size(), base.size());
  for (std::size_t i = 0; i < base.size(); ++i)
    EXPECT_LE(std::abs(losses[i] - base[i]) / std::abs(base[i]), 1e-5) << "step " << i;
}

INSTANTIATE_TEST_SUITE_P(Policies, FsdpWrapEquivalence,
                         ::testing::Values(Case{"linear", 2, OverlapMode::async, "all"},
                                           Case{"linear", 3, OverlapMode::async, "forward,backward-post"},
                                           Case{"nested", 2, OverlapMode::async, "all"},
                                           Case{"nested", 3, OverlapMode::async, "forward,backward-post"},
                                           Case{"nested", 2, OverlapMode::sync, "none"},
                                           Case{"model", 2, OverlapMode::async, "all"},
                                           Case{"model", 3, OverlapMode::sync, "none"}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string prefetch = info.param.prefetch;
                           for (char& ch : prefetch)
                             if (ch == ',' || ch == '-') ch = '_';
                           return info.param.wrap + "_W" + std::to_string(info.param.world) + "_" +
                                  std::string(overlap_mode_name(info.param.mode)) + "_" + prefetch;
                         });

// SYNC frees every buffer when its task returns, so the ledger's peaks are the formula's: with nested
// units, a Block's buffer and its largest Linear's are gathered at once.
TEST(FsdpWrap, NestedUnitsMemoryMatchesTheFormula) {
  for (const std::string wrap : {"nested", "linear", "model"}) {
    RunConfig run = gpt2_tiny(2, wrap);
    run.preset = "test-small";
    const FsdpRun fsdp = testing::sync_dry_run(run);
    const std::vector<TagBytes> peaks = testing::ledger_peaks(fsdp);
    const BuiltModel built = build_model(fsdp.run);
    const TagBytes formula = fsdp_memory(
        {plan_unit_sizes(*built.model, built.unit_kinds, fsdp.options, 2), fsdp.options, 2, 2, ModelMemory{}});
    for (const TagBytes& rank : peaks) {
      EXPECT_EQ(testing::at(rank, MemTag::param_full), testing::at(formula, MemTag::param_full)) << wrap;
      EXPECT_EQ(testing::at(rank, MemTag::grad_full), testing::at(formula, MemTag::grad_full)) << wrap;
    }
  }
}

TEST(FsdpWrap, TheBufferPoolRefusesNestedUnits) {
  FsdpRun fsdp;
  fsdp.run = gpt2_tiny(2, "nested");
  fsdp.run.steps = 1;
  fsdp.options.buffers = UnshardBuffers::pool;
  const std::string refusal = testing::refusal_of(fsdp);
  EXPECT_NE(refusal.find("is nested in unit 'transformer.h.0'"), std::string::npos) << refusal;
}

// Toy's root owns nothing and is no unit, so its layers' units have no enclosing unit (parent -1): the pool takes
// them (the nesting check once read the unit at index -1 for them), and trains as buffers made per gather do.
TEST(FsdpWrap, TheBufferPoolTakesUnitsWithNoEnclosingUnit) {
  FsdpRun fsdp;
  fsdp.run.model = "toy";
  fsdp.run.world = 2;
  fsdp.run.steps = 2;
  const std::vector<double> alloc = losses_of(train_fsdp(fsdp, PresetCatalog::builtin(), nullptr));
  fsdp.options.buffers = UnshardBuffers::pool;
  const std::vector<double> pooled = losses_of(train_fsdp(fsdp, PresetCatalog::builtin(), nullptr));
  ASSERT_EQ(pooled.size(), 2u);
  EXPECT_EQ(pooled, alloc);
}

// Llama's MLP runs gate_proj, up_proj, down_proj forward and down_proj, gate_proj, up_proj backward: under --wrap
// linear two units of one slot came one after the other, and the backward prefetch (the forward's order reversed)
// gathered a unit into the slot of one still to run, which the race detector stopped ("all_gather
// model.layers.1.self_attn.o_proj.flat_param_full ... wrote it"). Each gather now takes a free slot, moving, declining
// a prefetch, or taking the slot of a prefetch not yet used ([Note: one unit at a time in a pool slot]): every prefetch
// policy trains as buffers made per gather do.
TEST(FsdpWrap, TheBufferPoolTakesUnitsWhoseBackwardIsNotTheForwardReversed) {
  FsdpRun fsdp;
  fsdp.run.model = "llama";
  fsdp.run.world = 2;
  fsdp.run.batch = 2;
  fsdp.run.steps = 3;
  fsdp.run.wrap = "linear";
  for (const std::string prefetch : {"backward-pre,next-step", "backward-post", "all"}) {
    fsdp.options.prefetch = parse_prefetch(prefetch);
    fsdp.options.buffers = UnshardBuffers::alloc;
    const std::vector<double> alloc = losses_of(train_fsdp(fsdp, PresetCatalog::builtin(), nullptr));
    fsdp.options.buffers = UnshardBuffers::pool;
    std::vector<double> pooled;
    EXPECT_NO_THROW(pooled = losses_of(train_fsdp(fsdp, PresetCatalog::builtin(), nullptr))) << prefetch;
    ASSERT_EQ(pooled.size(), 3u) << prefetch;
    EXPECT_EQ(pooled, alloc) << prefetch;
  }
}

// A plan whose unit is its own parent (lab 07's empty root removed without renumbering: toy's first layer keeps the
// root's index 0) trained as if nothing were wrong; the plans are in pre-order, so a parent comes before its unit.
TEST(FsdpWrap, AUnitWhoseParentDoesNotComeBeforeItIsRefused) {
  class OwnParent final : public IntegrationTask {
   public:
    std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const override {
      std::vector<UnitPlan> plans = reference_integration().plan_units(model, unit_kinds);
      plans.front().parent = 0;
      return plans;
    }
  };
  const OwnParent own_parent;
  FsdpRun fsdp;
  fsdp.run.model = "toy";
  fsdp.run.world = 2;
  fsdp.run.steps = 1;
  fsdp.tasks.integration = &own_parent;
  const std::string refusal = testing::refusal_of(fsdp);
  EXPECT_NE(refusal.find("FSDP: unit 0 'fc1' has parent 0; expected -1 (no enclosing unit) or the index of an "
                         "earlier unit"),
            std::string::npos)
      << refusal;
}

}  // namespace
}  // namespace fsdplab
