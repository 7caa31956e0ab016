// FSDP units and run errors: plan_units over GPT-2 (a root unit with the embeddings and ln_f, one
// unit per Block), over the toy model (no root unit when the root keeps nothing), and its errors (a
// wrapped module with no parameters, a tied parameter used outside its owner's unit, a model with
// no parameters); validate_fsdp_options and the strategies' group sizes; and train_fsdp's errors,
// raised before any rank starts (--world 0 or above the limit, a batch not split evenly, a
// --load-init folder of another model).
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>

#include "engine/comm/local_comm.hpp"
#include "engine/fsdp/fully_sharded_model.hpp"
#include "engine/nn/gpt2_model.hpp"
#include "engine/nn/toy_model.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "fsdp_testing.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using testing::contains;
using testing::error_of;
using testing::make_options;

std::vector<std::string> names_of(const std::vector<Parameter*>& params) {
  std::vector<std::string> names;
  for (const Parameter* p : params) names.push_back(p->name);
  return names;
}

std::vector<UnitPlan> plan(Module& model, std::vector<std::string> kinds) {
  return reference_integration().plan_units(model, kinds);
}

// ---- a tiny tree with a tied parameter ------------------------------------------------------------

// Owns a bias, computes with another module's parameter too.
class User final : public Module {
 public:
  User(std::string name, Parameter& tied) : Module(std::move(name)) {
    register_parameter("bias", {2}, ParamInit::constant(0));
    use_parameter(tied);
  }
  std::string_view kind() const override { return "User"; }
};

// Owns a weight; with `nested_user`, has a child that uses it.
class Holder final : public Module {
 public:
  Holder(std::string name, bool nested_user) : Module(std::move(name)) {
    weight_ = &register_parameter("weight", {4}, ParamInit::constant(1));
    if (nested_user) register_module<User>("user", *weight_);
  }
  std::string_view kind() const override { return "Holder"; }
  Parameter& weight() { return *weight_; }

 private:
  Parameter* weight_ = nullptr;
};

// Root -> a (Holder) [-> a.user (User)], and without nesting a sibling b (User) of a using a.weight.
class TiedModel final : public Model {
 public:
  explicit TiedModel(bool nested_user) {
    Holder& holder = register_module<Holder>("a", nested_user);
    if (!nested_user) register_module<User>("b", holder.weight());
  }
  std::string_view kind() const override { return "TiedModel"; }
  Tensor forward(RunContext&, const Batch&) override { fail("TiedModel is never run"); }
  void backward(RunContext&) override {}
};

class EmptyModel final : public Model {
 public:
  std::string_view kind() const override { return "EmptyModel"; }
  Tensor forward(RunContext&, const Batch&) override { fail("EmptyModel is never run"); }
  void backward(RunContext&) override {}
};

// ---- plan_units -----------------------------------------------------------------------------------

TEST(FsdpUnits, Gpt2TinyHasARootUnitAndOneUnitPerBlock) {
  Gpt2Model model(gpt2_preset("test-tiny"));  // 2 layers
  const std::vector<UnitPlan> plans = plan(model, {"Block"});
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_EQ(plans[0].name, "(root)");
  EXPECT_EQ(plans[0].module, &model);
  EXPECT_EQ(plans[0].parent, -1);
  EXPECT_EQ(names_of(plans[0].params), (std::vector<std::string>{"transformer.wte.weight", "transformer.wpe.weight",
                                                                  "transformer.ln_f.weight", "transformer.ln_f.bias"}));
  for (int i = 0; i < 2; ++i) {
    const UnitPlan& block = plans[static_cast<std::size_t>(i + 1)];
    const std::string name = "transformer.h." + std::to_string(i);
    EXPECT_EQ(block.name, name);
    EXPECT_EQ(block.module, &model.module(name));
    EXPECT_EQ(block.module->kind(), "Block");
    EXPECT_EQ(block.parent, 0);
    // ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj: a weight and a bias each.
    EXPECT_EQ(names_of(block.params), (std::vector<std::string>{
                                          name + ".ln_1.weight", name + ".ln_1.bias",
                                          name + ".attn.c_attn.weight", name + ".attn.c_attn.bias",
                                          name + ".attn.c_proj.weight", name + ".attn.c_proj.bias",
                                          name + ".ln_2.weight", name + ".ln_2.bias",
                                          name + ".mlp.c_fc.weight", name + ".mlp.c_fc.bias",
                                          name + ".mlp.c_proj.weight", name + ".mlp.c_proj.bias"}));
  }
  // Every parameter is in exactly one unit (the tied wte once, in the root with the LM head using it).
  std::size_t planned = 0;
  for (const UnitPlan& p : plans) planned += p.params.size();
  EXPECT_EQ(planned, model.parameters().size());
}

TEST(FsdpUnits, ToyWithLayerUnitsHasNoRootUnit) {
  ToyModel model;
  const std::vector<UnitPlan> plans = plan(model, {"Linear", "LayerNorm"});
  ASSERT_EQ(plans.size(), 3u);  // the root keeps no parameter: no "(root)" unit
  EXPECT_EQ(plans[0].name, "fc1");
  EXPECT_EQ(plans[1].name, "ln");
  EXPECT_EQ(plans[2].name, "fc2");
  for (const UnitPlan& p : plans) EXPECT_EQ(p.parent, -1) << p.name;
  EXPECT_EQ(names_of(plans[0].params), (std::vector<std::string>{"fc1.weight"}));
  EXPECT_EQ(names_of(plans[1].params), (std::vector<std::string>{"ln.weight", "ln.bias"}));
  EXPECT_EQ(names_of(plans[2].params), (std::vector<std::string>{"fc2.weight"}));
}

TEST(FsdpUnits, NoWrappedKindsIsOneRootUnit) {
  ToyModel model;
  const std::vector<UnitPlan> plans = plan(model, {});
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].name, "(root)");
  EXPECT_EQ(names_of(plans[0].params),
            (std::vector<std::string>{"fc1.weight", "ln.weight", "ln.bias", "fc2.weight"}));
}

TEST(FsdpUnits, NestedUnitsKeepTheirParent) {
  // a.user is a unit inside unit a; the root keeps nothing, so a is unit 0 and a.user's parent.
  TiedModel model(true);
  const std::vector<UnitPlan> plans = plan(model, {"Holder", "User"});
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[0].name, "a");
  EXPECT_EQ(plans[0].parent, -1);
  EXPECT_EQ(names_of(plans[0].params), (std::vector<std::string>{"a.weight"}));
  EXPECT_EQ(plans[1].name, "a.user");
  EXPECT_EQ(plans[1].parent, 0);
  EXPECT_EQ(names_of(plans[1].params), (std::vector<std::string>{"a.user.bias"}));
}

TEST(FsdpUnits, WrappedModuleWithNoParametersIsAnError) {
  Gpt2Model model(gpt2_preset("test-tiny"));
  // transformer.h is a container: with its Blocks units of their own, nothing is left for it.
  const std::string list = error_of([&] { plan(model, {"ModuleList", "Block"}); });
  EXPECT_TRUE(contains(list, "FSDP unit 'transformer.h' (ModuleList) has no parameters")) << list;
  // The LM head only uses the tied wte.
  const std::string head = error_of([&] { plan(model, {"LMHead"}); });
  EXPECT_TRUE(contains(head, "'lm_head' (LMHead) has no parameters")) << head;
}

TEST(FsdpUnits, TiedParameterUsedOutsideItsOwnersUnitIsAnError) {
  TiedModel model(false);
  // b uses a.weight from a unit of its own, beside a's.
  std::string message = error_of([&] { plan(model, {"Holder", "User"}); });
  EXPECT_TRUE(
      contains(message, "tied parameter 'a.weight' belongs to FSDP unit 'a' but module 'b' uses it from unit 'b'"))
      << message;
  // From the root's unit: the root's backward runs after a's, whose full gradient is gone by then.
  message = error_of([&] { plan(model, {"Holder"}); });
  EXPECT_TRUE(contains(message, "tied parameter 'a.weight'")) << message;
  EXPECT_TRUE(contains(message, "from unit '(root)'")) << message;
  // All in one unit is fine.
  EXPECT_EQ(plan(model, {}).size(), 1u);
  // GPT-2 with wte a unit of its own: the LM head, in the root, uses it from outside.
  Gpt2Model gpt2(gpt2_preset("test-tiny"));
  message = error_of([&] { plan(gpt2, {"Embedding"}); });
  EXPECT_TRUE(contains(message, "tied parameter 'transformer.wte.weight'")) << message;
  EXPECT_TRUE(contains(message, "module 'lm_head'")) << message;
}

TEST(FsdpUnits, ModelWithNoParametersIsAnError) {
  EmptyModel model;
  EXPECT_TRUE(contains(error_of([&] { plan(model, {}); }), "the model has no parameters to shard"));
}

// ---- options ---------------------------------------------------------------------------------------

std::string validation_error(const FsdpOptions& options, int world) {
  return error_of([&] { validate_fsdp_options(options, world); });
}

TEST(FsdpUnits, ValidateOptionsErrors) {
  EXPECT_TRUE(contains(validation_error(make_options(ShardingStrategy::full_shard), 0),
                       "--world 0; expected at least 1 rank"));
  const std::string not_dividing = validation_error(make_options(ShardingStrategy::hybrid_shard, 3), 4);
  EXPECT_TRUE(contains(not_dividing, "--hybrid-group 3 does not divide --world 4")) << not_dividing;
  const std::string no_group = validation_error(make_options(ShardingStrategy::hybrid_shard), 4);
  EXPECT_TRUE(contains(no_group, "--strategy hybrid needs --hybrid-group S")) << no_group;
  const std::string group_without_hybrid = validation_error(make_options(ShardingStrategy::full_shard, 2), 4);
  EXPECT_TRUE(contains(group_without_hybrid, "--hybrid-group 2 is for --strategy hybrid")) << group_without_hybrid;
  EXPECT_TRUE(contains(group_without_hybrid, "strategy is full")) << group_without_hybrid;
  const std::string bf16_reduce =
      validation_error(make_options(ShardingStrategy::full_shard, 0, DType::f32, DType::bf16), 2);
  EXPECT_TRUE(contains(bf16_reduce, "--reduce-dtype bf16 with --precision f32")) << bf16_reduce;
  EXPECT_TRUE(contains(validation_error(make_options(ShardingStrategy::full_shard, 0, DType::i32), 2),
                       "--precision i32; expected f32 or bf16"));
  FsdpOptions unaligned = make_options(ShardingStrategy::full_shard);
  unaligned.align = 0;
  EXPECT_TRUE(contains(validation_error(unaligned, 2), "alignment 0"));
  // What runs.
  EXPECT_NO_THROW(validate_fsdp_options(make_options(ShardingStrategy::hybrid_shard, 2), 4));
  EXPECT_NO_THROW(validate_fsdp_options(make_options(ShardingStrategy::hybrid_shard, 4), 4));
  EXPECT_NO_THROW(validate_fsdp_options(make_options(ShardingStrategy::full_shard, 0, DType::bf16, DType::bf16), 3));
  EXPECT_NO_THROW(validate_fsdp_options(make_options(ShardingStrategy::full_shard, 0, DType::bf16, DType::f32), 3));
}

TEST(FsdpUnits, StrategiesAndTheirGroups) {
  for (ShardingStrategy s : {ShardingStrategy::full_shard, ShardingStrategy::shard_grad_op,
                             ShardingStrategy::hybrid_shard, ShardingStrategy::no_shard, ShardingStrategy::zero1,
                             ShardingStrategy::zero2})
    EXPECT_EQ(parse_strategy(strategy_name(s)), s) << strategy_name(s);
  EXPECT_TRUE(contains(error_of([] { parse_strategy("ddp"); }), "unknown strategy 'ddp'"));
  EXPECT_EQ(shard_group_size(make_options(ShardingStrategy::full_shard), 8), 8);
  EXPECT_EQ(shard_group_size(make_options(ShardingStrategy::shard_grad_op), 8), 8);
  EXPECT_EQ(shard_group_size(make_options(ShardingStrategy::hybrid_shard, 2), 8), 2);
  EXPECT_EQ(shard_group_size(make_options(ShardingStrategy::no_shard), 8), 1);
  EXPECT_EQ(shard_group_size(make_options(ShardingStrategy::zero1), 8), 8);
  EXPECT_EQ(shard_group_size(make_options(ShardingStrategy::zero2), 8), 8);
  EXPECT_EQ(describe(make_options(ShardingStrategy::hybrid_shard, 2, DType::bf16), 4),
            "hybrid W=4 (S=2), bf16 params, f32 reduce, sync");
}

// ---- train_fsdp's errors ------------------------------------------------------------------------------

class FsdpTrainErrors : public testing::TempDirTest {
 protected:
  // train_fsdp's Error for `fsdp`; no rank may have started (none finishes, and the message is not a
  // rank's failure).
  std::string train_error(FsdpRun fsdp) {
    std::atomic<int> ranks_done = 0;
    fsdp.on_rank_done = [&](int, Device&) { ++ranks_done; };
    const std::string message = error_of([&] { train_fsdp(fsdp, PresetCatalog::builtin(), {}); });
    EXPECT_EQ(ranks_done.load(), 0) << message;
    EXPECT_FALSE(contains(message, "failed:")) << message;
    return message;
  }
  static FsdpRun run_of(const std::string& model, int world, std::int64_t batch) {
    FsdpRun fsdp;
    fsdp.run.model = model;
    fsdp.run.world = world;
    fsdp.run.batch = batch;
    fsdp.run.steps = 1;
    return fsdp;
  }
};

TEST_F(FsdpTrainErrors, WorldOutOfRange) {
  std::string message = train_error(run_of("toy", 0, 8));
  EXPECT_TRUE(contains(message, "--world 0; expected >= 1")) << message;
  message = train_error(run_of("toy", kMaxLocalRanks + 1, 2 * (kMaxLocalRanks + 1)));
  EXPECT_TRUE(contains(message, "--world 1025; this host runs 1 to 1024 ranks")) << message;
}

TEST_F(FsdpTrainErrors, BatchNotAMultipleOfTheWorld) {
  const std::string message = train_error(run_of("toy", 3, 8));
  EXPECT_TRUE(contains(message, "--batch 8 is not a multiple of --world 3")) << message;
}

TEST_F(FsdpTrainErrors, OptionsAreCheckedAgainstTheWorld) {
  FsdpRun fsdp = run_of("toy", 4, 8);
  fsdp.options.strategy = ShardingStrategy::hybrid_shard;
  fsdp.options.hybrid_group = 3;
  const std::string message = train_error(fsdp);
  EXPECT_TRUE(contains(message, "does not divide --world 4")) << message;
}

TEST_F(FsdpTrainErrors, LoadInitFromAnotherModelNamesBothModels) {
  // A toy run's --save-init folder, loaded into a gpt2 run: the two kinds are named, not the first key they differ in
  // ("config 'model_type' is missing").
  FsdpRun save = run_of("toy", 2, 4);
  save.run.steps = 0;
  save.run.save_init = path("toy_init").string();
  train_fsdp(save, PresetCatalog::builtin(), {});
  ASSERT_TRUE(std::filesystem::exists(path("toy_init") / "config.json"));

  FsdpRun load = run_of("gpt2", 2, 4);
  load.run.seq = 8;
  load.run.load_init = path("toy_init").string();
  const std::string message = train_error(load);
  EXPECT_TRUE(contains(message, "toy_init' holds a toy model; this run's model is gpt2 (--model)")) << message;
}

// A folder of the same shapes whose config says the model computes otherwise (another norm epsilon, rotary base or
// activation) is refused naming the key; a key left out means Hugging Face's default, which is this model's for
// gpt2's activation and not for llama's rms_norm_eps (1e-6 against 1e-5).
TEST_F(FsdpTrainErrors, LoadInitOfAModelThatComputesOtherwiseNamesTheSetting) {
  const auto saved_init = [&](const std::string& model) {
    FsdpRun save = run_of(model, 2, 4);
    save.run.steps = 0;
    save.run.save_init = path(model + "_init").string();
    train_fsdp(save, PresetCatalog::builtin(), {});
    return path(model + "_init");
  };
  const auto with_config = [&](const std::filesystem::path& dir, const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json config = nlohmann::json::parse(slurp(dir / "config.json"));
    edit(config);
    spit(dir / "config.json", config.dump(2));
  };
  const auto load_error = [&](const std::string& model, const std::filesystem::path& dir) {
    FsdpRun load = run_of(model, 2, 4);
    load.run.load_init = dir.string();
    return train_error(load);
  };

  const std::filesystem::path gpt2 = saved_init("gpt2");
  with_config(gpt2, [](nlohmann::json& c) { c["layer_norm_epsilon"] = 1e-6; });
  std::string message = load_error("gpt2", gpt2);
  EXPECT_TRUE(contains(message,
                       "holds a model that computes otherwise: config 'layer_norm_epsilon' is 1e-06, this "
                       "run's model has 1e-05"))
      << message;
  with_config(gpt2, [](nlohmann::json& c) {
    c["layer_norm_epsilon"] = 1e-5;
    c.erase("activation_function");  // Hugging Face's default, gelu_new, is this model's
  });
  FsdpRun load = run_of("gpt2", 2, 4);
  load.run.load_init = gpt2.string();
  EXPECT_EQ(train_fsdp(load, PresetCatalog::builtin(), {}).size(), 1u);

  const std::filesystem::path llama = saved_init("llama");
  with_config(llama, [](nlohmann::json& c) { c["rope_theta"] = 500000.0; });
  message = load_error("llama", llama);
  EXPECT_TRUE(contains(message, "config 'rope_theta' is 500000")) << message;
  with_config(llama, [](nlohmann::json& c) {
    c["rope_theta"] = 10000.0;
    c.erase("rms_norm_eps");
  });
  message = load_error("llama", llama);
  EXPECT_TRUE(contains(message,
                       "config 'rms_norm_eps' is missing, which means 1e-06 (Hugging Face's default), this "
                       "run's model has 1e-05"))
      << message;
}

}  // namespace
}  // namespace fsdplab
