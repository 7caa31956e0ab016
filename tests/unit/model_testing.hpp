// model_testing.hpp — what the whole-model tests (Gpt2Model*, LlamaModel*) share beyond test_support.hpp:
// random batches for the tiny presets, parameters at random values of unit scale, a hook recorder, the gradient
// check against central differences of the loss, and the bf16 run's check against the f32 run.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace fsdplab::testing {

constexpr std::int64_t kB = 2, kT = 8;  // the tiny presets' batch: 16 tokens, context 16

inline void set_values(Parameter& p, const std::vector<float>& v) {
  p.value.device().synchronize();  // an op may still read the old values
  p.value.copy_from(v);
}

inline Tensor ids_tensor(Device& dev, const Shape& shape, const std::vector<std::int32_t>& ids) {
  Tensor t = Tensor::empty(dev, shape, DType::i32, MemTag::activation, "ids");
  t.copy_from(std::span<const std::int32_t>(ids));
  return t;
}

// Random tokens of a vocabulary of `vocab`: inputs [kB, kT] and targets [kB, kT], a fixed batch.
inline Batch random_batch(Device& dev, std::int64_t vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(vocab - 1));
  std::vector<std::int32_t> in(kB * kT), out(kB * kT);
  for (auto& t : in) t = token(rng);
  for (auto& t : out) t = token(rng);
  return {ids_tensor(dev, {kB, kT}, in), ids_tensor(dev, {kB, kT}, out)};
}

inline double loss_of(Model& model, RunContext& ctx, const Batch& batch) { return read(model.forward(ctx, batch))[0]; }

// Every parameter at random values of unit-ish scale rather than the models' init: there every bias is 0 and
// every norm's weight 1, so a gradient that mixed up weight and bias, or dropped a term multiplied by a bias,
// could not show; and with std 0.02 many gradients are too small for an f32 finite difference to resolve.
// A norm's weight (a 1-D `.weight`; biases are `.bias`) stays near 1, everything else near 0.
inline void randomise(Model& model, std::uint32_t seed) {
  std::mt19937 rng(seed);
  for (Parameter* p : model.parameters()) {
    std::vector<float> v(static_cast<std::size_t>(p->numel()));
    const bool norm_weight = p->shape.size() == 1 && p->name.ends_with(".weight");
    // 2-D: std 1/sqrt(smaller dimension), about what keeps activations and logits of order 1.
    const float bound =
        p->shape.size() == 2 ? std::sqrt(3.f / static_cast<float>(std::min(p->shape[0], p->shape[1]))) : 0.3f;
    std::uniform_real_distribution<float> u(-bound, bound);
    for (float& x : v) x = (norm_weight ? 1.f : 0.f) + u(rng);
    set_values(*p, v);
  }
}

// [Note: bf16 against f32]
// A bf16 run checked against the f32 run of the same model, at the same values: randomised (at the models' init
// every logit is near 0 and the loss near ln V whatever the numerics, so a bf16 path that wrote zeros would pass
// a loss check) and rounded to bf16 in both runs, so the difference is the bf16 compute's alone. bf16 keeps 8
// significant bits: each op's output is off by up to 2^-9 of itself, and the errors of the ops of a forward and
// backward add up. Measured on the sim device (test-tiny, these seeds): the loss 6.2e-4 (gpt2) and 6.9e-4 (llama)
// off, relative; the worst gradient tensor 0.9% and 2.5% of its largest f32 value off. The bounds, 4e-3 and 2^-4,
// leave room for the cuda device's other summation orders; a wrong bf16 kernel (a dropped term, a mis-scaled
// widening, zeros) is off by the gradient itself, and a bf16 run that computed in f32 would equal the f32 run:
// both are refused.
struct LossAndGradients {
  double loss = 0;
  std::vector<std::vector<float>> grads;  // in the order of Module::parameters()
};

template <class Model, class Config>
LossAndGradients randomised_loss_and_gradients(Device& dev, const Config& config, std::int64_t vocab, DType dtype) {
  Model model(config);
  materialise(model, dev, 51, dtype);
  randomise(model, 53);
  for (Parameter* p : model.parameters()) set_values(*p, rounded_to_bf16(read(p->value)));
  RunContext ctx{dev, dtype};
  LossAndGradients out;
  out.loss = loss_of(model, ctx, random_batch(dev, vocab, 52));
  model.backward(ctx);
  for (Parameter* p : model.parameters()) {
    EXPECT_EQ(p->grad.dtype(), dtype) << p->name;
    out.grads.push_back(read(p->grad));
  }
  return out;
}

// The bf16 run's loss within 4e-3 of the f32 run's, relative, but not equal to it; each gradient tensor within
// 2^-4 of the largest |value| of its f32 counterpart.
inline void expect_bf16_tracks_f32(const LossAndGradients& f32, const LossAndGradients& bf16) {
  constexpr double kLossTolerance = 4e-3, kGradientTolerance = 0.0625;
  EXPECT_NE(bf16.loss, f32.loss) << "the bf16 run computed in f32";
  EXPECT_NEAR(bf16.loss, f32.loss, kLossTolerance * std::abs(f32.loss));
  ASSERT_EQ(bf16.grads.size(), f32.grads.size());
  for (std::size_t i = 0; i < f32.grads.size(); ++i) {
    float largest = 0.f;
    for (const float g : f32.grads[i]) largest = std::max(largest, std::abs(g));
    ASSERT_GT(largest, 0.f) << "parameter " << i << " has no gradient to compare";
    double off = 0;
    for (std::size_t j = 0; j < f32.grads[i].size(); ++j)
      off = std::max(off, static_cast<double>(std::abs(bf16.grads[i][j] - f32.grads[i][j])));
    EXPECT_LE(off, kGradientTolerance * largest) << "parameter " << i;
  }
}

// The elements of each parameter, by name, that a gradient check samples.
using GradientPicks = std::map<std::string, std::set<std::int64_t>>;

// Each picked element's gradient, as the model's backward left it in p->grad, against central differences of
// the f32 loss with step h = 1e-2. The loss (about 4-5) is computed in f32, so each evaluation is off by a few
// ulps of 4.8e-7; divided by 2h, one ulp is 2.4e-5 of gradient (the numeric gradients come out in multiples of
// it). The truncation error h^2 f'''/6 is ~2e-5 for third derivatives of order 1 at these parameter scales. So
// atol 1.5e-4 (about six ulps; the observed worst is under three) + rtol 1%. A wrong formula (a missing term, a
// transposed weight, a dropped residual) is off by about the gradient itself, and every parameter must have a
// sampled gradient of at least 10 * atol, so the check has teeth everywhere.
inline void expect_gradients_match_central_differences(Model& model, RunContext& ctx, const Batch& batch,
                                                       const GradientPicks& picks) {
  constexpr double h = 1e-2, atol = 1.5e-4, rtol = 1e-2;
  for (Parameter* p : model.parameters()) {
    const std::vector<float> grad = read(p->grad);
    std::vector<float> v = read(p->value);
    double largest = 0;
    const auto picked = picks.find(p->name);
    ASSERT_TRUE(picked != picks.end()) << p->name << ": no element picked to check";
    for (std::int64_t i : picked->second) {
      const auto at = static_cast<std::size_t>(i);
      const float saved = v[at];
      v[at] = static_cast<float>(saved + h);
      set_values(*p, v);
      const double plus = loss_of(model, ctx, batch);
      v[at] = static_cast<float>(saved - h);
      set_values(*p, v);
      const double minus = loss_of(model, ctx, batch);
      v[at] = saved;
      set_values(*p, v);
      const double numeric = (plus - minus) / (2 * h);
      largest = std::max(largest, std::abs(numeric));
      EXPECT_NEAR(grad[at], numeric, atol + rtol * std::abs(numeric)) << p->name << "[" << i << "]";
    }
    EXPECT_GT(largest, 10 * atol) << p->name << ": no sampled gradient large enough to test";
  }
}

// Records each hook call with the live activation bytes at that moment.
struct HookRecorder : ModuleHooks {
  std::vector<std::string> calls;
  std::vector<std::int64_t> live;
  void note(const char* what, Module& m, RunContext& ctx) {
    calls.push_back(std::string(what) + " " + m.name());
    live.push_back(ctx.device.ledger().live(MemTag::activation));
  }
  void pre_forward(Module& m, RunContext& ctx) override { note("pre_forward", m, ctx); }
  void post_forward(Module& m, RunContext& ctx) override { note("post_forward", m, ctx); }
  void pre_backward(Module& m, RunContext& ctx) override { note("pre_backward", m, ctx); }
  void post_backward(Module& m, RunContext& ctx) override { note("post_backward", m, ctx); }
};

}  // namespace fsdplab::testing
