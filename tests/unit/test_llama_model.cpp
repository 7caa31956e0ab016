// LlamaModel: Hugging Face's names, shapes and order; the 7b and 70b parameter counts on meta tensors;
// config and preset errors; on test-tiny (4 query heads on 2 key/value heads), on each device (sim, and
// cuda where there is a GPU), equality with a PyTorch Llama, a full-model gradient check against finite
// differences, training, hook order, bf16, the activation memory against the analytic model
// (memory_model.hpp), and FSDP at W = 2 and 3 training exactly like the single-rank baseline; the
// backward's zeroed buffers on sim; and the activation memory of dry runs, 7b's among them.
#include "engine/nn/llama_model.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include "engine/fsdp/memory_model.hpp"
#include "engine/nn/safetensors.hpp"
#include "engine/tensor/elementwise.hpp"
#include "engine/tensor/optimizer_ops.hpp"
#include "engine/trace/trace_recorder.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/model_factory.hpp"
#include "activation_peak.hpp"
#include "model_testing.hpp"

namespace fsdplab {
namespace {

using namespace testing;

constexpr std::int64_t kVocab = 64;

std::int64_t count(Model& model) {
  std::int64_t n = 0;
  for (const Parameter* p : model.parameters()) n += p->numel();
  return n;
}

// ---- structure -----------------------------------------------------------------------------------

TEST(LlamaModelStructure, TestTinyHasHuggingFacesNamesShapesAndOrder) {
  LlamaModel model(llama_preset("test-tiny"));
  std::vector<std::pair<std::string, Shape>> expected = {{"model.embed_tokens.weight", {64, 32}}};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const auto& [name, shape] : std::vector<std::pair<std::string, Shape>>{
             {"self_attn.q_proj.weight", {32, 32}},  // 4 heads of 8
             {"self_attn.k_proj.weight", {16, 32}},  // 2 key/value heads of 8
             {"self_attn.v_proj.weight", {16, 32}},
             {"self_attn.o_proj.weight", {32, 32}},
             {"mlp.gate_proj.weight", {64, 32}},
             {"mlp.up_proj.weight", {64, 32}},
             {"mlp.down_proj.weight", {32, 64}},
             {"input_layernorm.weight", {32}},
             {"post_attention_layernorm.weight", {32}},
         })
      expected.push_back({p + name, shape});
  }
  expected.push_back({"model.norm.weight", {32}});
  expected.push_back({"lm_head.weight", {64, 32}});
  const std::vector<Parameter*> params = model.parameters();
  ASSERT_EQ(params.size(), expected.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i]->name, expected[i].first) << "parameter " << i;
    EXPECT_EQ(params[i]->shape, expected[i].second) << params[i]->name;
    EXPECT_FALSE(params[i]->value.defined()) << params[i]->name << ": built as shapes only";
  }
  EXPECT_EQ(model.kind(), "LlamaForCausalLM");
  EXPECT_EQ(model.module("model").kind(), "LlamaModel");
  EXPECT_EQ(model.module("model.layers.1").kind(), "LlamaDecoderLayer");
  EXPECT_EQ(model.module("model.layers.1.self_attn").kind(), "LlamaAttention");
  EXPECT_EQ(model.module("model.layers.1.mlp").kind(), "LlamaMLP");
  EXPECT_EQ(model.module("model.norm").kind(), "LlamaRMSNorm");
  EXPECT_TRUE(model.module("lm_head").shared_parameters().empty()) << "Llama 2's head is not tied";
  EXPECT_EQ(count(model), llama_parameter_count(model.config()));
}

// Counted on meta models (shapes only: nothing is allocated): Llama-2-7B has 6,738,415,616 parameters
// and Llama-2-70B 68,976,648,192, Hugging Face's sum(p.numel() for p in model.parameters()). 70B's
// decoder layer is 855,654,400 of them: the lecture's "0.9B".
TEST(LlamaModelStructure, SevenAndSeventyBillionCountAsMetasReleases) {
  LlamaModel seven(llama_preset("7b"));
  EXPECT_EQ(count(seven), 6'738'415'616LL);
  EXPECT_EQ(llama_parameter_count(seven.config()), 6'738'415'616LL);
  LlamaModel seventy(llama_preset("70b"));
  EXPECT_EQ(count(seventy), 68'976'648'192LL);
  EXPECT_EQ(llama_parameter_count(seventy.config()), 68'976'648'192LL);
  std::int64_t layer = 0;
  for (const Parameter* p : seventy.module("model.layers.0").parameters()) layer += p->numel();
  EXPECT_EQ(layer, 855'654'400LL);
  EXPECT_EQ(seventy.parameter("model.layers.79.self_attn.k_proj.weight").shape, (Shape{1024, 8192}));
}

TEST(LlamaModelStructure, InitialisesAsHuggingFace) {
  LlamaModel model(llama_preset("test-tiny"));
  using K = ParamInit::Kind;
  for (const Parameter* p : model.parameters()) {
    const bool norm = p->name.ends_with("layernorm.weight") || p->name == "model.norm.weight";
    const ParamInit& init = p->init;
    if (norm) {
      EXPECT_TRUE(init.kind == K::constant && init.a == 1) << p->name;
    } else {
      EXPECT_TRUE(init.kind == K::normal && init.a == 0 && init.b == 0.02f) << p->name;
    }
  }
}

TEST(LlamaModelStructure, FactoryBuildsItWithOneUnitPerDecoderLayer) {
  RunConfig run;
  run.model = "llama";
  run.preset = "70b";
  run.batch = 128;
  run.world = 128;
  const BuiltModel built = build_model(run);
  EXPECT_EQ(built.unit_kinds, std::vector<std::string>{"LlamaDecoderLayer"});
  EXPECT_EQ(built.batch.seq, 4096);
  EXPECT_EQ(built.batch.vocab, 32000);
  EXPECT_EQ(built.config["num_key_value_heads"], 8);
  EXPECT_EQ(built.config["model_type"], "llama");
  EXPECT_EQ(built.config["tie_word_embeddings"], false);
  const std::vector<UnitSize> units = plan_unit_sizes(*built.model, built.unit_kinds, FsdpOptions{}, 128);
  ASSERT_EQ(units.size(), 81u) << "the root (embed_tokens, norm, lm_head) and 80 layers";
  EXPECT_TRUE(units[0].root);
  EXPECT_EQ(units[0].padded_numel, 2 * 32000LL * 8192 + 8192);  // a multiple of 128 already
  EXPECT_EQ(units[1].padded_numel, 855'654'400LL);
}

// ---- errors --------------------------------------------------------------------------------------

TEST(LlamaModelConfig, BadConfigsNameTheFieldWhatWasExpectedAndWhatCame) {
  auto error = [](auto edit) {
    LlamaConfig c = llama_preset("test-tiny");
    edit(c);
    return error_of([&] { LlamaModel model(c); });
  };
  std::string e = error([](LlamaConfig& c) { c.num_key_value_heads = 3; });
  EXPECT_TRUE(contains(e, "num_key_value_heads") && contains(e, "divisor of num_attention_heads = 4") &&
              contains(e, "got 3"))
      << e;
  e = error([](LlamaConfig& c) { c.hidden_size = 30; });
  EXPECT_TRUE(contains(e, "hidden_size") && contains(e, "multiple of num_attention_heads = 4") && contains(e, "got 30"))
      << e;
  e = error([](LlamaConfig& c) { c.hidden_size = 36; });
  EXPECT_TRUE(contains(e, "head dimension") && contains(e, "= 9") && contains(e, "even")) << e;
  e = error([](LlamaConfig& c) { c.intermediate_size = 0; });
  EXPECT_TRUE(contains(e, "intermediate_size") && contains(e, "positive") && contains(e, "got 0")) << e;
  e = error([](LlamaConfig& c) { c.vocab_size = 1LL << 40; });
  EXPECT_TRUE(contains(e, "vocab_size") && contains(e, "i32")) << e;
  e = error([](LlamaConfig& c) { c.rms_norm_eps = 0; });
  EXPECT_TRUE(contains(e, "rms_norm_eps") && contains(e, "> 0")) << e;
  e = error([](LlamaConfig& c) { c.rope_theta = -1; });
  EXPECT_TRUE(contains(e, "rope_theta") && contains(e, "got -1")) << e;

  e = error_of([] { llama_preset("13b"); });
  EXPECT_TRUE(contains(e, "unknown llama preset '13b'") && contains(e, "test-tiny, 7b, 70b")) << e;
  for (std::string_view name : llama_preset_names()) EXPECT_NO_THROW(llama_preset(name).validate()) << name;

  RunConfig run;
  run.model = "llama";
  run.preset = "7b";
  run.seq = 5000;
  e = error_of([&] { build_model(run); });
  EXPECT_TRUE(contains(e, "--seq 5000 for llama '7b'") && contains(e, "4096")) << e;
  run.model = "llama2";
  e = error_of([&] { build_model(run); });
  EXPECT_TRUE(contains(e, "--model 'llama2'") && contains(e, "gpt2 or llama")) << e;
}

TEST(LlamaModelConfig, BadBatchesError) {
  auto dev = make_sim_device();
  LlamaModel model(llama_preset("test-tiny"));
  materialise(model, *dev, 1);
  RunContext ctx{*dev};
  CountsHookCalls hooks;  // on the root: every bad call is refused before FSDP would gather anything
  model.add_hooks(&hooks);
  const std::vector<std::int32_t> ids17(17, 3);
  Tensor long_seq = ids_tensor(*dev, {1, 17}, ids17);
  std::string e = error_of([&] { model.forward(ctx, {long_seq, long_seq}); });
  EXPECT_TRUE(contains(e, "max_position_embeddings = 16") && contains(e, "T = 17")) << e;
  Batch batch = random_batch(*dev, kVocab, 2);
  e = error_of([&] { model.forward(ctx, {batch.inputs, batch.targets.reshape({kB * kT})}); });
  EXPECT_TRUE(contains(e, "targets") && contains(e, "[2, 8] i32")) << e;
  e = error_of([&] { model.backward(ctx); });
  EXPECT_TRUE(contains(e, "backward without a forward")) << e;
  EXPECT_EQ(hooks.calls, 0);
}

// ---- numerics on the tiny preset, on each device ---------------------------------------------------

class LlamaModelTiny : public OnEachDevice {};

TEST_P(LlamaModelTiny, LossAtInitIsAboutLnVocab) {
  auto dev = device();
  LlamaModel model(llama_preset("test-tiny"));
  materialise(model, *dev, 7);
  RunContext ctx{*dev};
  EXPECT_NEAR(loss_of(model, ctx, random_batch(*dev, kVocab, 3)), std::log(64.0), 0.05);
}

// Equal to a float64 PyTorch Llama written from Hugging Face's modeling_llama.py
// (tests/reference/make_llama_reference.py: its RMSNorm, rotate_half rotary embeddings with f32 angles,
// repeat_kv, eager causal attention, SwiGLU MLP, untied head) on the same parameters and tokens: every
// parameter normal(m, 0.3) from the counter RNG under seed 2024 and its name, m = 1 for RMSNorm weights.
// The finite differences below prove the backward is the forward's derivative; this proves the forward
// is Llama's (the rotation's pairing and frequencies, which query heads share which key head, the
// attention scale, RMSNorm's epsilon). Our forward runs in f32, a few dozen ops deep, so the loss
// agrees to 1e-5 and the gradients to 1e-6 + 1e-4 relative.
TEST_P(LlamaModelTiny, MatchesAPyTorchLlama) {
  auto dev = device();
  LlamaModel model(llama_preset("test-tiny"));
  materialise(model, *dev, 1);
  for (Parameter* p : model.parameters()) {
    const bool norm = p->name.ends_with("layernorm.weight") || p->name == "model.norm.weight";
    std::vector<float> v(static_cast<std::size_t>(p->numel()));
    ParamInit::normal(norm ? 1.f : 0.f, 0.3f).fill(v, 2024, p->name, 0);
    set_values(*p, v);
  }
  const std::vector<std::int32_t> kInputs = {3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 32, 38, 46, 26, 43};
  const std::vector<std::int32_t> kTargets = {14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 32, 38, 46, 26, 43, 3};
  const Batch batch{ids_tensor(*dev, {kB, kT}, kInputs), ids_tensor(*dev, {kB, kT}, kTargets)};
  RunContext ctx{*dev};
  EXPECT_NEAR(loss_of(model, ctx, batch), 6.2952237454, 1e-5);
  model.backward(ctx);
  struct Golden {
    const char* name;
    std::size_t index;
    double grad;
  };
  const Golden golden[] = {
      {"model.embed_tokens.weight", 292, 0.529591451},  // row 9: an input token
      {"model.embed_tokens.weight", 1280, 0},           // row 40: no input token
      {"model.layers.0.self_attn.q_proj.weight", 146, 0.0643430685},
      {"model.layers.0.self_attn.q_proj.weight", 640, 0.0606160987},
      {"model.layers.0.self_attn.k_proj.weight", 73, -0.196631745},
      {"model.layers.0.self_attn.k_proj.weight", 320, 0.143084755},
      {"model.layers.0.self_attn.v_proj.weight", 73, -0.285380347},
      {"model.layers.0.self_attn.v_proj.weight", 320, 0.072262825},
      {"model.layers.0.self_attn.o_proj.weight", 146, 0.00340224565},
      {"model.layers.0.self_attn.o_proj.weight", 640, 0.040451157},
      {"model.layers.0.mlp.gate_proj.weight", 292, 0.00203241422},
      {"model.layers.0.mlp.gate_proj.weight", 1280, 0.00417136389},
      {"model.layers.0.mlp.up_proj.weight", 292, -0.0154899396},
      {"model.layers.0.mlp.up_proj.weight", 1280, -0.00578515768},
      {"model.layers.0.mlp.down_proj.weight", 292, -0.0382216693},
      {"model.layers.0.mlp.down_proj.weight", 1280, -0.0173598867},
      {"model.layers.0.input_layernorm.weight", 4, -0.0694637135},
      {"model.layers.0.input_layernorm.weight", 20, -0.05572186},
      {"model.layers.0.post_attention_layernorm.weight", 4, -0.0674487587},
      {"model.layers.0.post_attention_layernorm.weight", 20, -0.0124979049},
      {"model.layers.1.self_attn.q_proj.weight", 146, -0.0285778902},
      {"model.layers.1.self_attn.q_proj.weight", 640, -0.041123595},
      {"model.layers.1.self_attn.k_proj.weight", 73, -0.0530559388},
      {"model.layers.1.self_attn.k_proj.weight", 320, 0.0636488166},
      {"model.layers.1.self_attn.v_proj.weight", 73, -0.115671913},
      {"model.layers.1.self_attn.v_proj.weight", 320, -0.139167479},
      {"model.layers.1.self_attn.o_proj.weight", 146, -0.0395951492},
      {"model.layers.1.self_attn.o_proj.weight", 640, -0.0318010343},
      {"model.layers.1.mlp.gate_proj.weight", 292, 0.00596944911},
      {"model.layers.1.mlp.gate_proj.weight", 1280, -0.0374958722},
      {"model.layers.1.mlp.up_proj.weight", 292, 0.0146302401},
      {"model.layers.1.mlp.up_proj.weight", 1280, 0.0382278582},
      {"model.layers.1.mlp.down_proj.weight", 292, 0.012324094},
      {"model.layers.1.mlp.down_proj.weight", 1280, 0.00781728624},
      {"model.layers.1.input_layernorm.weight", 4, -0.0228078061},
      {"model.layers.1.input_layernorm.weight", 20, 0.129671344},
      {"model.layers.1.post_attention_layernorm.weight", 4, 0.0600696394},
      {"model.layers.1.post_attention_layernorm.weight", 20, -0.0738374015},
      {"model.norm.weight", 4, 0.0439116203},
      {"model.norm.weight", 20, 0.0797999331},
      {"lm_head.weight", 292, 0.0849953379},
      {"lm_head.weight", 1280, -0.0397684368},
  };
  for (const Golden& g : golden)
    EXPECT_NEAR(read(model.parameter(g.name).grad)[g.index], g.grad, 1e-6 + 1e-4 * std::abs(g.grad))
        << g.name << "[" << g.index << "]";
}

// 4 random elements of every parameter against central differences of the loss
// (expect_gradients_match_central_differences in model_testing.hpp argues the bounds).
TEST_P(LlamaModelTiny, EveryParametersGradientMatchesFiniteDifferences) {
  auto dev = device();
  dev->set_keep_op_log(false);
  LlamaModel model(llama_preset("test-tiny"));
  materialise(model, *dev, 11);
  randomise(model, 12);
  RunContext ctx{*dev};
  const Batch batch = random_batch(*dev, kVocab, 13);
  model.forward(ctx, batch);
  model.backward(ctx);
  std::mt19937 rng(14);
  const auto inputs = batch.inputs.to_indices();
  GradientPicks picks;
  for (Parameter* p : model.parameters()) {
    std::uniform_int_distribution<std::int64_t> any(0, p->numel() - 1);
    // embed_tokens: rows of input tokens only, the others have no gradient to resolve.
    while (picks[p->name].size() < 4) {
      const std::int64_t i = any(rng);
      if (p->name == "model.embed_tokens.weight" &&
          std::find(inputs.begin(), inputs.end(), static_cast<std::int32_t>(i / 32)) == inputs.end())
        continue;
      picks[p->name].insert(i);
    }
  }
  expect_gradients_match_central_differences(model, ctx, batch, picks);
}

TEST_P(LlamaModelTiny, SgdStepsLowerTheLossOnAFixedBatch) {
  auto dev = device();
  LlamaModel model(llama_preset("test-tiny"));
  materialise(model, *dev, 21);
  RunContext ctx{*dev};
  const Batch batch = random_batch(*dev, kVocab, 22);
  std::vector<double> losses;
  for (int step = 1; step <= 6; ++step) {
    zero_grads(model, compute(*dev));
    losses.push_back(loss_of(model, ctx, batch));
    model.backward(ctx);
    for (Parameter* p : model.parameters()) sgd_update(compute(*dev), p->value, p->grad, Tensor(), {.lr = 0.1}, step);
  }
  for (std::size_t i = 1; i < losses.size(); ++i) EXPECT_LT(losses[i], losses[i - 1]) << "step " << i;
  EXPECT_LT(losses.back(), losses.front() - 0.1) << "the loss barely moved";
}

TEST_P(LlamaModelTiny, HooksFirePerLayerAndBackwardRunsTheLayersInReverse) {
  auto dev = device();
  LlamaModel model(llama_preset("test-tiny"));
  materialise(model, *dev, 41);
  RunContext ctx{*dev};
  const Batch batch = random_batch(*dev, kVocab, 42);
  HookRecorder rec;
  for (Module* m : model.modules())
    if (m->kind() == "LlamaDecoderLayer") m->add_hooks(&rec);
  const std::int64_t before = dev->ledger().live(MemTag::activation);
  { Tensor loss = model.forward(ctx, batch); }
  model.backward(ctx);
  EXPECT_EQ(dev->ledger().live(MemTag::activation), before) << "backward must free every saved activation";
  const std::vector<std::string> calls = {
      "pre_forward model.layers.0",  "post_forward model.layers.0",  "pre_forward model.layers.1",
      "post_forward model.layers.1", "pre_backward model.layers.1",  "post_backward model.layers.1",
      "pre_backward model.layers.0", "post_backward model.layers.0"};
  EXPECT_EQ(rec.calls, calls);
  ASSERT_EQ(rec.live.size(), 8u);
  EXPECT_LT(rec.live[0], rec.live[1]);
  EXPECT_LT(rec.live[1], rec.live[3]);
  EXPECT_GT(rec.live[4], rec.live[5]);
  EXPECT_GT(rec.live[5], rec.live[7]);
}

TEST(LlamaModelOps, ABackwardZeroesOnlyTheFinalNormsInputGradient) {
  // Every backward op of a layer writes its gradients whole (the attention's dqkv, the packing's dq, dk and
  // dv, the rotations in place, SwiGLU's dgate and dup), so none needs a zeroed buffer; only the final
  // norm's rmsnorm_backward adds into one. A fill per gradient buffer would make this 15. The input gradients
  // of the projections that share an input are summed in their GEMMs' epilogues: an add each would make 6.
  auto dev = make_sim_device();
  LlamaModel model(llama_preset("test-tiny"));
  materialise(model, *dev, 43);
  RunContext ctx{*dev};
  { Tensor loss = model.forward(ctx, random_batch(*dev, kVocab, 44)); }
  const std::size_t first = dev->ops().size();
  model.backward(ctx);
  std::map<std::string, int> calls;
  for (std::size_t i = first; i < dev->ops().size(); ++i) ++calls[dev->ops()[i].name];
  EXPECT_EQ(calls["fill"], 1);
  EXPECT_EQ(calls["rope_backward"], 4) << "q and k in each of the 2 layers";
  EXPECT_EQ(calls["pack_qkv_backward"], 2);
  EXPECT_EQ(calls["silu_mul_backward"], 2);
  EXPECT_EQ(calls["add"], 0);
  EXPECT_EQ(calls["matmul"], 2 * 2 * 7 + 2) << "2 GEMMs for each of the 7 Linears of the 2 layers, and lm_head's";
}

// See [Note: bf16 against f32] in model_testing.hpp.
TEST_P(LlamaModelTiny, Bf16RunTracksF32) {
  const LlamaConfig config = llama_preset("test-tiny");
  auto f32_device = device(), bf16_device = device();
  const LossAndGradients f32 = randomised_loss_and_gradients<LlamaModel>(*f32_device, config, kVocab, DType::f32);
  const LossAndGradients bf16 = randomised_loss_and_gradients<LlamaModel>(*bf16_device, config, kVocab, DType::bf16);
  expect_bf16_tracks_f32(f32, bf16);
}

FSDPLAB_ON_EACH_DEVICE(LlamaModelTiny);

// ---- activation memory against the analytic model ------------------------------------------------

using LlamaModelMemory = ActivationPeakTest<LlamaModel>;

TEST_P(LlamaModelMemory, ActivationPeakIsTheFormulaToTheByte) {
  // Each dtype with either attention: its default (flash in bf16, exact in f32) and the other.
  for (const AttentionKind kind : {AttentionKind::exact, AttentionKind::flash}) {
    LlamaConfig tiny = llama_preset("test-tiny");
    tiny.attention = kind;
    for (DType dtype : {DType::f32, DType::bf16})
      for (auto [B, T] : {std::pair<std::int64_t, std::int64_t>{2, 8}, {1, 16}, {3, 5}})
        EXPECT_EQ(measured(tiny, B, T, dtype), llama_memory(tiny, B, T, dtype).activation)
            << dtype_name(dtype) << " B " << B << " T " << T << ", attention " << attention_kind_name(kind);
  }
  const LlamaConfig tiny = llama_preset("test-tiny");
  // Other shapes move the peak to other moments: multi-head (KV = H), a wide MLP, a narrow one (where
  // re-packing q, k, v in the attention's backward is the peak), a large vocabulary.
  LlamaConfig mha = tiny;
  mha.num_key_value_heads = mha.num_attention_heads;
  LlamaConfig wide = tiny;
  wide.intermediate_size = 200;
  LlamaConfig narrow = tiny;
  narrow.intermediate_size = 8;
  LlamaConfig vocab = tiny;
  vocab.vocab_size = 1000;
  for (const LlamaConfig& c : {mha, wide, narrow, vocab})
    EXPECT_EQ(measured(c, 2, 8, DType::f32), llama_memory(c, 2, 8, DType::f32).activation)
        << "F " << c.intermediate_size << " V " << c.vocab_size << " KV " << c.num_key_value_heads;
}

FSDPLAB_ON_EACH_DEVICE(LlamaModelMemory);

// A dry run (the sim device on shapes alone) allocates what a real run does.
TEST(LlamaModelDryRunMemory, ActivationPeakIsTheFormulaToTheByte) {
  LlamaConfig narrow = llama_preset("test-tiny");
  narrow.intermediate_size = 8;
  EXPECT_EQ(dry_run_activation_peak<LlamaModel>(narrow, 2, 8, DType::bf16),
            llama_memory(narrow, 2, 8, DType::bf16).activation);
}

TEST(LlamaModelDryRunMemory, SevenBillionStepOnShapesAlone) {
  // In bf16 with either attention: the exact one keeps the probabilities of 32 layers, flash attention none.
  LlamaConfig seven = llama_preset("7b");
  const std::int64_t flash = dry_run_activation_peak<LlamaModel>(seven, 1, 128, DType::bf16);
  EXPECT_EQ(flash, llama_memory(seven, 1, 128, DType::bf16).activation);
  seven.attention = AttentionKind::exact;
  const std::int64_t exact = dry_run_activation_peak<LlamaModel>(seven, 1, 128, DType::bf16);
  EXPECT_EQ(exact, llama_memory(seven, 1, 128, DType::bf16).activation);
  EXPECT_GE(exact - flash, 32LL * (32 * 128 * 128 * 4 - 32 * 128 * 4) - 128 * 4096 * 2)
      << "the probabilities of 32 layers, less their log-sum-exp rows and the attention output flash keeps";
}

// ---- FSDP against the baseline ---------------------------------------------------------------------

// On each device, in a fresh folder of its own (named for the test, the device and the process).
class LlamaFsdpEquivalence : public OnEachDevice {
 protected:
  void SetUp() override {
    OnEachDevice::SetUp();
    if (IsSkipped()) return;
    dir_ = std::filesystem::temp_directory_path() /
           ("fsdplab_LlamaFsdpEquivalence_" + std::string(device_kind_name(GetParam())) + "_" +
            std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::filesystem::path path(const std::string& name) const { return dir_ / name; }

  struct Result {
    std::vector<double> losses;
    std::map<std::string, std::vector<float>> params;
    int rows_gathers = 0;  // rank 0's all-gathers of the embedding's rows (--embedding-grad rows: one a step)
  };

  RunConfig tiny_run(int world) const {
    RunConfig run;
    run.device = device_kind_name(GetParam());
    run.model = "llama";
    run.preset = "test-tiny";
    run.world = world;
    run.steps = 5;
    run.batch = 6;  // divisible by 1, 2 and 3
    run.seq = 16;
    return run;
  }

  Result train(int world, bool fsdp, EmbeddingGradient embedding_grad = EmbeddingGradient::table) {
    RunConfig run = tiny_run(world);
    run.save_final = path("final_" + std::to_string(world) + (fsdp ? "_fsdp_" : "_base_") +
                          std::string(embedding_gradient_name(embedding_grad)))
                         .string();
    std::vector<StepReport> reports;
    int rows_gathers = 0;
    if (fsdp) {
      FsdpRun sharded;
      sharded.run = run;
      sharded.options.embedding_grad = embedding_grad;
      std::vector<TraceRecorder> recorders(static_cast<std::size_t>(world));
      for (TraceRecorder& r : recorders) sharded.sinks.push_back(&r);
      reports = train_fsdp(sharded, PresetCatalog::builtin(), nullptr);
      for (const TraceEvent& e : recorders.front().data().events)
        rows_gathers += e.category == OpCategory::all_gather && e.name.ends_with(".embedding_rows");
    } else {
      reports = train_baseline(run, PresetCatalog::builtin(), nullptr, nullptr);
    }
    Result result;
    result.rows_gathers = rows_gathers;
    for (const StepReport& s : reports) result.losses.push_back(s.loss);
    const SafetensorsFile file = SafetensorsFile::read(std::filesystem::path(run.save_final) / "model.safetensors");
    for (const auto& e : file.entries()) {
      std::vector<float> v(e.bytes.size() / sizeof(float));
      std::memcpy(v.data(), e.bytes.data(), e.bytes.size());
      result.params[e.name] = std::move(v);
    }
    return result;
  }

 private:
  std::filesystem::path dir_;
};

// Each rank sums its own rows' gradients and the ranks' sums are averaged, where the baseline sums all
// rows at once: equal up to float rounding, 1e-5 relative on the losses and 1e-5 absolute on the final
// parameters after 5 AdamW steps (W = 3 cuts parameters between ranks and pads the flat buffers).
TEST_P(LlamaFsdpEquivalence, TrainsLikeTheBaselineAtTwoAndThreeRanksWithTheEmbeddingGradientEitherWay) {
  const Result base = train(1, false);
  ASSERT_EQ(base.losses.size(), 5u);
  // The comparison needs parameters that moved: AdamW at lr 1e-3 moves each by about 1e-3 a step,
  // a hundred times the tolerance below.
  double moved = 0;
  std::int64_t n = 0;
  LlamaModel shapes(llama_preset("test-tiny"));
  for (const auto& [name, values] : base.params) {
    const Parameter& p = shapes.parameter(name);
    std::vector<float> init(values.size());
    p.init.fill(init, 0, p.name, 0);
    for (std::size_t i = 0; i < values.size(); ++i, ++n) moved += std::abs(static_cast<double>(values[i]) - init[i]);
  }
  EXPECT_GT(moved / static_cast<double>(n), 1e-3);
  // --embedding-grad rows: embed_tokens' gradient from all ranks' gathered rows, the rest of the root (lm_head,
  // the final norm) reduced beside the layers' backward ([Note: the embedding's gradient as rows]); W = 3 cuts a
  // row of embed_tokens between two ranks' shards.
  for (const EmbeddingGradient embedding_grad : {EmbeddingGradient::table, EmbeddingGradient::rows}) {
    for (int world : {2, 3}) {
      const std::string what =
          "W " + std::to_string(world) + ", --embedding-grad " + std::string(embedding_gradient_name(embedding_grad));
      const Result fsdp = train(world, true, embedding_grad);
      EXPECT_EQ(fsdp.rows_gathers, embedding_grad == EmbeddingGradient::rows ? 5 : 0) << what;
      ASSERT_EQ(fsdp.losses.size(), base.losses.size());
      for (std::size_t i = 0; i < base.losses.size(); ++i)
        EXPECT_LE(std::abs(fsdp.losses[i] - base.losses[i]) / std::abs(base.losses[i]), 1e-5)
            << what << " step " << i << ": " << fsdp.losses[i] << " vs " << base.losses[i];
      ASSERT_EQ(fsdp.params.size(), base.params.size());
      for (const auto& [name, values] : base.params) {
        const std::vector<float>& other = fsdp.params.at(name);
        ASSERT_EQ(other.size(), values.size()) << name;
        double worst = 0;
        for (std::size_t i = 0; i < values.size(); ++i)
          worst = std::max(worst, std::abs(static_cast<double>(values[i]) - other[i]));
        EXPECT_LE(worst, 1e-5) << what << ": " << name;
      }
    }
  }
}

FSDPLAB_ON_EACH_DEVICE(LlamaFsdpEquivalence);

// A dry run of 7B on 8 ranks: each rank's sharded state is the formula's to the byte, and its
// activations are one rank's micro-batch's.
TEST(LlamaFsdpDryRun, SevenBillionOnEightRanksHoldsTheFormulasState) {
  FsdpRun fsdp;
  fsdp.run.model = "llama";
  fsdp.run.preset = "7b";
  fsdp.run.world = 8;
  fsdp.run.batch = 8;
  fsdp.run.seq = 64;
  fsdp.run.steps = 1;
  fsdp.options.param_dtype = DType::bf16;
  fsdp.dry_run = true;
  std::mutex mutex;
  std::vector<TagBytes> peaks(8);
  fsdp.on_rank_done = [&](int rank, Device& device) {
    const std::lock_guard<std::mutex> lock(mutex);
    peaks[static_cast<std::size_t>(rank)] = device.ledger().peak_by_tag();
  };
  const std::vector<StepReport> reports = train_fsdp(fsdp, PresetCatalog::builtin(), nullptr);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(std::isnan(reports[0].loss));
  EXPECT_GT(reports[0].end, reports[0].begin);
  const BuiltModel built = build_model(fsdp.run);
  const TagBytes formula =
      fsdp_memory({plan_unit_sizes(*built.model, built.unit_kinds, fsdp.options, 8), fsdp.options, 8, 2,
                   model_memory(*built.model, 1, 64, DType::bf16)});
  const auto at = [](const TagBytes& t, MemTag tag) { return t[static_cast<std::size_t>(tag)]; };
  for (const TagBytes& rank : peaks) {
    for (MemTag tag : {MemTag::param_shard, MemTag::grad_shard, MemTag::optim_state, MemTag::activation})
      EXPECT_EQ(at(rank, tag), at(formula, tag)) << mem_tag_name(tag);
  }
  // 6.74e9 parameters over 8 ranks, 4 bytes each, in three copies (master, gradient, and AdamW's two
  // states counted as one tag of twice that).
  EXPECT_NEAR(static_cast<double>(at(peaks[0], MemTag::param_shard)), 6'738'415'616.0 * 4 / 8, 1e6);
}

}  // namespace
}  // namespace fsdplab
