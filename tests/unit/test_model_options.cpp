// Options a model would ignore are refused by build_model (model_factory.hpp), the ones it reads reach its
// config, and a seed is checked as text, before a parser can wrap "-5" to 2^64-5.
#include <gtest/gtest.h>

#include "engine/nn/gpt2_model.hpp"
#include "engine/nn/llama_model.hpp"
#include "engine/train/model_factory.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using testing::contains;
using testing::error_of;

TEST(ModelOptions, PresetForAModelWithoutNamedSizesIsRefused) {
  RunConfig run;
  run.model = "toy";
  run.preset = "gpt2-xl";
  const std::string toy = error_of([&] { build_model(run); });
  EXPECT_TRUE(contains(toy, "--preset 'gpt2-xl' for --model toy: only gpt2 and llama have named sizes")) << toy;
  run.model = "mlp";
  const std::string mlp = error_of([&] { build_model(run); });
  EXPECT_TRUE(contains(mlp, "mlp's size is its width and depth")) << mlp;
  run.model = "gpt2";
  run.preset = "test-tiny";
  EXPECT_NO_THROW(build_model(run));
}

TEST(ModelOptions, MlpWidthForAnotherModelIsRefused) {
  RunConfig run;
  run.model = "gpt2";
  run.mlp_width = 512;
  const std::string error = error_of([&] { build_model(run); });
  EXPECT_TRUE(contains(error, "--mlp-width 512 for --model gpt2: only --model mlp reads it; pick a size with --preset"))
      << error;  // --mlp-depth, not given, is not named
  run.mlp_depth = 8;
  EXPECT_TRUE(contains(error_of([&] { build_model(run); }),
                       "--mlp-width 512 and --mlp-depth 8 for --model gpt2: only --model mlp reads them"));
  run.model = "mlp";
  EXPECT_NO_THROW(build_model(run));
}

TEST(ModelOptions, AttentionIsChosenForTheModelsThatHaveIt) {
  RunConfig run;
  run.model = "toy";
  run.attention = "flash";
  const std::string toy = error_of([&] { build_model(run); });
  EXPECT_TRUE(contains(toy, "--attention flash for --model toy: only gpt2 and llama have attention")) << toy;
  run.model = "gpt2";
  run.attention = "fast";
  const std::string bad = error_of([&] { build_model(run); });
  EXPECT_TRUE(contains(bad, "--attention 'fast': expected auto (flash in bf16, exact in f32), exact or flash")) << bad;
  for (const char* kind : {"auto", "exact", "flash"}) {
    run.attention = kind;
    const BuiltModel built = build_model(run);
    EXPECT_EQ(attention_kind_name(dynamic_cast<const Gpt2Model&>(*built.model).config().attention), kind);
  }
  run.model = "llama";
  run.attention = "flash";
  const BuiltModel llama = build_model(run);
  EXPECT_EQ(dynamic_cast<const LlamaModel&>(*llama.model).config().attention, AttentionKind::flash);
}

TEST(ModelOptions, SeedTextMustBeAnUnsigned64BitNumber) {
  EXPECT_EQ(seed_text_problem("0"), "");
  EXPECT_EQ(seed_text_problem("18446744073709551615"), "");
  for (const char* bad : {"-5", "18446744073709551616", "", "12x", "1e3"})
    EXPECT_TRUE(contains(seed_text_problem(bad), "expected a whole number from 0 to 18446744073709551615")) << bad;
}

}  // namespace
}  // namespace fsdplab
