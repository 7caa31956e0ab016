// activation_peak.hpp — the activation peak of one forward and backward of a language model, measured by the
// device's ledger, for the tests that hold it against the analytic activation count (engine/nn/activation_memory.cpp)
// to the byte.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/nn/model.hpp"
#include "engine/tensor/elementwise.hpp"
#include "test_support.hpp"

namespace fsdplab::testing {

// One forward and backward of Model(config) over a B x T batch on `dev` (a fresh device: its ledger's peak is
// the run's). Parameters are tagged param_full and gradients grad_full, so the activation tag holds the batch
// and what the model keeps, as in a training step. A dry run allocates the same and computes nothing.
template <class Model, class Config>
std::int64_t measured_activation_peak(Device& dev, const Config& config, std::int64_t B, std::int64_t T,
                                      DType dtype) {
  const bool dry = dev.dry_run();
  dev.set_keep_op_log(false);
  Model model(config);
  for (Parameter* p : model.parameters()) {
    p->value = Tensor::empty(dev, p->shape, dtype, MemTag::param_full, p->name);
    p->grad = Tensor::empty(dev, p->shape, dtype, MemTag::grad_full, p->name + ".grad");
    if (!dry) {
      fill(compute(dev), p->value, 0.01f);
      fill(compute(dev), p->grad, 0);
    }
  }
  RunContext ctx{dev, dtype};
  const Batch batch{Tensor::empty(dev, {B, T}, DType::i32, MemTag::activation, "input ids"),
                    Tensor::empty(dev, {B, T}, DType::i32, MemTag::activation, "target ids")};
  if (!dry) {
    const std::vector<std::int32_t> ids(static_cast<std::size_t>(B * T), 1);
    batch.inputs.copy_from(std::span<const std::int32_t>(ids));
    batch.targets.copy_from(std::span<const std::int32_t>(ids));
  }
  { const Tensor loss = model.forward(ctx, batch); model.backward(ctx); }
  dev.synchronize();
  return dev.ledger().peak(MemTag::activation);
}

template <class Model, class Config>
std::int64_t dry_run_activation_peak(const Config& config, std::int64_t B, std::int64_t T, DType dtype) {
  return measured_activation_peak<Model>(*make_sim_device(0, {.dry_run = true}), config, B, T, dtype);
}

// A test on each device of Model's activation peak: measured(...) runs it on a fresh device of the test's kind.
template <class Model>
class ActivationPeakTest : public OnEachDevice {
 protected:
  template <class Config>
  std::int64_t measured(const Config& config, std::int64_t B, std::int64_t T, DType dtype) const {
    return measured_activation_peak<Model>(*device(), config, B, T, dtype);
  }
};

}  // namespace fsdplab::testing
