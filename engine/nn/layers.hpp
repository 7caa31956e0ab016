// layers.hpp — the modules with parameters that the lab's models are built from.
//
// Each keeps what its backward needs from the last forward (as llm.c does) and drops it after the
// backward, so activation memory in the ledger rises through the forward and falls through the
// backward. forward returns a new activation; backward returns the input's gradient (a new tensor)
// and ADDS the parameters' gradients into Parameter::grad, which the caller zeroes each step.
#pragma once
#include "engine/nn/module.hpp"

namespace fsdplab {

// Where a weight's dimensions go. nn.Linear stores [out, in] and computes x @ W^T; Hugging Face's
// GPT-2 stores its Conv1D weights [in, out] and computes x @ W. Keeping each model's own layout makes
// its state dict load into the original model unchanged.
enum class WeightLayout { out_in, in_out };

// Linear and the norms work on rows: [B, T, C] -> [B*T, C], a view.
Tensor as_rows(const Tensor& x);

// PyTorch's default nn.Linear initialisation of weight and bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
ParamInit linear_default_init(std::int64_t fan_in);

class Linear final : public Module {
 public:
  Linear(std::string name, std::int64_t in, std::int64_t out, bool bias, WeightLayout layout, ParamInit weight_init,
         ParamInit bias_init);
  std::string_view kind() const override { return "Linear"; }
  Tensor forward(RunContext& ctx, const Tensor& x);  // [N, in] -> [N, out]
  Tensor backward(RunContext& ctx, const Tensor& dy);
  Parameter& weight() { return *weight_; }

 private:
  std::int64_t in_, out_;
  WeightLayout layout_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
  Tensor x_;
};

class LayerNorm final : public Module {
 public:
  LayerNorm(std::string name, std::int64_t features, float eps = 1e-5f);
  std::string_view kind() const override { return "LayerNorm"; }
  Tensor forward(RunContext& ctx, const Tensor& x);  // [N, C] -> [N, C]
  Tensor backward(RunContext& ctx, const Tensor& dy);

 private:
  std::int64_t features_;
  float eps_;
  Parameter* weight_;
  Parameter* bias_;
  Tensor x_, mean_, rstd_;
};

// A table of `count` rows of `dim`; `padding_rows` more rows of zeros may follow in storage
// (Parameter::padding_rows), which no id in [0, count) reads.
class Embedding final : public Module {
 public:
  Embedding(std::string name, std::int64_t count, std::int64_t dim, ParamInit init, std::int64_t padding_rows = 0);
  std::string_view kind() const override { return "Embedding"; }
  Tensor forward(RunContext& ctx, const Tensor& ids);  // [N] i32 -> [N, dim]
  void backward(RunContext& ctx, const Tensor& dy);    // ids have no gradient
  Parameter& weight() { return *weight_; }

 private:
  std::int64_t count_, dim_;
  Parameter* weight_;
  Tensor ids_;
};

}  // namespace fsdplab
