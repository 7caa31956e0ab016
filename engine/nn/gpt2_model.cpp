#include "engine/nn/gpt2_model.hpp"

#include <array>
#include <limits>
#include <string>
#include <utility>

#include "engine/nn/causal_attention.hpp"
#include "engine/nn/counter_rng.hpp"
#include "engine/nn/layers.hpp"
#include "engine/nn/model_presets.hpp"
#include "engine/runtime/error.hpp"
#include "engine/tensor/matmul.hpp"

namespace fsdplab {

// ---- config --------------------------------------------------------------------------------------

void Gpt2Config::validate() const {
  // Token ids and positions are i32 on the device.
  constexpr std::int64_t max_id = std::numeric_limits<std::int32_t>::max();
  const std::pair<const char*, std::int64_t> counts[] = {
      {"vocab_size", vocab_size}, {"n_positions", n_positions}, {"n_embd", n_embd},
      {"n_head", n_head},         {"n_layer", n_layer},         {"vocab_multiple", vocab_multiple}};
  for (const auto& [field, value] : counts)
    check(value > 0, "Gpt2Config.", field, ": expected a positive count, got ", value);
  check(vocab_size <= max_id, "Gpt2Config.vocab_size: expected at most ", max_id, " (token ids are i32), got ",
        vocab_size);
  check(vocab_multiple <= max_id - vocab_size, "Gpt2Config.vocab_multiple: expected at most ", max_id - vocab_size,
        " (the padded vocabulary must stay indexable by i32), got ", vocab_multiple);
  check(n_positions <= max_id, "Gpt2Config.n_positions: expected at most ", max_id,
        " (the kernels count a sequence's positions in i32), got ", n_positions);
  check(n_embd % n_head == 0, "Gpt2Config.n_embd: expected a multiple of n_head = ", n_head,
        " (each head takes n_embd / n_head columns), got ", n_embd);
  check(layer_norm_epsilon > 0 && layer_norm_epsilon < std::numeric_limits<float>::infinity(),
        "Gpt2Config.layer_norm_epsilon: expected a finite value > 0, got ", layer_norm_epsilon);
}

namespace {

// Hugging Face's configs of the four released sizes, and two test sizes: tiny runs a step in
// milliseconds on a CPU, small trains visibly in seconds.
constexpr std::array<ModelPreset<Gpt2Config>, 6> kGpt2Presets = {{
    {"test-tiny", {64, 16, 32, 2, 2, 1e-5f, 64}},
    {"test-small", {256, 64, 128, 4, 4, 1e-5f, 64}},
    {"gpt2", {50257, 1024, 768, 12, 12}},
    {"gpt2-medium", {50257, 1024, 1024, 16, 24}},
    {"gpt2-large", {50257, 1024, 1280, 20, 36}},
    {"gpt2-xl", {50257, 1024, 1600, 25, 48}},
}};

}  // namespace

const std::vector<std::string_view>& gpt2_preset_names() {
  static const std::vector<std::string_view> names = model_preset_names(kGpt2Presets);
  return names;
}

Gpt2Config gpt2_preset(std::string_view name) { return find_model_preset(kGpt2Presets, "gpt2", name); }

// ---- the modules ---------------------------------------------------------------------------------

namespace {

constexpr ParamInit kGpt2WeightInit = ParamInit::normal(0, kGpt2InitStd);
constexpr ParamInit kZero = ParamInit::constant(0);
// attn.c_proj and mlp.c_proj write into the residual stream: scaled down with depth.
ParamInit residual_init(const Gpt2Config& cfg) {
  return ParamInit::normal(0, gpt2_residual_std(static_cast<int>(cfg.n_layer)));
}

// attn: c_attn projects to q, k, v side by side, the fused op attends causally per head, c_proj
// projects back. Keeps qkv, and whatever the attention op keeps (causal_attention.hpp), for its backward.
class Gpt2Attention final : public Module {
 public:
  Gpt2Attention(std::string name, const Gpt2Config& cfg)
      : Module(std::move(name)),
        attention_(this->name(), static_cast<int>(cfg.n_head), cfg.attention),
        c_attn_(register_module<Linear>("c_attn", cfg.n_embd, 3 * cfg.n_embd, true, WeightLayout::in_out,
                                        kGpt2WeightInit, kZero)),
        c_proj_(register_module<Linear>("c_proj", cfg.n_embd, cfg.n_embd, true, WeightLayout::in_out,
                                        residual_init(cfg), kZero)) {}
  std::string_view kind() const override { return "CausalSelfAttention"; }

  // [B, T, C] -> [B, T, C]: residual + attn(x), the skip connection added by c_proj's epilogue.
  Tensor forward(RunContext& ctx, const Tensor& x, const Tensor& residual) {
    enter_forward(ctx);
    const std::int64_t B = x.dim(0), T = x.dim(1), C = x.dim(2);
    qkv_ = c_attn_.forward(ctx, as_rows(x)).reshape({B, T, 3 * C});
    Tensor y = ctx.activation({B, T, C}, name() + ".y");
    attention_.forward(ctx, qkv_, y);
    Tensor out = c_proj_.forward(ctx, as_rows(y), as_rows(residual)).reshape(x.shape());
    exit_forward(ctx);
    return out;
  }

  Tensor backward(RunContext& ctx, const Tensor& dout) {
    enter_backward(ctx);
    check(qkv_.defined(), name(), ": backward without a forward");
    Tensor dy = c_proj_.backward(ctx, as_rows(dout)).reshape(dout.shape());
    Tensor dqkv = ctx.activation(qkv_.shape(), name() + ".dqkv");  // the attention's backward writes it whole
    attention_.backward(ctx, dy, qkv_, dqkv);
    qkv_ = Tensor();
    Tensor dx = c_attn_.backward(ctx, as_rows(dqkv)).reshape(dout.shape());
    exit_backward(ctx);
    return dx;
  }

 private:
  CausalAttention attention_;
  Linear& c_attn_;
  Linear& c_proj_;
  Tensor qkv_;
};

// mlp: c_proj(gelu_tanh(c_fc(x))), position by position; the GELU is c_fc's epilogue, which keeps its input
// for the backward.
class Gpt2Mlp final : public Module {
 public:
  Gpt2Mlp(std::string name, const Gpt2Config& cfg)
      : Module(std::move(name)),
        c_fc_(register_module<Linear>("c_fc", cfg.n_embd, 4 * cfg.n_embd, true, WeightLayout::in_out, kGpt2WeightInit,
                                      kZero, Activation::gelu)),
        c_proj_(register_module<Linear>("c_proj", 4 * cfg.n_embd, cfg.n_embd, true, WeightLayout::in_out,
                                        residual_init(cfg), kZero)) {}
  std::string_view kind() const override { return "MLP"; }

  // [N, C] -> [N, C]: residual + mlp(x), the skip connection added by c_proj's epilogue.
  Tensor forward(RunContext& ctx, const Tensor& x, const Tensor& residual) {
    enter_forward(ctx);
    Tensor y = c_proj_.forward(ctx, c_fc_.forward(ctx, x), residual);
    exit_forward(ctx);
    return y;
  }

  Tensor backward(RunContext& ctx, const Tensor& dy) {
    enter_backward(ctx);
    Tensor dx = c_fc_.backward(ctx, c_proj_.backward(ctx, dy));
    exit_backward(ctx);
    return dx;
  }

 private:
  Linear& c_fc_;
  Linear& c_proj_;
};

// One transformer layer, pre-LN as GPT-2: the residual stream goes through untouched and each
// branch reads a normalised copy of it.
class Gpt2Block final : public Module {
 public:
  Gpt2Block(std::string name, const Gpt2Config& cfg)
      : Module(std::move(name)),
        ln_1_(register_module<LayerNorm>("ln_1", cfg.n_embd, cfg.layer_norm_epsilon)),
        attn_(register_module<Gpt2Attention>("attn", cfg)),
        ln_2_(register_module<LayerNorm>("ln_2", cfg.n_embd, cfg.layer_norm_epsilon)),
        mlp_(register_module<Gpt2Mlp>("mlp", cfg)) {}
  std::string_view kind() const override { return "Block"; }

  // h = x + attn(ln_1(x)), y = h + mlp(ln_2(h)); each branch's last Linear adds the skip connection
  // ([Note: fused epilogues] in engine/nn/layers.hpp).
  Tensor forward(RunContext& ctx, const Tensor& x) {  // [B, T, C] -> [B, T, C]
    enter_forward(ctx);
    Tensor h = attn_.forward(ctx, ln_1_.forward(ctx, as_rows(x)).reshape(x.shape()), x);
    Tensor y = mlp_.forward(ctx, ln_2_.forward(ctx, as_rows(h)), as_rows(h)).reshape(x.shape());
    exit_forward(ctx);
    return y;
  }

  // Each residual sum passes its gradient to both terms. The skip connection's term is dy itself, and each
  // LayerNorm adds its branch's term into it in place: dy's buffer becomes dh, then dx, and is returned.
  Tensor backward(RunContext& ctx, const Tensor& dy) {
    enter_backward(ctx);
    ln_2_.backward_adding_to(ctx, mlp_.backward(ctx, as_rows(dy)), as_rows(dy));  // dy holds dh
    ln_1_.backward_adding_to(ctx, as_rows(attn_.backward(ctx, dy)), as_rows(dy));  // dy holds dx
    exit_backward(ctx);
    return dy;
  }

 private:
  LayerNorm& ln_1_;
  Gpt2Attention& attn_;
  LayerNorm& ln_2_;
  Gpt2Mlp& mlp_;
};

}  // namespace

// Hugging Face's GPT2Model: embeddings, the blocks, the final LayerNorm. `h` is a container, like nn.ModuleList,
// and is never called itself.
class Gpt2Transformer final : public Module {
 public:
  Gpt2Transformer(std::string name, const Gpt2Config& cfg)
      : Module(std::move(name)),
        n_embd_(cfg.n_embd),
        wte_(register_module<Embedding>("wte", cfg.vocab_size, cfg.n_embd, kGpt2WeightInit,
                                        cfg.padded_vocab_size() - cfg.vocab_size)),
        wpe_(register_module<Embedding>("wpe", cfg.n_positions, cfg.n_embd, kGpt2WeightInit)),
        h_(register_module<ModuleList>("h")),
        ln_f_(register_module<LayerNorm>("ln_f", cfg.n_embd, cfg.layer_norm_epsilon)) {
    for (std::int64_t i = 0; i < cfg.n_layer; ++i) blocks_.push_back(&h_.append<Gpt2Block>(cfg));
  }
  std::string_view kind() const override { return "GPT2Model"; }
  Parameter& token_embedding() { return wte_.weight(); }
  Parameter& position_embedding() { return wpe_.weight(); }
  void set_embedding_gradient_sink(InputEmbeddingGradientSink* sink) { embedding_sink_ = sink; }

  Tensor forward(RunContext& ctx, const Tensor& ids) {  // [B, T] i32 -> [B*T, C]
    enter_forward(ctx);
    batch_ = ids.dim(0);
    seq_ = ids.dim(1);
    const std::int64_t C = n_embd_;
    Tensor x = wte_.forward(ctx, ids.reshape({batch_ * seq_})).reshape({batch_, seq_, C});
    // Hugging Face adds wpe(arange(T)): every row of the batch gets the table's first T rows.
    wpe_.add_first_rows(ctx, x);
    for (Gpt2Block* block : blocks_) x = block->forward(ctx, x);
    Tensor out = ln_f_.forward(ctx, as_rows(x));
    exit_forward(ctx);
    return out;
  }

  void backward(RunContext& ctx, const Tensor& dout) {  // dout [B*T, C]
    enter_backward(ctx);
    const std::int64_t C = n_embd_;
    Tensor dx = ln_f_.backward(ctx, dout).reshape({batch_, seq_, C});
    for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) dx = (*it)->backward(ctx, dx);
    // dx is the gradient of wte[ids] + wpe[0 .. T): the tables' rows take it, or a sink places it.
    const Tensor& ids = wte_.saved_ids();  // undefined without a forward: wte_.backward says so
    if (embedding_sink_ && ids.defined() &&
        embedding_sink_->take(ctx, {wte_.weight(), &wpe_.weight(), ids.reshape({batch_, seq_}), dx})) {
      wte_.drop_saved_ids();
    } else {
      wpe_.add_first_rows_backward(ctx, dx);
      wte_.backward(ctx, as_rows(dx));
    }
    exit_backward(ctx);
  }

 private:
  std::int64_t n_embd_;
  Embedding& wte_;
  Embedding& wpe_;
  ModuleList& h_;
  LayerNorm& ln_f_;
  std::vector<Gpt2Block*> blocks_;    // h's children
  std::int64_t batch_ = 0, seq_ = 0;  // of the last forward
  InputEmbeddingGradientSink* embedding_sink_ = nullptr;
};

// lm_head: logits = x wte^T, as nn.Linear(C, V, bias=False) whose weight IS wte's. It registers no
// parameter; its weight gradient adds into wte's gradient, beside the embedding's own. The logits are
// [N, Vp], their padding columns 0 (see [Note: the padded vocabulary]).
class Gpt2LmHead final : public Module {
 public:
  Gpt2LmHead(std::string name, Parameter& tied) : Module(std::move(name)), weight_(tied) { use_parameter(tied); }
  std::string_view kind() const override { return "LMHead"; }

  Tensor forward(RunContext& ctx, const Tensor& x) {  // [N, C] -> [N, Vp]
    enter_forward(ctx);
    const Tensor& weight = value_of(weight_);
    Tensor logits = ctx.activation({x.dim(0), weight_.shape[0]}, name() + ".logits");
    matmul(ctx.stream(), x, weight, logits, {.trans_b = true});
    x_ = x;
    exit_forward(ctx);
    return logits;
  }

  Tensor backward(RunContext& ctx, const Tensor& dlogits) {
    enter_backward(ctx);
    check(x_.defined(), name(), ": backward without a forward");
    const Tensor& weight_grad = grad_of(weight_);
    // logits = x W^T: dx = dlogits W, dW += dlogits^T x.
    Tensor dx = ctx.activation(x_.shape(), name() + ".dx");
    matmul(ctx.stream(), dlogits, weight_.value, dx);
    matmul(ctx.stream(), dlogits, x_, weight_grad, {.trans_a = true, .beta = 1});
    x_ = Tensor();
    exit_backward(ctx);
    return dx;
  }

 private:
  Parameter& weight_;
  Tensor x_;
};

// ---- the model -----------------------------------------------------------------------------------

namespace {
const Gpt2Config& validated(const Gpt2Config& cfg) {
  cfg.validate();
  return cfg;
}
}  // namespace

Gpt2Model::Gpt2Model(const Gpt2Config& config)
    : config_(validated(config)),
      transformer_(register_module<Gpt2Transformer>("transformer", config_)),
      lm_head_(register_module<Gpt2LmHead>("lm_head", transformer_.token_embedding())),
      loss_("gpt2", config_.vocab_size) {}

Tensor Gpt2Model::forward(RunContext& ctx, const Batch& batch) {
  loss_.check_batch(batch, config_.n_positions, "n_positions");
  enter_forward(ctx);
  Tensor loss = loss_.forward(ctx, lm_head_.forward(ctx, transformer_.forward(ctx, batch.inputs)), batch.targets);
  exit_forward(ctx);
  return loss;
}

void Gpt2Model::backward(RunContext& ctx) {
  loss_.expect_forward();
  enter_backward(ctx);
  Tensor dlogits = loss_.backward(ctx);
  Tensor dx = lm_head_.backward(ctx, dlogits);
  dlogits = Tensor();  // [N, Vp], the largest activation: gone before the blocks' backward
  transformer_.backward(ctx, dx);
  exit_backward(ctx);
}

Model::InputEmbeddingTables Gpt2Model::input_embedding_tables() {
  return {&transformer_.token_embedding(), &transformer_.position_embedding()};
}

bool Gpt2Model::set_input_embedding_gradient_sink(InputEmbeddingGradientSink* sink) {
  transformer_.set_embedding_gradient_sink(sink);
  return true;
}

}  // namespace fsdplab
