// Gpt2Model: Hugging Face's names, shapes and counts; config errors; and on the tiny preset, on each
// device (sim, and cuda where there is a GPU), the loss at init, equality with GPT2LMHeadModel, a
// full-model gradient check against finite differences, training, the tied weight's two gradients,
// hook order, activation memory and bf16; the padded vocabulary, in training and in checkpoint folders;
// and a dry-run step of GPT-2 small on shapes alone.
#include "engine/nn/gpt2_model.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "engine/nn/activation_memory.hpp"
#include "engine/nn/checkpoint.hpp"
#include "engine/nn/safetensors.hpp"
#include "engine/tensor/elementwise.hpp"
#include "engine/tensor/optimizer_ops.hpp"
#include "activation_peak.hpp"
#include "model_testing.hpp"

namespace fsdplab {
namespace {

using namespace testing;

// ---- structure -----------------------------------------------------------------------------------

TEST(Gpt2ModelStructure, Gpt2SmallHasHuggingFacesNamesShapesAndCount) {
  Gpt2Model model(gpt2_preset("gpt2"));
  const std::vector<Parameter*> params = model.parameters();
  // GPT2LMHeadModel.named_parameters(): the tied lm_head.weight is listed once, as wte.
  ASSERT_EQ(params.size(), 2u + 12u * 12u + 2u);
  std::vector<std::pair<std::string, Shape>> expected = {{"transformer.wte.weight", {50304, 768}},
                                                         {"transformer.wpe.weight", {1024, 768}}};
  for (int i = 0; i < 12; ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".";
    for (const auto& [name, shape] : std::vector<std::pair<std::string, Shape>>{
             {"ln_1.weight", {768}},
             {"ln_1.bias", {768}},
             {"attn.c_attn.weight", {768, 2304}},
             {"attn.c_attn.bias", {2304}},
             {"attn.c_proj.weight", {768, 768}},
             {"attn.c_proj.bias", {768}},
             {"ln_2.weight", {768}},
             {"ln_2.bias", {768}},
             {"mlp.c_fc.weight", {768, 3072}},
             {"mlp.c_fc.bias", {3072}},
             {"mlp.c_proj.weight", {3072, 768}},
             {"mlp.c_proj.bias", {768}},
         })
      expected.push_back({h + name, shape});
  }
  expected.push_back({"transformer.ln_f.weight", {768}});
  expected.push_back({"transformer.ln_f.bias", {768}});
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i]->name, expected[i].first) << "parameter " << i;
    EXPECT_EQ(params[i]->shape, expected[i].second) << params[i]->name;
    EXPECT_FALSE(params[i]->value.defined()) << params[i]->name << ": built as shapes only";
  }
  // [Note: the padded vocabulary]: wte is stored as 50304 rows, 50257 of them the vocabulary.
  EXPECT_EQ(params[0]->padding_rows, 47);
  EXPECT_EQ(params[0]->logical_shape(), (Shape{50257, 768}));
  EXPECT_EQ(model.parameter_count(), 124'439'808);  // sum(p.numel() for p in GPT2LMHeadModel.parameters())
  std::int64_t stored = 0;
  for (const Parameter* p : params) stored += p->numel();
  EXPECT_EQ(stored, 124'439'808 + 47 * 768);
}

TEST(Gpt2ModelStructure, LargerPresetsCountAsHuggingFace) {
  EXPECT_EQ(Gpt2Model(gpt2_preset("gpt2-medium")).parameter_count(), 354'823'168);
  EXPECT_EQ(Gpt2Model(gpt2_preset("gpt2-large")).parameter_count(), 774'030'080);
  EXPECT_EQ(Gpt2Model(gpt2_preset("gpt2-xl")).parameter_count(), 1'557'611'200);
}

TEST(Gpt2ModelStructure, ModulesMirrorHuggingFaceAndTheHeadSharesWte) {
  Gpt2Model model(gpt2_preset("test-tiny"));
  std::vector<std::string> names;
  for (Module* m : model.modules()) names.push_back(m->name());
  const std::vector<std::string> expected = {
      "", "transformer", "transformer.wte", "transformer.wpe", "transformer.h",
      "transformer.h.0", "transformer.h.0.ln_1", "transformer.h.0.attn", "transformer.h.0.attn.c_attn",
      "transformer.h.0.attn.c_proj", "transformer.h.0.ln_2", "transformer.h.0.mlp", "transformer.h.0.mlp.c_fc",
      "transformer.h.0.mlp.c_proj", "transformer.h.1", "transformer.h.1.ln_1", "transformer.h.1.attn",
      "transformer.h.1.attn.c_attn", "transformer.h.1.attn.c_proj", "transformer.h.1.ln_2", "transformer.h.1.mlp",
      "transformer.h.1.mlp.c_fc", "transformer.h.1.mlp.c_proj", "transformer.ln_f", "lm_head"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(model.module("transformer.h.1").kind(), "Block");
  Module& head = model.module("lm_head");
  EXPECT_TRUE(head.own_parameters().empty());
  ASSERT_EQ(head.shared_parameters().size(), 1u);
  EXPECT_EQ(head.shared_parameters()[0], &model.parameter("transformer.wte.weight"));
}

TEST(Gpt2ModelStructure, InitialisesAsGpt2) {
  Gpt2Model model(gpt2_preset("test-tiny"));  // 2 layers: residual projections get 0.02 / sqrt(4)
  auto is = [&](std::string_view name, ParamInit::Kind kind, float a, float b) {
    const ParamInit& init = model.parameter(name).init;
    EXPECT_TRUE(init.kind == kind && init.a == a && init.b == b) << name;
  };
  using K = ParamInit::Kind;
  is("transformer.wte.weight", K::normal, 0, 0.02f);
  is("transformer.wpe.weight", K::normal, 0, 0.02f);
  is("transformer.h.1.attn.c_attn.weight", K::normal, 0, 0.02f);
  is("transformer.h.1.mlp.c_fc.weight", K::normal, 0, 0.02f);
  is("transformer.h.1.attn.c_proj.weight", K::normal, 0, 0.01f);
  is("transformer.h.1.mlp.c_proj.weight", K::normal, 0, 0.01f);
  is("transformer.h.0.attn.c_attn.bias", K::constant, 0, 0);
  is("transformer.h.0.mlp.c_proj.bias", K::constant, 0, 0);
  is("transformer.h.0.ln_2.weight", K::constant, 1, 0);
  is("transformer.ln_f.bias", K::constant, 0, 0);
}

// ---- errors --------------------------------------------------------------------------------------

TEST(Gpt2ModelConfig, BadConfigsNameTheFieldWhatWasExpectedAndWhatCame) {
  auto error = [](auto edit) {
    Gpt2Config c = gpt2_preset("test-tiny");
    edit(c);
    return error_of([&] { Gpt2Model model(c); });
  };
  std::string e = error([](Gpt2Config& c) { c.n_embd = 31; });
  EXPECT_TRUE(contains(e, "n_embd") && contains(e, "multiple of n_head = 2") && contains(e, "got 31")) << e;
  e = error([](Gpt2Config& c) { c.n_head = 0; });
  EXPECT_TRUE(contains(e, "n_head") && contains(e, "positive") && contains(e, "got 0")) << e;
  e = error([](Gpt2Config& c) { c.vocab_size = -5; });
  EXPECT_TRUE(contains(e, "vocab_size") && contains(e, "got -5")) << e;
  e = error([](Gpt2Config& c) { c.n_layer = 0; });
  EXPECT_TRUE(contains(e, "n_layer") && contains(e, "got 0")) << e;
  e = error([](Gpt2Config& c) { c.n_positions = 1LL << 40; });
  EXPECT_TRUE(contains(e, "n_positions") && contains(e, "i32")) << e;
  e = error([](Gpt2Config& c) { c.layer_norm_epsilon = 0; });
  EXPECT_TRUE(contains(e, "layer_norm_epsilon") && contains(e, "> 0")) << e;
  e = error([](Gpt2Config& c) { c.vocab_multiple = 0; });
  EXPECT_TRUE(contains(e, "vocab_multiple") && contains(e, "positive") && contains(e, "got 0")) << e;
  e = error([](Gpt2Config& c) { c.vocab_multiple = (1LL << 31) - 10; });
  EXPECT_TRUE(contains(e, "vocab_multiple") && contains(e, "indexable by i32")) << e;

  e = error_of([] { gpt2_preset("gpt3"); });
  EXPECT_TRUE(contains(e, "'gpt3'") && contains(e, "test-tiny, test-small, gpt2, gpt2-medium, gpt2-large, gpt2-xl"))
      << e;
  for (std::string_view name : gpt2_preset_names()) EXPECT_NO_THROW(gpt2_preset(name).validate()) << name;
}

TEST(Gpt2ModelConfig, BadBatchesError) {
  auto dev = make_sim_device();
  Gpt2Model model(gpt2_preset("test-tiny"));
  materialise(model, *dev, 1);
  RunContext ctx{*dev};
  CountsHookCalls hooks;  // on the root: every bad call is refused before FSDP would gather anything
  model.add_hooks(&hooks);
  const std::vector<std::int32_t> ids17(17, 3);
  Tensor long_seq = ids_tensor(*dev, {1, 17}, ids17);
  std::string e = error_of([&] { model.forward(ctx, {long_seq, long_seq}); });
  EXPECT_TRUE(contains(e, "n_positions = 16") && contains(e, "T = 17")) << e;

  Batch batch = random_batch(*dev, 64, 2);
  e = error_of([&] { model.forward(ctx, {batch.inputs, batch.targets.reshape({kB * kT})}); });
  EXPECT_TRUE(contains(e, "targets") && contains(e, "[2, 8] i32")) << e;
  e = error_of([&] { model.forward(ctx, {zeros(*dev, {kB, kT}), batch.targets}); });
  EXPECT_TRUE(contains(e, "inputs") && contains(e, "i32")) << e;
  e = error_of([&] { model.backward(ctx); });
  EXPECT_TRUE(contains(e, "backward without a forward")) << e;
  EXPECT_EQ(hooks.calls, 0);
}

// ---- numerics on the tiny preset, on each device ---------------------------------------------------

class Gpt2ModelTiny : public OnEachDevice {};

TEST_P(Gpt2ModelTiny, LossAtInitIsAboutLnVocab) {
  auto dev = device();
  Gpt2Model model(gpt2_preset("test-tiny"));
  materialise(model, *dev, 7);
  RunContext ctx{*dev};
  // With weights of std 0.02 the logits are nearly equal, so the softmax is nearly uniform:
  // loss = ln V + O(var(logits)) = ln 64 + ~0.01.
  EXPECT_NEAR(loss_of(model, ctx, random_batch(*dev, 64, 3)), std::log(64.0), 0.05);
}

// Equal to Hugging Face's GPT2LMHeadModel (transformers 4.36, float64) on the same parameters and
// tokens: the loss and a sample of gradients. The finite differences below prove the backward is the
// forward's derivative; this proves the forward is GPT-2's. Each parameter is normal(m, 0.3) from the
// counter RNG under seed 2024 and its name (m = 1 for LayerNorm weights), so Python draws the same:
//   import counter_rng as rng  # tests/reference/counter_rng.py
//   from transformers import GPT2Config, GPT2LMHeadModel
//   m = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)).double().eval()
//   for name, p in m.named_parameters():
//       mean = 1.0 if '.ln_' in name and name.endswith('.weight') else 0.0
//       p.data.copy_(torch.tensor([rng.normal_at(2024, rng.stream_key(name), i, mean, 0.3)
//                                  for i in range(p.numel())]).view_as(p))
//   loss = F.cross_entropy(m(x).logits.view(-1, 64), y.view(-1)); loss.backward()
// with x, y the kInputs and kTargets below as [2, 8]; the gradients are p.grad.flatten()[index].
// Our forward runs in f32 (relative rounding ~1e-7 per op, a few dozen ops deep), so the loss
// agrees to 1e-5 and the gradients to 1e-6 + 1e-4 relative; a semantic difference (gelu's exact
// form, the attention scale, a missed causal mask, LayerNorm's epsilon) moves them by far more.
TEST_P(Gpt2ModelTiny, MatchesHuggingFaceGpt2LMHeadModel) {
  auto dev = device();
  Gpt2Model model(gpt2_preset("test-tiny"));
  materialise(model, *dev, 1);
  for (Parameter* p : model.parameters()) {
    const bool ln_weight = p->name.find(".ln_") != std::string::npos && p->name.ends_with(".weight");
    std::vector<float> v(static_cast<std::size_t>(p->numel()));
    ParamInit::normal(ln_weight ? 1.f : 0.f, 0.3f).fill(v, 2024, p->name, 0);
    set_values(*p, v);
  }
  const std::vector<std::int32_t> kInputs = {3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 32, 38, 46, 26, 43};
  const std::vector<std::int32_t> kTargets = {14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 32, 38, 46, 26, 43, 3};
  const Batch batch{ids_tensor(*dev, {kB, kT}, kInputs), ids_tensor(*dev, {kB, kT}, kTargets)};
  RunContext ctx{*dev};
  EXPECT_NEAR(loss_of(model, ctx, batch), 4.499230527, 1e-5);
  model.backward(ctx);
  struct Golden {
    const char* name;
    std::size_t index;
    double grad;
  };
  const Golden golden[] = {
      {"transformer.wte.weight", 97, 0.0491593218},  // row 3: an input and a target
      {"transformer.wte.weight", 1927, -0.000762415523},  // row 60: neither, the head's gradient alone
      {"transformer.wpe.weight", 162, 0.00372383905},
      {"transformer.h.0.ln_1.weight", 4, -0.0272713265},
      {"transformer.h.0.attn.c_attn.weight", 100, 0.0250887702},
      {"transformer.h.0.attn.c_attn.weight", 1000, -0.0622649369},
      {"transformer.h.0.attn.c_proj.bias", 6, -0.0276509688},
      {"transformer.h.1.ln_2.bias", 30, -0.0157204538},
      {"transformer.h.1.mlp.c_fc.weight", 2000, 0.00358844726},
      {"transformer.h.1.mlp.c_proj.weight", 3000, -0.00155378563},
      {"transformer.ln_f.weight", 11, 0.0125767189},
  };
  for (const Golden& g : golden)
    EXPECT_NEAR(read(model.parameter(g.name).grad)[g.index], g.grad, 1e-6 + 1e-4 * std::abs(g.grad))
        << g.name << "[" << g.index << "]";
}

TEST_P(Gpt2ModelTiny, EveryParametersGradientMatchesFiniteDifferences) {
  auto dev = device();
  dev->set_keep_op_log(false);
  Gpt2Model model(gpt2_preset("test-tiny"));
  materialise(model, *dev, 11);
  randomise(model, 12);
  RunContext ctx{*dev};
  const Batch batch = random_batch(*dev, 64, 13);
  model.forward(ctx, batch);
  model.backward(ctx);

  // Elements to check: 4 random ones of every parameter; for wte also a row only the inputs use, a
  // row only the targets use and a row neither uses (the head's gradient alone).
  std::mt19937 rng(14);
  GradientPicks picks;
  for (Parameter* p : model.parameters()) {
    std::uniform_int_distribution<std::int64_t> any(0, p->numel() - 1);
    for (int k = 0; k < 4; ++k) picks[p->name].insert(any(rng));
  }
  {
    const auto in = batch.inputs.to_indices(), out = batch.targets.to_indices();
    const std::set<std::int32_t> ins(in.begin(), in.end()), outs(out.begin(), out.end());
    bool done[3] = {false, false, false};
    for (std::int32_t v = 0; v < 64; ++v) {
      const bool i = ins.contains(v), o = outs.contains(v);
      const int kind = i && !o ? 0 : !i && o ? 1 : !i && !o ? 2 : -1;
      if (kind < 0 || done[kind]) continue;
      picks["transformer.wte.weight"].insert(v * 32 + 5 * kind);
      done[kind] = true;
    }
    ASSERT_TRUE(done[0] && done[1] && done[2]) << "the batch lacks a kind of row";
  }

  expect_gradients_match_central_differences(model, ctx, batch, picks);
}

TEST_P(Gpt2ModelTiny, SgdStepsLowerTheLossOnAFixedBatch) {
  auto dev = device();
  Gpt2Model model(gpt2_preset("test-tiny"));
  materialise(model, *dev, 21);
  RunContext ctx{*dev};
  const Batch batch = random_batch(*dev, 64, 22);
  // A small rate: at GPT-2's init the embeddings have std 0.02 and ln_1 divides by that, so the loss
  // is very sharp along them, and plain SGD above ~0.05 overshoots within a few steps (Hugging
  // Face's GPT2LMHeadModel does just the same; GPT-2 trains with AdamW).
  std::vector<double> losses;
  for (int step = 1; step <= 6; ++step) {
    zero_grads(model, compute(*dev));
    losses.push_back(loss_of(model, ctx, batch));
    model.backward(ctx);
    for (Parameter* p : model.parameters()) sgd_update(compute(*dev), p->value, p->grad, Tensor(), {.lr = 0.02}, step);
  }
  for (std::size_t i = 1; i < losses.size(); ++i) EXPECT_LT(losses[i], losses[i - 1]) << "step " << i;
  EXPECT_LT(losses.back(), losses.front() - 0.3) << "the loss barely moved";
}

// [Note: the padded vocabulary]: a vocabulary of 50 stored as 64 rows trains as the same vocabulary
// stored as 50. Initial values are equal (the counter RNG keys each element by its index, and the padding
// rows come after every real one); AdamW with weight decay then leaves the padding rows at exactly 0.
TEST_P(Gpt2ModelTiny, APaddedVocabularyTrainsAsTheUnpaddedOneAndItsPaddingStaysZero) {
  auto dev = device();
  Gpt2Config unpadded_config = gpt2_preset("test-tiny");
  unpadded_config.vocab_size = 50;
  unpadded_config.vocab_multiple = 1;
  Gpt2Config padded_config = unpadded_config;
  padded_config.vocab_multiple = 64;
  Gpt2Model unpadded(unpadded_config), padded(padded_config);
  Parameter& wte = *padded.parameters().front();
  ASSERT_EQ(wte.shape, (Shape{64, 32}));
  ASSERT_EQ(wte.padding_rows, 14);
  materialise(unpadded, *dev, 31);
  materialise(padded, *dev, 31);
  const std::vector<float> unpadded_wte = read(unpadded.parameters().front()->value);
  std::vector<float> padded_wte = read(wte.value);
  EXPECT_EQ(std::vector<float>(padded_wte.begin(), padded_wte.begin() + 50 * 32), unpadded_wte);
  EXPECT_EQ(std::vector<float>(padded_wte.begin() + 50 * 32, padded_wte.end()), std::vector<float>(14 * 32, 0.f));

  // AdamW's operands for every parameter, with zeroed moments (written by the host before any op runs).
  auto adamw_operands = [&](Gpt2Model& model) {
    std::vector<AdamWOperands> each;
    for (Parameter* p : model.parameters())
      each.push_back({p->name, p->value, p->grad, zeros(*dev, p->shape), zeros(*dev, p->shape)});
    return each;
  };
  const std::vector<AdamWOperands> unpadded_adamw = adamw_operands(unpadded), padded_adamw = adamw_operands(padded);
  const Batch batch = random_batch(*dev, 50, 32);
  RunContext ctx{*dev};
  auto train_step = [&](Gpt2Model& model, std::int64_t step, const std::vector<AdamWOperands>& adamw) {
    zero_grads(model, compute(*dev));
    const double loss = loss_of(model, ctx, batch);
    model.backward(ctx);
    adamw_update(compute(*dev), adamw, {.lr = 1e-2, .weight_decay = 0.1}, step);
    return loss;
  };
  for (std::int64_t step = 1; step <= 4; ++step) {
    const double want = train_step(unpadded, step, unpadded_adamw);
    const double got = train_step(padded, step, padded_adamw);
    // The same sums, but a GEMM 64 columns wide may block its work otherwise than one 50 wide.
    EXPECT_NEAR(got, want, 1e-5 * want) << "step " << step;
    const std::vector<float> grad = read(wte.grad);
    EXPECT_EQ(std::vector<float>(grad.begin() + 50 * 32, grad.end()), std::vector<float>(14 * 32, 0.f))
        << "step " << step << ": the padding rows' gradient";
  }
  padded_wte = read(wte.value);
  EXPECT_EQ(std::vector<float>(padded_wte.begin() + 50 * 32, padded_wte.end()), std::vector<float>(14 * 32, 0.f))
      << "AdamW moved the padding rows";
  const std::vector<float> trained_unpadded = read(unpadded.parameters().front()->value);
  for (std::size_t e = 0; e < trained_unpadded.size(); ++e)
    ASSERT_NEAR(padded_wte[e], trained_unpadded[e], 1e-5) << "wte element " << e;
}

// A checkpoint folder holds wte's 64 real rows whether the model stores 64 or 128, so a folder moves between
// the two; the padding reads back as 0, and a save refuses padding that is not 0 (it would be lost).
TEST(Gpt2ModelPaddedVocabulary, AFolderHoldsTheVocabularyUnpaddedAndRefusesPaddingThatIsNotZero) {
  auto dev = make_sim_device();
  const auto dir = std::filesystem::temp_directory_path() / ("fsdplab_padded_vocab_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const nlohmann::json identity = {{"model_type", "gpt2"}};
  Gpt2Config padded_config = gpt2_preset("test-tiny");
  padded_config.vocab_multiple = 128;
  Gpt2Model padded(padded_config), unpadded(gpt2_preset("test-tiny"));
  Parameter& padded_wte = *padded.parameters().front();
  Parameter& unpadded_wte = *unpadded.parameters().front();
  ASSERT_EQ(padded_wte.shape, (Shape{128, 32}));
  materialise(padded, *dev, 5);
  materialise(unpadded, *dev, 6);
  const std::vector<float> saved = read(padded_wte.value);

  save_checkpoint(dir, padded, identity);
  EXPECT_EQ(SafetensorsFile::read(dir / "model.safetensors").at("transformer.wte.weight").shape,
            (std::vector<std::int64_t>{64, 32}));
  load_checkpoint(dir, unpadded, identity);
  EXPECT_EQ(read(unpadded_wte.value), std::vector<float>(saved.begin(), saved.begin() + 64 * 32));
  set_values(padded_wte, std::vector<float>(128 * 32, 1.f));
  load_checkpoint(dir, padded, identity);
  EXPECT_EQ(read(padded_wte.value), saved) << "the padding rows read back as 0";

  std::vector<float> bad = saved;
  bad[100 * 32 + 3] = 0.5f;
  set_values(padded_wte, bad);
  const std::string e = error_of([&] { save_checkpoint(dir, padded, identity); });
  EXPECT_TRUE(
      contains(e, "'transformer.wte.weight' holds 0.5 at element 3203, in its padding rows (from element 2048)") &&
      contains(e, "expected 0"))
      << e;
  load_checkpoint(dir, unpadded, identity);  // the folder is the one saved before
  EXPECT_EQ(read(unpadded_wte.value), std::vector<float>(saved.begin(), saved.begin() + 64 * 32));
  std::filesystem::remove_all(dir);
}

// A probe that snapshots wte's gradient when lm_head's backward is done: what the head added.
struct HeadGradProbe : ModuleHooks {
  Parameter* wte = nullptr;
  std::vector<float> after_head;
  void post_backward(Module&, RunContext&) override { after_head = read(wte->grad); }
};

TEST_P(Gpt2ModelTiny, TiedWeightGradientSumsHeadAndEmbedding) {
  auto dev = device();
  Gpt2Model model(gpt2_preset("test-tiny"));
  materialise(model, *dev, 31);
  RunContext ctx{*dev};
  const Batch batch = random_batch(*dev, 64, 32);
  Parameter& wte = model.parameter("transformer.wte.weight");
  HeadGradProbe probe;
  probe.wte = &wte;
  model.module("lm_head").add_hooks(&probe);
  model.forward(ctx, batch);
  model.backward(ctx);
  const std::vector<float> total = read(wte.grad);
  ASSERT_EQ(probe.after_head.size(), total.size());

  const auto in = batch.inputs.to_indices();
  const std::set<std::int32_t> inputs(in.begin(), in.end());
  constexpr int C = 32;
  for (std::int32_t v = 0; v < 64; ++v) {
    double head = 0, embedding = 0;
    for (int c = 0; c < C; ++c) {
      head += std::abs(probe.after_head[v * C + c]);
      embedding += std::abs(total[v * C + c] - probe.after_head[v * C + c]);
    }
    // Every token's logit has a gradient (softmax), so the head touches every row; the embedding
    // only the rows of the input tokens.
    EXPECT_GT(head, 0) << "row " << v << ": no gradient from the head";
    if (inputs.contains(v)) {
      EXPECT_GT(embedding, 1e-6) << "row " << v << " is an input token: no gradient from the embedding";
    } else {
      EXPECT_EQ(embedding, 0) << "row " << v << " is no input token but got an embedding gradient";
    }
  }
}

TEST_P(Gpt2ModelTiny, HooksFirePerBlockAndBackwardRunsTheBlocksInReverse) {
  auto dev = device();
  Gpt2Model model(gpt2_preset("test-tiny"));
  materialise(model, *dev, 41);
  RunContext ctx{*dev};
  const Batch batch = random_batch(*dev, 64, 42);
  HookRecorder rec;
  for (Module* m : model.modules())
    if (m->kind() == "Block") m->add_hooks(&rec);
  const std::int64_t before = dev->ledger().live(MemTag::activation);
  {
    Tensor loss = model.forward(ctx, batch);
    EXPECT_GT(dev->ledger().live(MemTag::activation), before);
  }
  model.backward(ctx);
  EXPECT_EQ(dev->ledger().live(MemTag::activation), before) << "backward must free every saved activation";

  const std::vector<std::string> calls = {
      "pre_forward transformer.h.0",   "post_forward transformer.h.0",  "pre_forward transformer.h.1",
      "post_forward transformer.h.1",  "pre_backward transformer.h.1",  "post_backward transformer.h.1",
      "pre_backward transformer.h.0",  "post_backward transformer.h.0"};
  EXPECT_EQ(rec.calls, calls);
  // Activations saved by each block pile up through the forward and go in reverse in the backward.
  ASSERT_EQ(rec.live.size(), 8u);
  EXPECT_LT(rec.live[0], rec.live[1]);
  EXPECT_LT(rec.live[1], rec.live[3]);
  EXPECT_GT(rec.live[4], rec.live[5]);
  EXPECT_GT(rec.live[5], rec.live[7]);

  std::vector<std::string> order;
  for (const Module* m : model.backward_order()) order.push_back(m->name());
  std::vector<std::string> expected = {"", "lm_head", "transformer", "transformer.ln_f"};
  for (const char* h : {"transformer.h.1", "transformer.h.0"}) {
    for (const char* m : {"", ".mlp", ".mlp.c_proj", ".mlp.c_fc", ".ln_2", ".attn", ".attn.c_proj", ".attn.c_attn",
                          ".ln_1"})
      expected.push_back(std::string(h) + m);
  }
  expected.push_back("transformer.wpe");
  expected.push_back("transformer.wte");
  EXPECT_EQ(order, expected);
}

// See [Note: bf16 against f32] in model_testing.hpp.
TEST_P(Gpt2ModelTiny, Bf16RunTracksF32) {
  const Gpt2Config config = gpt2_preset("test-tiny");
  auto f32_device = device(), bf16_device = device();
  const LossAndGradients f32 = randomised_loss_and_gradients<Gpt2Model>(*f32_device, config, 64, DType::f32);
  const LossAndGradients bf16 = randomised_loss_and_gradients<Gpt2Model>(*bf16_device, config, 64, DType::bf16);
  expect_bf16_tracks_f32(f32, bf16);
}

FSDPLAB_ON_EACH_DEVICE(Gpt2ModelTiny);

// The f32 online softmax against the exact one on the same model and batch: the loss to f32's rounding and every
// gradient to 1e-5 of the largest of its tensor; a wrong tile, scale or mask in either misses by far more.
TEST_P(Gpt2ModelTiny, FlashAttentionInF32TracksTheExactSoftmax) {
  std::vector<std::vector<float>> grads[2];
  double loss[2];
  const AttentionKind kinds[2] = {AttentionKind::exact, AttentionKind::flash};
  for (int k = 0; k < 2; ++k) {
    auto dev = device();
    Gpt2Config config = gpt2_preset("test-tiny");
    config.attention = kinds[k];
    Gpt2Model model(config);
    materialise(model, *dev, 61);
    RunContext ctx{*dev};
    loss[k] = loss_of(model, ctx, random_batch(*dev, 64, 62));
    model.backward(ctx);
    for (Parameter* p : model.parameters()) grads[k].push_back(read(p->grad));
  }
  EXPECT_NEAR(loss[1], loss[0], 1e-6 * loss[0]);
  for (std::size_t i = 0; i < grads[0].size(); ++i) {
    float largest = 0.f;
    for (const float g : grads[0][i]) largest = std::max(largest, std::abs(g));
    EXPECT_TRUE(all_close(grads[1][i], grads[0][i], 1e-5 * largest, 0.0)) << "parameter " << i;
  }
}

// ---- activation memory against the analytic model ------------------------------------------------

using Gpt2ModelMemory = ActivationPeakTest<Gpt2Model>;

TEST_P(Gpt2ModelMemory, ActivationPeakIsTheFormulaToTheByte) {
  // Each dtype with either attention: its default (flash in bf16, exact in f32) and the other.
  for (const AttentionKind kind : {AttentionKind::exact, AttentionKind::flash}) {
    Gpt2Config tiny = gpt2_preset("test-tiny");
    tiny.attention = kind;
    for (DType dtype : {DType::f32, DType::bf16})
      for (auto [B, T] : {std::pair<std::int64_t, std::int64_t>{2, 8}, {1, 16}, {3, 5}})
        EXPECT_EQ(measured(tiny, B, T, dtype), gpt2_memory(tiny, B, T, dtype).activation)
            << dtype_name(dtype) << " B " << B << " T " << T << ", attention " << attention_kind_name(kind);
  }
  const Gpt2Config tiny = gpt2_preset("test-tiny");
  // A large, padded vocabulary puts the peak at the LM head's backward, where the logits' gradient (written
  // over the logits) sits beside the head's dx.
  Gpt2Config vocab = tiny;
  vocab.vocab_size = 1000;
  vocab.vocab_multiple = 128;
  EXPECT_EQ(measured(vocab, 2, 8, DType::f32), gpt2_memory(vocab, 2, 8, DType::f32).activation);
}

FSDPLAB_ON_EACH_DEVICE(Gpt2ModelMemory);

// GPT-2 124M at 4 x 1024 tokens, the H100 runs' shape, on shapes alone: the formula to the byte, and the
// logits' gradient taking the logits' place rather than a second [N, Vp] buffer beside them.
TEST(Gpt2ModelDryRunMemory, OneTwentyFourMillionStepIsTheFormulaToTheByte) {
  const Gpt2Config small = gpt2_preset("gpt2");
  for (DType dtype : {DType::f32, DType::bf16}) {
    const std::int64_t peak = dry_run_activation_peak<Gpt2Model>(small, 4, 1024, dtype);
    EXPECT_EQ(peak, gpt2_memory(small, 4, 1024, dtype).activation) << dtype_name(dtype);
  }
  // f32 with flash attention keeps no [B, H, T, T] probabilities: 12 layers x 4 x 12 x 1024 x 1024 f32 fewer
  // bytes, less the log-sum-exp rows it keeps instead.
  Gpt2Config flash = small;
  flash.attention = AttentionKind::flash;
  const std::int64_t flash_peak = dry_run_activation_peak<Gpt2Model>(flash, 4, 1024, DType::f32);
  EXPECT_EQ(flash_peak, gpt2_memory(flash, 4, 1024, DType::f32).activation);
  EXPECT_EQ(gpt2_memory(small, 4, 1024, DType::f32).activation - flash_peak,
            12 * (4LL * 12 * 1024 * 1024 * 4 - 4LL * 12 * 1024 * 4));
}

TEST(Gpt2ModelDryRun, Gpt2SmallStepRunsOnShapesAlone) {
  auto dev = make_sim_device(0, {.dry_run = true});
  Gpt2Model model(gpt2_preset("gpt2"));
  for (Parameter* p : model.parameters()) {  // no data: a dry run keeps sizes and times only
    p->value = Tensor::empty(*dev, p->shape, DType::bf16, MemTag::param_full, p->name);
    p->grad = Tensor::empty(*dev, p->shape, DType::bf16, MemTag::grad_full, p->name + ".grad");
  }
  RunContext ctx{*dev, DType::bf16};
  const Batch batch{Tensor::empty(*dev, {1, 64}, DType::i32, MemTag::activation),
                    Tensor::empty(*dev, {1, 64}, DType::i32, MemTag::activation)};
  const std::int64_t before = dev->ledger().live(MemTag::activation);
  model.forward(ctx, batch);
  model.backward(ctx);
  // In storage: GPT-2's parameters and wte's 47 padding rows ([Note: the padded vocabulary]).
  EXPECT_EQ(dev->ledger().live(MemTag::param_full), (124'439'808LL + 47 * 768) * 2);
  EXPECT_GT(dev->ledger().peak(MemTag::activation), before + 64LL * 50304 * 2) << "the logits alone are this big";
  EXPECT_EQ(dev->ledger().live(MemTag::activation), before);
}

}  // namespace
}  // namespace fsdplab
