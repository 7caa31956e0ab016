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

// [Note: fused epilogues]
// Between two GEMMs, a transformer runs memory-bound ops: add the bias, apply GELU, add the skip connection.
// Each alone reads its input from memory and writes its output back, so a chain of them moves the same
// activation several times, one launch each. A Linear runs the ops that follow its GEMM in the GEMM's own
// epilogue (MatmulEpilogue in engine/tensor/matmul.hpp), on the f32 product before it is stored:
//   bias alone                      out = p + bias
//   bias, then GELU (GPT-2's c_fc)  pre = p + bias, out = gelu(p + bias); pre is kept for the backward
//   bias, then + residual           out = residual + (p + bias)   (the last Linear of a residual branch)
// and a LayerNorm's backward adds its input's gradient straight into the residual stream's gradient
// (LayerNorm::backward_adding_to) instead of into zeros that a separate add then sums. In GPT-2's block the
// forward's memory-bound launches (attention aside) are then the two LayerNorms, and the backward's 7
// (fsdplab bench --what kernels --device sim counts them). Llama's Linears have no bias: their residual epilogue
// is the add alone, and its RMSNorm's backward adds into the residual gradient as LayerNorm's does.
//
// The backward has one such sum of its own: an input that several Linears read (Llama's q, k and v projections
// read the same normed x, as its gate and up projections do) has the sum of their input gradients for its
// gradient. Each Linear after the first adds the sum so far in its input-gradient GEMM's residual epilogue
// (Linear::backward's dx_residual), where a separate add would read both and write the sum once more.
//
// On the cuda device the epilogue runs in cuBLASLt's GEMM kernel ([Note: the GEMM epilogue on cuBLASLt] in
// engine/cuda/cublas_matmul.cpp). The product is rounded once, after the epilogue: in f32 that is bit for bit
// the separate ops (a GEMM's f32 store, then each op's f32 sum), in bf16 it rounds once where they rounded after
// the GEMM and again after the bias.
//
// A residual add fused into the next LayerNorm (llm.c's fused_residual_forward) no longer pays here: the add
// already rides on the GEMM's epilogue at no extra pass, and the norm needs each row's mean and variance, which
// a GEMM tile holding part of a row cannot give, so the norm reads the sum back once either way.
//
// The fusions stay inside one module on purpose: under --wrap linear each Linear is its own FSDP unit, whose
// bias is gathered only between its own pre-forward and post-forward hooks, so an op that reached across
// modules (a LayerNorm reading the previous Linear's bias) would read a freed parameter. The GELU's backward
// stays its own pass (gelu_backward_in_place, one read and write of [N, 4C] a layer): cuBLASLt's DGELU epilogue
// could run it inside c_proj's input-gradient GEMM, but that GEMM would then apply c_fc's activation, reading
// c_fc's pre-activation across the two Linears; it waits for a GPU profile that shows the pass matters.

// A norm's backward_adding_to and a Linear's dx_residual: `dx`, which the input's gradient is added into (or
// added to), must have the input's shape.
void check_gradient_to_add_into(const Module& module, const Tensor& input, const Tensor& dx);

// What a Linear applies after its bias ([Note: fused epilogues]).
enum class Activation { none, gelu };

class Linear final : public Module {
 public:
  Linear(std::string name, std::int64_t in, std::int64_t out, bool bias, WeightLayout layout, ParamInit weight_init,
         ParamInit bias_init, Activation activation = Activation::none);
  std::string_view kind() const override { return "Linear"; }
  // [N, in] -> [N, out]. With a `residual` [N, out] (no activation then), returns residual + the layer's
  // output: the skip connection added in the same pass as the bias.
  Tensor forward(RunContext& ctx, const Tensor& x, const Tensor& residual = Tensor());
  // With a GELU, dy (the gradient of the GELU's output) is overwritten with the pre-activation's gradient.
  // With a `dx_residual` [N, in], returns dx_residual + the input's gradient, summed in the GEMM's epilogue: the
  // gradient of an input that other layers read too ([Note: fused epilogues]).
  Tensor backward(RunContext& ctx, const Tensor& dy, const Tensor& dx_residual = Tensor());

 private:
  std::int64_t in_, out_;
  WeightLayout layout_;
  Activation activation_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
  Tensor x_, pre_;  // the input, and the pre-activation under a GELU
};

class LayerNorm final : public Module {
 public:
  LayerNorm(std::string name, std::int64_t features, float eps = 1e-5f);
  std::string_view kind() const override { return "LayerNorm"; }
  Tensor forward(RunContext& ctx, const Tensor& x);  // [N, C] -> [N, C]
  Tensor backward(RunContext& ctx, const Tensor& dy);
  // Adds the input's gradient into dx [N, C], a gradient that already holds what reaches the input another
  // way (a residual stream's skip connection), with no zeroed buffer ([Note: fused epilogues]).
  void backward_adding_to(RunContext& ctx, const Tensor& dy, const Tensor& dx);

 private:
  void add_input_gradient(RunContext& ctx, const Tensor& dy, const Tensor& dx);

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
  // The forward's ids, saved for backward, and their end when another takes the gradient's rows (a sink).
  const Tensor& saved_ids() const { return ids_; }
  void drop_saved_ids() { ids_ = Tensor(); }
  // The lookup of ids 0 .. T-1 in every row of a batch, added to x [B, T, dim] in place: rows 0 .. T-1 of
  // the table are read where they lie, as a bias of B rows of T·dim (GPT-2's positions). One launch where
  // forward's lookup and an add would be two, and no ids and no [T, dim] output in memory.
  void add_first_rows(RunContext& ctx, const Tensor& x);
  // Its backward: the gradient of rows 0 .. T-1 gains dy [B, T, dim] summed over the batch, in one launch.
  void add_first_rows_backward(RunContext& ctx, const Tensor& dy);
  Parameter& weight() { return *weight_; }

 private:
  // Rows 0 .. T-1 of `table` (the value or the gradient) as one vector of T·dim, for x's [B, T, dim].
  Tensor first_rows_of(const Tensor& table, const Tensor& x) const;

  std::int64_t count_, dim_;
  Parameter* weight_;
  Tensor ids_;
};

}  // namespace fsdplab
