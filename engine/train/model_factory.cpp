#include "engine/train/model_factory.hpp"

#include "engine/nn/gpt2_model.hpp"
#include "engine/nn/mlp_model.hpp"
#include "engine/nn/toy_model.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab {

BuiltModel build_model(const RunConfig& run) {
  check(run.batch >= run.world, "--batch ", run.batch, " is smaller than --world ", run.world,
        ": every rank needs at least one row");
  BuiltModel built;
  if (run.model == "toy") {
    built.model = std::make_unique<ToyModel>();
    built.config = {{"fsdplab_model", "toy"}, {"in_features", 10}, {"out_features", 5}};
    built.batch = {BatchShape::Kind::regression, run.batch, 10, 5, 0, 0};
  } else if (run.model == "mlp") {
    built.model = std::make_unique<MlpModel>(run.mlp_width, run.mlp_depth);
    built.config = {{"fsdplab_model", "mlp"}, {"width", run.mlp_width}, {"depth", run.mlp_depth}};
    built.batch = {BatchShape::Kind::regression, run.batch, run.mlp_width, run.mlp_width, 0, 0};
  } else if (run.model == "gpt2") {
    const Gpt2Config c = gpt2_preset(run.preset.empty() ? "test-tiny" : run.preset);
    const std::int64_t seq = run.seq == 0 ? c.n_positions : run.seq;
    check(seq >= 1 && seq <= c.n_positions, "--seq ", seq, " for gpt2 '", run.preset,
          "': expected 1 to the position table's ", c.n_positions, " tokens");
    built.model = std::make_unique<Gpt2Model>(c);
    // Hugging Face's GPT2Config keys, so GPT2LMHeadModel.from_pretrained(DIR) builds this model.
    built.config = {{"fsdplab_model", "gpt2"},   {"model_type", "gpt2"},
                    {"architectures", {"GPT2LMHeadModel"}},
                    {"vocab_size", c.vocab_size}, {"n_positions", c.n_positions},
                    {"n_ctx", c.n_positions},     {"n_embd", c.n_embd},
                    {"n_head", c.n_head},         {"n_layer", c.n_layer},
                    {"layer_norm_epsilon", c.layer_norm_epsilon},
                    {"activation_function", "gelu_new"},
                    {"resid_pdrop", 0.0},         {"embd_pdrop", 0.0},
                    {"attn_pdrop", 0.0},          {"tie_word_embeddings", true}};
    built.batch = {BatchShape::Kind::tokens, run.batch, 0, 0, seq, c.vocab_size};
  } else {
    fail("--model '", run.model, "'; expected toy, mlp or gpt2");
  }
  return built;
}

}  // namespace fsdplab
