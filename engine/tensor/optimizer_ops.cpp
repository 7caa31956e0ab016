#include "engine/tensor/optimizer_ops.hpp"

#include <algorithm>
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

void clip_grad_with_norm(float* grad, std::int64_t n, float squared_norm, float max_norm) {
  const float coef = clip_coefficient(squared_norm, max_norm);
  for (std::int64_t i = 0; i < n; ++i) grad[i] *= coef;
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

using UpdateOperand = std::pair<std::string, const Tensor*>;

// Every operand of a parameter's update an f32 tensor of its param's (the first operand's) shape.
void expect_shapes(std::string_view op, const std::vector<UpdateOperand>& operands) {
  const auto& [param_role, param] = operands.front();
  if (!(param->defined() && param->dtype() == DType::f32))
    fail(op, ": ", param_role, " must be f32 (updates go to the fp32 master copy), got ",
         param->describe());
  for (const auto& [role, t] : operands) expect_tensor(op, role, *t, param->shape(), DType::f32);
}

// No two operands overlapping: the updates read and write them element by element, so aliasing would feed
// one's new values into another's update. Sorted by where they start, an overlap shows between neighbours.
void expect_no_overlap(std::string_view op, std::vector<UpdateOperand> operands) {
  std::erase_if(operands, [](const UpdateOperand& o) { return o.second->numel() == 0; });
  const auto start = [](const UpdateOperand& o) {
    const Access a = o.second->access();
    return std::pair(a.block, a.offset);
  };
  std::sort(operands.begin(), operands.end(),
            [&](const UpdateOperand& a, const UpdateOperand& b) { return start(a) < start(b); });
  for (std::size_t i = 1; i < operands.size(); ++i) {
    const auto& [role_a, a] = operands[i - 1];
    const auto& [role_b, b] = operands[i];
    if (a->overlaps(*b)) fail(op, ": ", role_a, " ", a->describe(), " overlaps ", role_b, " ", b->describe());
  }
}

void expect_operands(std::string_view op, const std::vector<UpdateOperand>& operands) {
  expect_shapes(op, operands);
  expect_no_overlap(op, operands);
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
  const AdamWOperands one[] = {{"", param, grad, m, v}};
  adamw_update(s, one, opt, step);
}

void adamw_update(Stream s, std::span<const AdamWOperands> each, const AdamWOptions& opt, std::int64_t step) {
  constexpr std::string_view op = "adamw_update";
  // PyTorch's own argument checks (torch.optim.AdamW.__init__); !(x >= 0) also catches NaN.
  check(opt.lr >= 0, op, ": lr must be >= 0, got ", opt.lr);
  check(opt.eps >= 0, op, ": eps must be >= 0, got ", opt.eps);
  check(opt.beta1 >= 0 && opt.beta1 < 1, op, ": beta1 must be in [0, 1), got ", opt.beta1);
  check(opt.beta2 >= 0 && opt.beta2 < 1, op, ": beta2 must be in [0, 1), got ", opt.beta2);
  check(opt.weight_decay >= 0, op, ": weight_decay must be >= 0, got ", opt.weight_decay);
  check(step >= 1, op, ": step counts from 1, got ", step);
  std::vector<UpdateOperand> all;
  std::vector<const Tensor*> reads, writes;
  double n = 0;
  for (const AdamWOperands& e : each) {
    const std::string of = e.name.empty() ? "" : e.name + "'s ";
    const std::vector<UpdateOperand> operands = {
        {of + "param", &e.param}, {of + "grad", &e.grad}, {of + "m", &e.m}, {of + "v", &e.v}};
    expect_shapes(op, operands);
    all.insert(all.end(), operands.begin(), operands.end());
    reads.insert(reads.end(), {&e.param, &e.grad, &e.m, &e.v});
    writes.insert(writes.end(), {&e.param, &e.m, &e.v});
    n += static_cast<double>(e.param.numel());
  }
  expect_no_overlap(op, std::move(all));

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
  // param, m and v read and written, grad read.
  const OpCost cost{.flops = 14 * n, .bytes = 4 * n * 7, .dtype = DType::f32};
  launch_op(s, std::string(op), cost, {std::move(reads), std::move(writes)},
            {.host =
                 [&] {
                   for (const AdamWOperands& e : each)
                     cpu::adamw_update(e.param.f32(), e.m.f32(), e.v.f32(), e.grad.f32(), e.param.numel(), k);
                 },
             .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
               std::vector<AdamWPointers> pointers;
               for (const AdamWOperands& e : each)
                 pointers.push_back({e.param.f32(), e.m.f32(), e.v.f32(), e.grad.f32(), e.param.numel()});
               cuda::adamw_update(stream, pointers.data(), static_cast<std::int64_t>(pointers.size()), k);
             })});
}

void clip_grad_with_norm(Stream s, const Tensor& grad, const Tensor& squared_norm, double max_norm) {
  constexpr std::string_view op = "clip_grad_with_norm";
  check(max_norm > 0 && std::isfinite(max_norm), op, ": max_norm must be finite and > 0, got ", max_norm);
  expect_tensor(op, "grad", grad, grad.shape(), DType::f32);
  expect_scalar_f32(op, "squared_norm", squared_norm);
  expect_no_overlap(op, {{"grad", &grad}, {"squared_norm", &squared_norm}});
  const auto max_norm_f32 = static_cast<float>(max_norm);
  const double n = static_cast<double>(grad.numel());
  const OpCost cost{.flops = n, .bytes = 8 * n + 4, .dtype = DType::f32};
  launch_op(s, std::string(op), cost, {{&grad, &squared_norm}, {&grad}},
            {.host = [&] { cpu::clip_grad_with_norm(grad.f32(), grad.numel(), squared_norm.f32()[0], max_norm_f32); },
             .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
               cuda::clip_grad_with_norm(stream, grad.f32(), grad.numel(), squared_norm.f32(), max_norm_f32);
             })});
}

}  // namespace fsdplab
