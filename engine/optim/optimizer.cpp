#include "engine/optim/optimizer.hpp"

#include <utility>

#include "engine/runtime/error.hpp"
#include "engine/tensor/elementwise.hpp"

namespace fsdplab {
namespace {

// A zeroed state tensor beside `t` (in host memory when `t` is: CPU offload), on the stream the updates
// will run on.
Tensor zeroed_state(const Tensor& t, const std::string& name, Stream stream) {
  Tensor state = Tensor::empty(t.device(), t.shape(), DType::f32, MemTag::optim_state, name, t.storage().stream());
  fill(stream, state, 0);
  return state;
}

}  // namespace

Optimizer::Optimizer(std::vector<OptimTarget> targets) : targets_(std::move(targets)) {
  for (const OptimTarget& t : targets_) {
    check(t.param.dtype() == DType::f32 && t.grad.dtype() == DType::f32 && t.param.shape() == t.grad.shape(),
          "optimizer target '", t.name, "': expected f32 parameter and gradient of one shape, got ",
          t.param.describe(), " and ", t.grad.describe());
  }
}

void Optimizer::step(Stream stream) {
  ++steps_;
  std::vector<std::size_t> order = std::exchange(next_order_, {});
  const UpdateHooks hooks = std::exchange(next_hooks_, {});
  if (order.empty()) {
    for (std::size_t i = 0; i < targets_.size(); ++i) order.push_back(i);
    update(stream, order, steps_);
    return;
  }
  for (const std::size_t i : order) {
    if (hooks.before) hooks.before(i);
    update(stream, std::span(&i, 1), steps_);
    if (hooks.after) hooks.after(i);
  }
}

void Optimizer::order_next_step(std::vector<std::size_t> order, UpdateHooks hooks) {
  std::vector<bool> seen(targets_.size(), false);
  for (const std::size_t i : order) {
    check(i < targets_.size() && !seen[i], name(), ": update order names target ", i, " twice or out of range; ",
          "expected each of the ", targets_.size(), " targets once");
    seen[i] = true;
  }
  check(order.size() == targets_.size(), name(), ": update order names ", order.size(), " of ", targets_.size(),
        " targets; expected each once");
  next_order_ = std::move(order);
  next_hooks_ = std::move(hooks);
}

void Optimizer::restore_steps(std::int64_t steps) {
  check(steps >= 0, name(), ": ", steps, " completed steps; expected >= 0");
  steps_ = steps;
}

Sgd::Sgd(std::vector<OptimTarget> targets, SgdOptions options) : Optimizer(std::move(targets)), options_(options) {
  if (options_.momentum != 0) {
    for (const OptimTarget& t : targets_) {
      // sgd_update initialises the buffer on step 1, so it needs no zeroing.
      momentum_.push_back(Tensor::empty(t.param.device(), t.param.shape(), DType::f32, MemTag::optim_state,
                                        t.name + ".momentum_buffer", t.param.storage().stream()));
    }
  }
}

void Sgd::update(Stream stream, std::span<const std::size_t> targets, std::int64_t step) {
  for (const std::size_t i : targets) {
    const OptimTarget& t = targets_[i];
    sgd_update(stream, t.param, t.grad, momentum_.empty() ? Tensor() : momentum_[i], options_, step);
  }
}

std::vector<Optimizer::StateTensor> Sgd::state(std::size_t target) const {
  if (momentum_.empty()) return {};
  return {{"momentum_buffer", momentum_.at(target)}};
}

std::map<std::string, double> Sgd::hyper_parameters() const {
  return {{"lr", options_.lr},
          {"momentum", options_.momentum},
          {"dampening", options_.dampening},
          {"weight_decay", options_.weight_decay},
          {"nesterov", options_.nesterov ? 1.0 : 0.0}};
}

AdamW::AdamW(std::vector<OptimTarget> targets, AdamWOptions options)
    : Optimizer(std::move(targets)), options_(options) {
  for (const OptimTarget& t : targets_) {
    // Zeroed where the updates run: the compute stream, or the host for offloaded parameters.
    const Stream stream =
        t.param.device().stream(t.param.storage().stream() == Lane::host ? Lane::host : Lane::compute);
    m_.push_back(zeroed_state(t.param, t.name + ".exp_avg", stream));
    v_.push_back(zeroed_state(t.param, t.name + ".exp_avg_sq", stream));
  }
}

void AdamW::update(Stream stream, std::span<const std::size_t> targets, std::int64_t step) {
  std::vector<AdamWOperands> each;
  for (const std::size_t i : targets)
    each.push_back({targets_[i].name, targets_[i].param, targets_[i].grad, m_[i], v_[i]});
  adamw_update(stream, each, options_, step);
}

std::vector<Optimizer::StateTensor> AdamW::state(std::size_t target) const {
  return {{"exp_avg", m_.at(target)}, {"exp_avg_sq", v_.at(target)}};
}

std::map<std::string, double> AdamW::hyper_parameters() const {
  return {{"lr", options_.lr},
          {"beta1", options_.beta1},
          {"beta2", options_.beta2},
          {"eps", options_.eps},
          {"weight_decay", options_.weight_decay}};
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, std::vector<OptimTarget> targets) {
  if (spec.name == "sgd")
    return std::make_unique<Sgd>(std::move(targets), SgdOptions{.lr = spec.lr, .momentum = spec.momentum});
  check(spec.momentum == 0, "--momentum ", spec.momentum, " is SGD's; adamw has betas");
  if (spec.name == "adamw") return std::make_unique<AdamW>(std::move(targets), AdamWOptions{.lr = spec.lr});
  fail("unknown optimizer '", spec.name, "'; expected sgd or adamw");
}

int optimizer_state_count(const OptimizerSpec& spec) {
  if (spec.name == "adamw") return 2;
  if (spec.name == "sgd") return spec.momentum != 0 ? 1 : 0;
  fail("unknown optimizer '", spec.name, "'; expected sgd or adamw");
}

}  // namespace fsdplab
