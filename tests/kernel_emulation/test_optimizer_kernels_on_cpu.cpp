// The optimizer kernels' own source (engine/cuda/optimizer_kernels.cu), run on the CPU by
// cuda_threads_on_cpu.hpp: the multi-tensor AdamW launch finds each block's parameter and chunk from the chunks'
// running sums, over parameters of every size, more of them than one launch takes. Each element must come out
// as the plain loop below computes it, bit for bit (the kernel's rounded intrinsics are the host's operations).
#include "cuda_threads_on_cpu.hpp"

#include "optimizer_kernels_on_cpu.inc"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace fsdplab
