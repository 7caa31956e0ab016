#include "engine/nn/llama_model.hpp"

#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "engine/nn/causal_attention.hpp"
#include "engine/nn/layers.hpp"
#include "engine/nn/model_presets.hpp"
#include "engine/runtime/error.hpp"
#include "engine/tensor/elementwise.hpp"
#include "engine/tensor/pack_qkv.hpp"
#include "engine/tensor/rmsnorm.hpp"
#include "engine/tensor/rope.hpp"
#include "engine/tensor/silu_mul.hpp"

namespace fsdplab {

// ---- config --------------------------------------------------------------------------------------

void LlamaConfig::validate() const {
  // Token ids are i32 on the device, so the vocabulary must be indexable by one; positions are
  // computed as floats for the rotary angles, exact up to 2^24.
  constexpr std::int64_t max_id = std::numeric_limits<std::int32_t>::max();
  const std::pair<const char*, std::int64_t> counts[] = {{"vocab_size", vocab_size},
                                                         {"hidden_size", hidden_size},
                                                         {"intermediate_size", intermediate_size},
                                                         {"num_hidden_layers", num_hidden_layers},
                                                         {"num_attention_heads", num_attention_heads},
                                                         {"num_key_value_heads", num_key_value_heads},
                                                         {"max_position_embeddings", max_position_embeddings}};
  for (const auto& [field, value] : counts)
    check(value > 0, "LlamaConfig.", field, ": expected a positive count, got ", value);
  check(vocab_size <= max_id, "LlamaConfig.vocab_size: expected at most ", max_id, " (token ids are i32), got ",
        vocab_size);
  check(max_position_embeddings <= (1 << 24), "LlamaConfig.max_position_embeddings: expected at most 2^24 = ",
        1 << 24, " (positions are exact f32 in the rotary angles), got ", max_position_embeddings);
  check(hidden_size % num_attention_heads == 0,
        "LlamaConfig.hidden_size: expected a multiple of num_attention_heads = ", num_attention_heads,
        " (each head takes hidden_size / num_attention_heads columns), got ", hidden_size);
  check(head_dim() % 2 == 0, "LlamaConfig: the head dimension hidden_size / num_attention_heads = ", hidden_size, " / ",
        num_attention_heads, " = ", head_dim(), " must be even (rotary embeddings rotate pairs of its columns)");
  check(num_attention_heads % num_key_value_heads == 0,
        "LlamaConfig.num_key_value_heads: expected a divisor of num_attention_heads = ", num_attention_heads,
        " (each key/value head serves the same number of query heads), got ", num_key_value_heads);
  check(rms_norm_eps > 0 && std::isfinite(rms_norm_eps), "LlamaConfig.rms_norm_eps: expected a finite value > 0, got ",
        rms_norm_eps);
  check(rope_theta > 0 && std::isfinite(rope_theta), "LlamaConfig.rope_theta: expected a finite value > 0, got ",
        rope_theta);
}

namespace {

// Meta's released Llama 2 configurations (Hugging Face's meta-llama/Llama-2-7b-hf and -70b-hf
// config.json), and a test size: 4 query heads on 2 key/value heads, so grouped-query attention is
// exercised, with a step in milliseconds on a CPU.
const std::array<ModelPreset<LlamaConfig>, 3> kLlamaPresets = {{
    {"test-tiny", {64, 32, 64, 2, 4, 2, 16, 1e-5f, 10000.f}},
    {"7b", {32000, 4096, 11008, 32, 32, 32, 4096, 1e-5f, 10000.f}},
    {"70b", {32000, 8192, 28672, 80, 64, 8, 4096, 1e-5f, 10000.f}},
}};

}  // namespace

const std::vector<std::string_view>& llama_preset_names() {
  static const std::vector<std::string_view> names = model_preset_names(kLlamaPresets);
  return names;
}

LlamaConfig llama_preset(std::string_view name) { return find_model_preset(kLlamaPresets, "llama", name); }

std::int64_t llama_parameter_count(const LlamaConfig& c) {
  const std::int64_t C = c.hidden_size, hd = c.head_dim(), H = c.num_attention_heads, KV = c.num_key_value_heads,
                     F = c.intermediate_size;
  const std::int64_t layer = C * H * hd + 2 * C * KV * hd + H * hd * C + 3 * C * F + 2 * C;
  return 2 * c.vocab_size * C + c.num_hidden_layers * layer + C;
}

// ---- the modules ---------------------------------------------------------------------------------

namespace {

constexpr float kInitStd = 0.02f;  // LlamaConfig.initializer_range
const ParamInit kLlamaWeightInit = ParamInit::normal(0, kInitStd);

// LlamaRMSNorm: weight [C], initialised to 1. Keeps its input and each row's rstd for the backward.
class LlamaRmsNorm final : public Module {
 public:
  LlamaRmsNorm(std::string name, std::int64_t features, float eps)
      : Module(std::move(name)), features_(features), eps_(eps) {
    weight_ = &register_parameter("weight", {features}, ParamInit::constant(1));
  }
  std::string_view kind() const override { return "LlamaRMSNorm"; }

  Tensor forward(RunContext& ctx, const Tensor& x) {  // [N, C] -> [N, C]
    enter_forward(ctx);
    if (!(x.ndim() == 2 && x.dim(1) == features_))
      fail(name(), ": input must be [N, ", features_, "], got ", x.describe());
    Tensor y = ctx.activation(x.shape(), name() + ".out");
    rstd_ = Tensor::empty(ctx.device, {x.dim(0)}, DType::f32, MemTag::activation, name() + ".rstd");
    rmsnorm(ctx.stream(), x, value_of(*weight_), y, rstd_, eps_);
    x_ = x;
    exit_forward(ctx);
    return y;
  }

  Tensor backward(RunContext& ctx, const Tensor& dy) {
    enter_backward(ctx);
    check(x_.defined(), name(), ": backward without a forward");
    Tensor dx = ctx.activation(x_.shape(), name() + ".dx");
    fill(ctx.stream(), dx, 0);  // rmsnorm_backward adds into dx
    add_input_gradient(ctx, dy, dx);
    exit_backward(ctx);
    return dx;
  }

  // Adds the input's gradient into dx, as LayerNorm::backward_adding_to ([Note: fused epilogues], layers.hpp).
  void backward_adding_to(RunContext& ctx, const Tensor& dy, const Tensor& dx) {
    enter_backward(ctx);
    check(x_.defined(), name(), ": backward without a forward");
    check_gradient_to_add_into(*this, x_, dx);
    add_input_gradient(ctx, dy, dx);
    exit_backward(ctx);
  }

 private:
  void add_input_gradient(RunContext& ctx, const Tensor& dy, const Tensor& dx) {
    rmsnorm_backward(ctx.stream(), dy, x_, value_of(*weight_), rstd_, dx, grad_of(*weight_));
    x_ = rstd_ = Tensor();
  }

  std::int64_t features_;
  float eps_;
  Parameter* weight_;
  Tensor x_, rstd_;
};

// self_attn: q, k, v projections, rotary embeddings on q and k, grouped-query causal attention through
// the fused attention op (k and v heads repeated into its packed layout), o_proj. Keeps the rotated q,
// k and v (not the packed, repeated copy: re-packed in backward, KV/H of the memory for k and v) and
// what the attention op keeps (causal_attention.hpp).
class LlamaAttention final : public Module {
 public:
  LlamaAttention(std::string name, const LlamaConfig& cfg)
      : Module(std::move(name)),
        n_head_(static_cast<int>(cfg.num_attention_heads)),
        n_kv_head_(static_cast<int>(cfg.num_key_value_heads)),
        theta_(cfg.rope_theta),
        q_proj_(register_module<Linear>("q_proj", cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim(), false,
                                        WeightLayout::out_in, kLlamaWeightInit, ParamInit{})),
        k_proj_(register_module<Linear>("k_proj", cfg.hidden_size, cfg.num_key_value_heads * cfg.head_dim(), false,
                                        WeightLayout::out_in, kLlamaWeightInit, ParamInit{})),
        v_proj_(register_module<Linear>("v_proj", cfg.hidden_size, cfg.num_key_value_heads * cfg.head_dim(), false,
                                        WeightLayout::out_in, kLlamaWeightInit, ParamInit{})),
        o_proj_(register_module<Linear>("o_proj", cfg.num_attention_heads * cfg.head_dim(), cfg.hidden_size, false,
                                        WeightLayout::out_in, kLlamaWeightInit, ParamInit{})),
        attention_(this->name(), static_cast<int>(cfg.num_attention_heads), cfg.attention) {}
  std::string_view kind() const override { return "LlamaAttention"; }

  // [N, C] -> [N, C]: residual + attention(x), the skip connection added by o_proj's epilogue.
  Tensor forward(RunContext& ctx, const Tensor& x, const Tensor& residual, std::int64_t B, std::int64_t T) {
    enter_forward(ctx);
    const std::int64_t C = x.dim(1);
    // Rotated in place: the projections keep their input, not their output.
    q_ = q_proj_.forward(ctx, x).reshape({B, T, C});
    rope(ctx.stream(), q_, q_, n_head_, theta_);
    k_ = k_proj_.forward(ctx, x);
    k_ = k_.reshape({B, T, k_.dim(1)});
    rope(ctx.stream(), k_, k_, n_kv_head_, theta_);
    v_ = v_proj_.forward(ctx, x);
    v_ = v_.reshape({B, T, v_.dim(1)});
    Tensor y = ctx.activation({B, T, C}, name() + ".y");
    attention_.forward(ctx, packed(ctx), y);
    Tensor out = o_proj_.forward(ctx, as_rows(y), residual);
    exit_forward(ctx);
    return out;
  }

  Tensor backward(RunContext& ctx, const Tensor& dout) {  // [N, C] -> [N, C]
    enter_backward(ctx);
    check(q_.defined(), name(), ": backward without a forward");
    Tensor dqkv;
    {
      const Tensor dy = o_proj_.backward(ctx, dout).reshape(q_.shape());
      dqkv = ctx.activation({q_.dim(0), q_.dim(1), 3 * q_.dim(2)}, name() + ".dqkv");  // written whole
      attention_.backward(ctx, dy, packed(ctx), dqkv);
    }
    // Through the packing: dk and dv sum over the query heads that shared each key/value head.
    Tensor dq = ctx.activation(q_.shape(), name() + ".dq");  // each written whole
    Tensor dk = ctx.activation(k_.shape(), name() + ".dk");
    Tensor dv = ctx.activation(v_.shape(), name() + ".dv");
    pack_qkv_backward(ctx.stream(), dqkv, dq, dk, dv, n_head_, n_kv_head_);
    dqkv = q_ = k_ = v_ = Tensor();
    // Through the rotations (in place), then the projections: x fed all three, so its gradient is the sum of
    // theirs, each added in the next one's GEMM epilogue ([Note: fused epilogues]).
    rope_backward(ctx.stream(), dq, dq, n_head_, theta_);
    rope_backward(ctx.stream(), dk, dk, n_kv_head_, theta_);
    Tensor dx = q_proj_.backward(ctx, as_rows(dq));
    dx = k_proj_.backward(ctx, as_rows(dk), dx);
    dx = v_proj_.backward(ctx, as_rows(dv), dx);
    exit_backward(ctx);
    return dx;
  }

 private:
  // q, k and v in the fused attention op's layout [B, T, 3C], key/value heads repeated: a transient.
  Tensor packed(RunContext& ctx) const {
    Tensor qkv = ctx.activation({q_.dim(0), q_.dim(1), 3 * q_.dim(2)}, name() + ".qkv");
    pack_qkv(ctx.stream(), q_, k_, v_, qkv, n_head_, n_kv_head_);
    return qkv;
  }

  int n_head_, n_kv_head_;
  float theta_;
  Linear& q_proj_;
  Linear& k_proj_;
  Linear& v_proj_;
  Linear& o_proj_;
  CausalAttention attention_;
  Tensor q_, k_, v_;
};

// mlp: down_proj(silu(gate_proj(x)) * up_proj(x)), position by position. Keeps gate and up for the
// activation's backward (down_proj keeps their product).
class LlamaMlp final : public Module {
 public:
  LlamaMlp(std::string name, const LlamaConfig& cfg)
      : Module(std::move(name)),
        gate_proj_(register_module<Linear>("gate_proj", cfg.hidden_size, cfg.intermediate_size, false,
                                           WeightLayout::out_in, kLlamaWeightInit, ParamInit{})),
        up_proj_(register_module<Linear>("up_proj", cfg.hidden_size, cfg.intermediate_size, false, WeightLayout::out_in,
                                         kLlamaWeightInit, ParamInit{})),
        down_proj_(register_module<Linear>("down_proj", cfg.intermediate_size, cfg.hidden_size, false,
                                           WeightLayout::out_in, kLlamaWeightInit, ParamInit{})) {}
  std::string_view kind() const override { return "LlamaMLP"; }

  // [N, C] -> [N, C]: residual + mlp(x), the skip connection added by down_proj's epilogue.
  Tensor forward(RunContext& ctx, const Tensor& x, const Tensor& residual) {
    enter_forward(ctx);
    gate_ = gate_proj_.forward(ctx, x);
    up_ = up_proj_.forward(ctx, x);
    Tensor h = ctx.activation(gate_.shape(), name() + ".act");
    silu_mul(ctx.stream(), gate_, up_, h);
    Tensor y = down_proj_.forward(ctx, h, residual);
    exit_forward(ctx);
    return y;
  }

  Tensor backward(RunContext& ctx, const Tensor& dy) {
    enter_backward(ctx);
    check(gate_.defined(), name(), ": backward without a forward");
    Tensor dgate = ctx.activation(gate_.shape(), name() + ".dgate");  // both written whole
    Tensor dup = ctx.activation(up_.shape(), name() + ".dup");
    silu_mul_backward(ctx.stream(), gate_, up_, down_proj_.backward(ctx, dy), dgate, dup);
    gate_ = up_ = Tensor();
    Tensor dx = gate_proj_.backward(ctx, dgate);
    dgate = Tensor();
    dx = up_proj_.backward(ctx, dup, dx);  // x fed both: the sum, in up_proj's epilogue
    exit_backward(ctx);
    return dx;
  }

 private:
  Linear& gate_proj_;
  Linear& up_proj_;
  Linear& down_proj_;
  Tensor gate_, up_;
};

// One decoder layer, pre-norm: the residual stream goes through untouched and each branch reads a
// normalised copy of it. Hugging Face registers self_attn and mlp before the two norms; so does this,
// so the state dict's order is the same.
class LlamaDecoderLayer final : public Module {
 public:
  LlamaDecoderLayer(std::string name, const LlamaConfig& cfg)
      : Module(std::move(name)),
        self_attn_(register_module<LlamaAttention>("self_attn", cfg)),
        mlp_(register_module<LlamaMlp>("mlp", cfg)),
        input_layernorm_(register_module<LlamaRmsNorm>("input_layernorm", cfg.hidden_size, cfg.rms_norm_eps)),
        post_attention_layernorm_(
            register_module<LlamaRmsNorm>("post_attention_layernorm", cfg.hidden_size, cfg.rms_norm_eps)) {}
  std::string_view kind() const override { return "LlamaDecoderLayer"; }

  // h = x + self_attn(norm(x)), y = h + mlp(norm(h)); o_proj and down_proj add the skip connections
  // ([Note: fused epilogues] in engine/nn/layers.hpp).
  Tensor forward(RunContext& ctx, const Tensor& x) {  // [B, T, C] -> [B, T, C]
    enter_forward(ctx);
    const std::int64_t B = x.dim(0), T = x.dim(1);
    Tensor h = self_attn_.forward(ctx, input_layernorm_.forward(ctx, as_rows(x)), as_rows(x), B, T);
    Tensor y = mlp_.forward(ctx, post_attention_layernorm_.forward(ctx, h), h).reshape(x.shape());
    exit_forward(ctx);
    return y;
  }

  // Each residual sum passes its gradient to both terms. The skip connection's term is dy itself, and each
  // norm adds its branch's term into it in place: dy's buffer becomes dh, then dx, and is returned.
  Tensor backward(RunContext& ctx, const Tensor& dy) {
    enter_backward(ctx);
    post_attention_layernorm_.backward_adding_to(ctx, mlp_.backward(ctx, as_rows(dy)), as_rows(dy));  // dy holds dh
    input_layernorm_.backward_adding_to(ctx, self_attn_.backward(ctx, as_rows(dy)), as_rows(dy));  // dy holds dx
    exit_backward(ctx);
    return dy;
  }

 private:
  LlamaAttention& self_attn_;
  LlamaMlp& mlp_;
  LlamaRmsNorm& input_layernorm_;
  LlamaRmsNorm& post_attention_layernorm_;
};

}  // namespace

// Hugging Face's LlamaModel: the embeddings, the decoder layers, the final norm. `layers` is a
// container, like nn.ModuleList, and is never called itself.
class LlamaDecoderStack final : public Module {
 public:
  LlamaDecoderStack(std::string name, const LlamaConfig& cfg)
      : Module(std::move(name)),
        hidden_(cfg.hidden_size),
        embed_tokens_(register_module<Embedding>("embed_tokens", cfg.vocab_size, cfg.hidden_size, kLlamaWeightInit)),
        layer_list_(register_module<ModuleList>("layers")),
        norm_(register_module<LlamaRmsNorm>("norm", cfg.hidden_size, cfg.rms_norm_eps)) {
    for (std::int64_t i = 0; i < cfg.num_hidden_layers; ++i)
      layers_.push_back(&layer_list_.append<LlamaDecoderLayer>(cfg));
  }
  std::string_view kind() const override { return "LlamaModel"; }
  Parameter& token_embedding() { return embed_tokens_.weight(); }
  void set_embedding_gradient_sink(InputEmbeddingGradientSink* sink) { embedding_sink_ = sink; }

  Tensor forward(RunContext& ctx, const Tensor& ids) {  // [B, T] i32 -> [B*T, C]
    enter_forward(ctx);
    batch_ = ids.dim(0);
    seq_ = ids.dim(1);
    Tensor x = embed_tokens_.forward(ctx, ids.reshape({batch_ * seq_})).reshape({batch_, seq_, hidden_});
    for (LlamaDecoderLayer* layer : layers_) x = layer->forward(ctx, x);
    Tensor out = norm_.forward(ctx, as_rows(x));
    exit_forward(ctx);
    return out;
  }

  void backward(RunContext& ctx, const Tensor& dout) {  // dout [B*T, C]
    enter_backward(ctx);
    Tensor dx = norm_.backward(ctx, dout).reshape({batch_, seq_, hidden_});
    for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) dx = (*it)->backward(ctx, dx);
    // dx is the gradient of embed_tokens[ids]: the table's rows take it, or a sink places it.
    const Tensor& ids = embed_tokens_.saved_ids();  // undefined without a forward: embed_tokens_.backward says so
    if (embedding_sink_ && ids.defined() &&
        embedding_sink_->take(ctx, {embed_tokens_.weight(), nullptr, ids.reshape({batch_, seq_}), dx})) {
      embed_tokens_.drop_saved_ids();
    } else {
      embed_tokens_.backward(ctx, as_rows(dx));
    }
    exit_backward(ctx);
  }

 private:
  std::int64_t hidden_;
  Embedding& embed_tokens_;
  ModuleList& layer_list_;
  LlamaRmsNorm& norm_;
  std::vector<LlamaDecoderLayer*> layers_;
  std::int64_t batch_ = 0, seq_ = 0;  // of the last forward
  InputEmbeddingGradientSink* embedding_sink_ = nullptr;
};

// ---- the model -----------------------------------------------------------------------------------

namespace {
const LlamaConfig& validated(const LlamaConfig& cfg) {
  cfg.validate();
  return cfg;
}
}  // namespace

LlamaModel::LlamaModel(const LlamaConfig& config)
    : config_(validated(config)),
      model_(register_module<LlamaDecoderStack>("model", config_)),
      lm_head_(register_module<Linear>("lm_head", config_.hidden_size, config_.vocab_size, false, WeightLayout::out_in,
                                       kLlamaWeightInit, ParamInit{})),
      loss_("llama", config_.vocab_size) {}

Tensor LlamaModel::forward(RunContext& ctx, const Batch& batch) {
  loss_.check_batch(batch, config_.max_position_embeddings, "max_position_embeddings");
  enter_forward(ctx);
  Tensor loss = loss_.forward(ctx, lm_head_.forward(ctx, model_.forward(ctx, batch.inputs)), batch.targets);
  exit_forward(ctx);
  return loss;
}

void LlamaModel::backward(RunContext& ctx) {
  loss_.expect_forward();
  enter_backward(ctx);
  Tensor dlogits = loss_.backward(ctx);
  Tensor dx = lm_head_.backward(ctx, dlogits);
  dlogits = Tensor();  // [N, V], the largest activation: gone before the layers' backward
  model_.backward(ctx, dx);
  exit_backward(ctx);
}

Model::InputEmbeddingTables LlamaModel::input_embedding_tables() { return {&model_.token_embedding(), nullptr}; }

bool LlamaModel::set_input_embedding_gradient_sink(InputEmbeddingGradientSink* sink) {
  model_.set_embedding_gradient_sink(sink);
  return true;
}

}  // namespace fsdplab
