#include "engine/tensor/optimizer_ops.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/cuda/optimizer_kernels.hpp"
#include "engine/tensor/expect.hpp"
#include "engine/tensor/launch.hpp"

namespace fsdplab {
namespace {
namespace cpu {

// The factors (SgdStepFactors, AdamWStepFactors) are the kernels' too: both bodies compute each
// element with the same f32 numbers in the same order.
void sgd_update(float* param, float* buf, const float* grad, std::int64_t n, const SgdStepFactors& k) {
  for (std::int64_t i = 0; i < n; ++i) {
    float g = grad[i];
    if (k.weight_decay != 0.f) g += k.weight_decay * param[i];
    if (k.use_momentum) {
      buf[i] = k.first_step ? g : k.momentum * buf[i] + k.one_minus_dampening * g;
      g = k.nesterov ? g + k.momentum * buf[i] : buf[i];
    }
    param[i] -= k.lr * g;
  }
}

void adamw_update(float* param, float* m, float* v, const float* grad, std::int64_t n, const AdamWStepFactors& k) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    param[i] *= k.decay;
    m[i] = k.beta1 * m[i] + k.one_minus_beta1 * g;
    v[i] = k.beta2 * v[i] + k.one_minus_beta2 * g * g;
    const float denom = std::sqrt(v[i]) / k.bias_correction2_sqrt + k.eps;
    param[i] -= k.step_size * (m[i] / denom);
  }
}

}  // namespace cpu

using Operand = std::pair<std::string_view, const Tensor*>;

// Every operand an f32 tensor of param's shape, and no two overlapping: the update reads and writes
// them element by element, so aliasing would feed one's new values into another's update.
void expect_operands(std::string_view op, const std::vector<Operand>& operands) {
  const Tensor& param = *operands.front().second;
  if (!(param.defined() && param.dtype() == DType::f32))
    fail(op, ": param must be f32 (updates go to the fp32 master copy), got ",
         param.defined() ? param.describe() : "an undefined tensor");
  for (const auto& [role, t] : operands) expect_tensor(op, role, *t, param.shape(), DType::f32);
  for (std::size_t i = 0; i < operands.size(); ++i) {
    for (std::size_t j = i + 1; j < operands.size(); ++j) {
      const auto& [role_i, ti] = operands[i];
      const auto& [role_j, tj] = operands[j];
      if (ti->overlaps(*tj)) fail(op, ": ", role_i, " ", ti->describe(), " overlaps ", role_j, " ", tj->describe());
    }
  }
}

}  // namespace

void sgd_update(Stream s, const Tensor& param, const Tensor& grad, const Tensor& momentum_buf, const SgdOptions& opt,
                std::int64_t step) {
  constexpr std::string_view op = "sgd_update";
  // PyTorch's own argument checks (torch.optim.SGD.__init__); !(x >= 0) also catches NaN.
  check(opt.lr >= 0, op, ": lr must be >= 0, got ", opt.lr);
  check(opt.momentum >= 0, op, ": momentum must be >= 0, got ", opt.momentum);
  check(opt.weight_decay >= 0, op, ": weight_decay must be >= 0, got ", opt.weight_decay);
  check(!opt.nesterov || (opt.momentum > 0 && opt.dampening == 0), op,
        ": nesterov needs momentum > 0 and dampening == 0, got momentum ", opt.momentum, ", dampening ", opt.dampening);
  check(step >= 1, op, ": step counts from 1, got ", step);
  const bool use_momentum = opt.momentum != 0;
  if (use_momentum) {
    expect_operands(op, {{"param", &param}, {"grad", &grad}, {"momentum_buf", &momentum_buf}});
  } else {
    expect_operands(op, {{"param", &param}, {"grad", &grad}});
  }

  const SgdStepFactors k{static_cast<float>(opt.lr),
                         static_cast<float>(opt.weight_decay),
                         static_cast<float>(opt.momentum),
                         static_cast<float>(1 - opt.dampening),
                         use_momentum,
                         opt.nesterov,
                         step == 1};
  const double n = static_cast<double>(param.numel());
  // param read and written, grad read, the buffer read and written.
  const OpCost cost{.flops = 6 * n, .bytes = 4 * n * (use_momentum ? 5 : 3), .dtype = DType::f32};
  if (use_momentum) {
    launch_op(s, std::string(op), cost, {{&param, &grad, &momentum_buf}, {&param, &momentum_buf}},
              {.host = [&] { cpu::sgd_update(param.f32(), momentum_buf.f32(), grad.f32(), param.numel(), k); },
               .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
                 cuda::sgd_update(stream, param.f32(), momentum_buf.f32(), grad.f32(), param.numel(), k);
               })});
  } else {
    launch_op(s, std::string(op), cost, {{&param, &grad}, {&param}},
              {.host = [&] { cpu::sgd_update(param.f32(), nullptr, grad.f32(), param.numel(), k); },
               .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
                 cuda::sgd_update(stream, param.f32(), nullptr, grad.f32(), param.numel(), k);
               })});
  }
}

void adamw_update(Stream s, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWOptions& opt, std::int64_t step) {
  constexpr std::string_view op = "adamw_update";
  // PyTorch's own argument checks (torch.optim.AdamW.__init__); !(x >= 0) also catches NaN.
  check(opt.lr >= 0, op, ": lr must be >= 0, got ", opt.lr);
  check(opt.eps >= 0, op, ": eps must be >= 0, got ", opt.eps);
  check(opt.beta1 >= 0 && opt.beta1 < 1, op, ": beta1 must be in [0, 1), got ", opt.beta1);
  check(opt.beta2 >= 0 && opt.beta2 < 1, op, ": beta2 must be in [0, 1), got ", opt.beta2);
  check(opt.weight_decay >= 0, op, ": weight_decay must be >= 0, got ", opt.weight_decay);
  check(step >= 1, op, ": step counts from 1, got ", step);
  expect_operands(op, {{"param", &param}, {"grad", &grad}, {"m", &m}, {"v", &v}});

  const double t = static_cast<double>(step);
  const double bias_correction1 = 1 - std::pow(opt.beta1, t);
  const double bias_correction2 = 1 - std::pow(opt.beta2, t);
  const AdamWStepFactors k{static_cast<float>(1 - opt.lr * opt.weight_decay),
                           static_cast<float>(opt.beta1),
                           static_cast<float>(1 - opt.beta1),
                           static_cast<float>(opt.beta2),
                           static_cast<float>(1 - opt.beta2),
                           static_cast<float>(opt.lr / bias_correction1),
                           static_cast<float>(std::sqrt(bias_correction2)),
                           static_cast<float>(opt.eps)};
  const double n = static_cast<double>(param.numel());
  // param, m and v read and written, grad read.
  const OpCost cost{.flops = 14 * n, .bytes = 4 * n * 7, .dtype = DType::f32};
  launch_op(s, std::string(op), cost, {{&param, &grad, &m, &v}, {&param, &m, &v}},
            {.host = [&] { cpu::adamw_update(param.f32(), m.f32(), v.f32(), grad.f32(), param.numel(), k); },
             .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
               cuda::adamw_update(stream, param.f32(), m.f32(), v.f32(), grad.f32(), param.numel(), k);
             })});
}

}  // namespace fsdplab
