// The optimizer kernels' own source (engine/cuda/optimizer_kernels.cu), run on the CPU by
// cuda_threads_on_cpu.hpp: the multi-tensor AdamW launch finds each block's parameter and chunk from the chunks'
// running sums, over parameters of every size, more of them than one launch takes; SGD's step, in each of its
// variants (weight decay, momentum's first and later steps, dampening, Nesterov), over more elements than a block
// takes, touching no momentum buffer without momentum; gradient-norm clipping's scale. Each element must come out as
// the host's loop computes it (copied below), bit for bit (the kernels' rounded intrinsics are the host's operations).
#include "cuda_threads_on_cpu.hpp"

#include "optimizer_kernels_on_cpu.inc"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "float_tensors_on_cpu.hpp"

namespace fsdplab {
namespace {

struct Parameter {
  std::vector<float> param, m, v, grad;
};

Parameter random_parameter(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Parameter p{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
  for (std::size_t i = 0; i < n; ++i) {
    p.param[i] = u(rng);
    p.m[i] = 0.1f * u(rng);
    p.v[i] = 0.01f * std::abs(u(rng));
    p.grad[i] = 2 * u(rng);
  }
  return p;
}

// torch.optim.AdamW's element update in the kernel's order of f32 operations.
void adamw_reference(Parameter& p, const AdamWStepFactors& k) {
  for (std::size_t i = 0; i < p.param.size(); ++i) {
    const float g = p.grad[i];
    const float decayed = p.param[i] * k.decay;
    p.m[i] = k.beta1 * p.m[i] + k.one_minus_beta1 * g;
    p.v[i] = k.beta2 * p.v[i] + k.one_minus_beta2 * g * g;
    const float denom = std::sqrt(p.v[i]) / k.bias_correction2_sqrt + k.eps;
    p.param[i] = decayed - k.step_size * (p.m[i] / denom);
  }
}

TEST(OptimizerKernelsOnCpu, AdamWOfManyParametersUpdatesEveryElementOnceAsTheLoopDoes) {
  // Sizes around the kernel's 4096-element chunk, an empty parameter, and more parameters than one launch holds.
  std::vector<std::size_t> sizes = {4096, 4097, 1, 0, 10000, 3};
  for (std::size_t i = 0; i < 70; ++i) sizes.push_back(17 * i + 5);
  ASSERT_GT(sizes.size(), static_cast<std::size_t>(cuda::kAdamWTensorsPerLaunch));
  const AdamWStepFactors k{0.9999f, 0.8f, 0.2f, 0.95f, 0.05f, 3e-3f, 0.5f, 1e-6f};
  std::vector<Parameter> on_gpu, expected;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    on_gpu.push_back(random_parameter(sizes[i], static_cast<std::uint32_t>(i)));
    expected.push_back(on_gpu.back());
    adamw_reference(expected.back(), k);
  }
  std::vector<AdamWPointers> each;
  for (Parameter& p : on_gpu)
    each.push_back({p.param.data(), p.m.data(), p.v.data(), p.grad.data(), static_cast<std::int64_t>(p.param.size())});
  cuda::adamw_update(nullptr, each.data(), static_cast<std::int64_t>(each.size()), k);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i) + " of " + std::to_string(sizes[i]) + " elements");
    EXPECT_EQ(on_gpu[i].param, expected[i].param);
    EXPECT_EQ(on_gpu[i].m, expected[i].m);
    EXPECT_EQ(on_gpu[i].v, expected[i].v);
  }
}

// optimizer_ops.cpp's host loop for SGD, operation for operation.
void sgd_reference(std::vector<float>& param, std::vector<float>& buf, const std::vector<float>& grad,
                   const SgdStepFactors& k) {
  for (std::size_t i = 0; i < param.size(); ++i) {
    float g = grad[i];
    if (k.weight_decay != 0.f) g += k.weight_decay * param[i];
    if (k.use_momentum) {
      buf[i] = k.first_step ? g : k.momentum * buf[i] + k.one_minus_dampening * g;
      g = k.nesterov ? g + k.momentum * buf[i] : buf[i];
    }
    param[i] -= k.lr * g;
  }
}

TEST(OptimizerKernelsOnCpu, SgdUpdatesEveryElementAsTheHostLoopDoesBitForBit) {
  struct Variant {
    const char* name;
    SgdStepFactors k;
  };
  // {lr, weight_decay, momentum, 1 - dampening, use_momentum, nesterov, first_step}, as sgd_update's front-end
  // rounds them from torch.optim.SGD's options.
  const Variant variants[] = {
      {"plain", {0.1f, 0.f, 0.f, 1.f, false, false, true}},
      {"weight decay", {0.05f, 0.01f, 0.f, 1.f, false, false, false}},
      {"momentum's first step", {0.1f, 1e-3f, 0.9f, 0.75f, true, false, true}},
      {"momentum with dampening", {0.1f, 1e-3f, 0.9f, 0.75f, true, false, false}},
      {"nesterov", {0.1f, 0.f, 0.9f, 1.f, true, true, false}},
  };
  for (const Variant& variant : variants) {
    SCOPED_TRACE(variant.name);
    // One element; a block's 256 threads and a few more; many blocks.
    for (const std::size_t n : {std::size_t{1}, std::size_t{300}, std::size_t{4099}}) {
      SCOPED_TRACE("n " + std::to_string(n));
      Parameter p = random_parameter(n, static_cast<std::uint32_t>(n));
      // The momentum buffer from an earlier step (p.m's values); without momentum, NaN that must stay NaN.
      std::vector<float> buf =
          variant.k.use_momentum ? p.m : std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
      std::vector<float> want_param = p.param, want_buf = buf;
      sgd_reference(want_param, want_buf, p.grad, variant.k);
      // Without momentum the launcher may be given no buffer at all (the front-end passes none); "weight decay"
      // gets one, which it must leave alone.
      float* buf_pointer = !variant.k.use_momentum && variant.k.weight_decay == 0.f ? nullptr : buf.data();
      cuda::sgd_update(nullptr, p.param.data(), buf_pointer, p.grad.data(), static_cast<std::int64_t>(n), variant.k);
      EXPECT_TRUE(emulated::same_bits(p.param, want_param));
      EXPECT_TRUE(emulated::same_bits(buf, want_buf));
    }
  }
}

// Gradient-norm clipping's scale: every element times the coefficient the host computes from the same squared norm
// (clip_coefficient, shared), bit for bit; a coefficient that clamps to 1 leaves the gradient's bits, and a NaN norm
// makes every element NaN.
TEST(OptimizerKernelsOnCpu, ClipScalesEveryElementByTheHostsCoefficientBitForBit) {
  struct Variant {
    const char* name;
    float squared_norm, max_norm;
  };
  const Variant variants[] = {
      {"clipped", 7.3f, 0.5f}, {"within the limit", 0.09f, 1.f}, {"NaN norm", std::nanf(""), 1.f}};
  for (const Variant& variant : variants) {
    SCOPED_TRACE(variant.name);
    for (const std::size_t n : {std::size_t{1}, std::size_t{300}, std::size_t{4099}}) {
      SCOPED_TRACE("n " + std::to_string(n));
      std::vector<float> grad = random_parameter(n, static_cast<std::uint32_t>(n) + 7).grad;
      std::vector<float> want = grad;
      const float coef = clip_coefficient(variant.squared_norm, variant.max_norm);
      for (float& g : want) g *= coef;
      const float squared_norm = variant.squared_norm;  // the kernel reads it from "device" memory
      cuda::clip_grad_with_norm(nullptr, grad.data(), static_cast<std::int64_t>(n), &squared_norm, variant.max_norm);
      EXPECT_TRUE(emulated::same_bits(grad, want));
    }
  }
  EXPECT_EQ(clip_coefficient(0.09f, 1.f), 1.f);
  EXPECT_TRUE(std::isnan(clip_coefficient(std::nanf(""), 1.f)));
  EXPECT_LT(clip_coefficient(7.3f, 0.5f), 0.5f / 2.7f);
}

}  // namespace
}  // namespace fsdplab
