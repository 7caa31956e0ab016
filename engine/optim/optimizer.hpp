// optimizer.hpp — SGD and AdamW over flat f32 buffers, holding their state.
//
// An optimizer is given (parameter, gradient) pairs of flat f32 tensors: the whole parameters for
// the single-rank baseline, this rank's FlatParameter shards under FSDP. Its state (momentum, Adam's
// m and v) is allocated beside each pair, tagged optim_state, so under FSDP it is sharded for free:
// a rank only ever sees its own shard. The update formulas are PyTorch's (tensor/optimizer_ops.hpp).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/tensor/optimizer_ops.hpp"

namespace fsdplab {

struct OptimTarget {
  std::string name;  // for messages and checkpoints
  Tensor param;      // f32
  Tensor grad;       // f32, same shape
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every target on `stream`; the first call is step 1. The targets go in their order, as
  // few ops as the optimizer can (AdamW: one), or one by one in the order the last order_next_step() gave.
  void step(Stream stream);
  // Host calls around each target's update: `before(i)` just before target i's update is issued, `after(i)`
  // just after. FSDP makes the stream wait for that unit's gradient reduction alone before, and may
  // start a gather after (see [Note: per-unit optimizer steps] in engine/fsdp/unit_lifecycle.cpp).
  struct UpdateHooks {
    std::function<void(std::size_t)> before, after;
  };
  // The next step() only: update the targets in `order` (every index once), with `hooks` around each.
  void order_next_step(std::vector<std::size_t> order, UpdateHooks hooks);
  std::int64_t steps() const { return steps_; }
  virtual std::string_view name() const = 0;
  const std::vector<OptimTarget>& targets() const { return targets_; }

  // For checkpoints (engine/train/training_checkpoint.hpp). The state tensors of target `target`, by
  // PyTorch's names (Sgd: "momentum_buffer" when momentum is not 0, else none; AdamW: "exp_avg",
  // "exp_avg_sq"); they share storage with the optimizer, so writing into them restores its state.
  // Before step 1 their contents are undefined (SGD initialises its buffer on step 1).
  struct StateTensor {
    std::string name;
    Tensor tensor;
  };
  virtual std::vector<StateTensor> state(std::size_t target) const = 0;
  // Every hyper-parameter, by PyTorch's name (a bool as 0 or 1): what a resumed run must match.
  virtual std::map<std::string, double> hyper_parameters() const = 0;
  // Continues from `steps` completed steps: the next step() is step steps + 1 (PyTorch's state['step']).
  void restore_steps(std::int64_t steps);

 protected:
  explicit Optimizer(std::vector<OptimTarget> targets);
  // The update of `targets` (indices into targets_, in order), as one op where the optimizer can.
  virtual void update(Stream stream, std::span<const std::size_t> targets, std::int64_t step) = 0;
  std::vector<OptimTarget> targets_;

 private:
  std::int64_t steps_ = 0;
  std::vector<std::size_t> next_order_;  // empty: the targets' own order
  UpdateHooks next_hooks_;
};

class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<OptimTarget> targets, SgdOptions options);
  std::string_view name() const override { return "sgd"; }
  std::vector<StateTensor> state(std::size_t target) const override;
  std::map<std::string, double> hyper_parameters() const override;

 private:
  void update(Stream stream, std::span<const std::size_t> targets, std::int64_t step) override;
  SgdOptions options_;
  std::vector<Tensor> momentum_;  // empty when momentum is 0
};

class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<OptimTarget> targets, AdamWOptions options);
  std::string_view name() const override { return "adamw"; }
  std::vector<StateTensor> state(std::size_t target) const override;
  std::map<std::string, double> hyper_parameters() const override;

 private:
  void update(Stream stream, std::span<const std::size_t> targets, std::int64_t step) override;
  AdamWOptions options_;
  std::vector<Tensor> m_, v_;
};

// What a run asks for: "sgd" (with `momentum`) or "adamw", with learning rate `lr` and every other
// hyper-parameter at PyTorch's default.
struct OptimizerSpec {
  std::string name = "adamw";
  double lr = 1e-3;
  double momentum = 0;  // sgd only
};

// The optimizer `spec` names over `targets`. An unknown name, or momentum other than 0 for adamw, is
// an Error.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, std::vector<OptimTarget> targets);
// The f32 states the optimizer keeps per parameter element (k in the memory model): adamw 2 (exp_avg,
// exp_avg_sq), sgd with momentum 1, sgd 0.
int optimizer_state_count(const OptimizerSpec& spec);

}  // namespace fsdplab
