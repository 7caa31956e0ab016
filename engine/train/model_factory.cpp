#include "engine/train/model_factory.hpp"

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "engine/nn/gpt2_model.hpp"
#include "engine/nn/llama_model.hpp"
#include "engine/nn/mlp_model.hpp"
#include "engine/nn/toy_model.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

// The shortest decimal that reads back as `value`, so 1e-5f is written 1e-05 as Python writes it,
// not 9.999999747378752e-06.
double shortest_decimal(float value) {
  for (int digits = 6; digits < 9; ++digits) {
    char text[32];
    std::snprintf(text, sizeof text, "%.*g", digits, static_cast<double>(value));
    if (std::strtof(text, nullptr) == value) return std::strtod(text, nullptr);
  }
  return value;
}

// What config.json says of the model's identity and settings; the caller adds what else Hugging Face reads.
nlohmann::json config_of(const BuiltModel& built) {
  nlohmann::json config = built.identity;
  for (const ModelSetting& s : built.settings) config[s.key] = s.value;
  return config;
}

// The modules --wrap makes units of, given the model's blocks.
std::vector<std::string> wrap_policy(const RunConfig& run, const std::vector<std::string>& blocks) {
  // Every Linear and Embedding; gpt2's wte is tied to its LM head, so only its wpe.
  const std::vector<std::string> linear = run.model == "gpt2" ? std::vector<std::string>{"Linear", "transformer.wpe"}
                                                              : std::vector<std::string>{"Linear", "Embedding"};
  if (run.wrap == "block") return blocks;
  if (run.wrap == "linear") return linear;
  if (run.wrap == "model") return {};
  if (run.wrap == "nested") {
    check(run.model == "gpt2" || run.model == "llama" || run.model == "mlp", "--wrap nested for --model ", run.model,
          ": its blocks are single layers already, so there is nothing to nest; use block or linear");
    std::vector<std::string> both = blocks;
    both.insert(both.end(), linear.begin(), linear.end());
    return both;
  }
  fail("--wrap '", run.wrap, "'; expected block (a unit per transformer block), linear (per Linear and Embedding), ",
       "nested (both) or model (one unit)");
}

}  // namespace

std::string seed_text_problem(std::string_view text) {
  std::uint64_t seed = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seed);
  if (!text.empty() && error == std::errc() && end == text.data() + text.size()) return "";
  return "'" + std::string(text) + "' is not a seed; expected a whole number from 0 to 18446744073709551615";
}

std::span<const std::string_view> wrap_names() {
  static constexpr std::string_view kWrapNames[] = {"block", "linear", "nested", "model"};
  return kWrapNames;
}

bool model_has_named_sizes(std::string_view model) { return model == "gpt2" || model == "llama"; }

BuiltModel build_model(const RunConfig& run) {
  // Options only some models read are refused elsewhere, not ignored without a word (an unknown model is
  // named as such further down).
  const bool named_sizes = model_has_named_sizes(run.model);
  const bool known = named_sizes || run.model == "toy" || run.model == "mlp";
  check(!known || run.preset.empty() || named_sizes, "--preset '", run.preset, "' for --model ", run.model,
        ": only gpt2 and llama have named sizes; ",
        run.model == "mlp" ? "mlp's size is its width and depth" : "the model has one size");
  const RunConfig defaults;
  const bool width = run.mlp_width != defaults.mlp_width, depth = run.mlp_depth != defaults.mlp_depth;
  check(!known || run.model == "mlp" || !(width || depth), width ? "--mlp-width " + std::to_string(run.mlp_width) : "",
        width && depth ? " and " : "", depth ? "--mlp-depth " + std::to_string(run.mlp_depth) : "", " for --model ",
        run.model, ": only --model mlp reads ", width && depth ? "them" : "it", "; ",
        named_sizes ? "pick a size with --preset" : "the model has one size");
  check(!known || run.model == "gpt2" || run.vocab_multiple == 0, "--vocab-multiple ", run.vocab_multiple,
        " for --model ", run.model, ": only --model gpt2 pads its vocabulary",
        run.model == "llama" ? " (llama's 32000 tokens are a multiple of 128 already)" : "");
  check(!known || named_sizes || run.attention == "auto", "--attention ", run.attention, " for --model ", run.model,
        ": only gpt2 and llama have attention");
  check(!known || named_sizes || run.seq == 0, "--seq ", run.seq, " for --model ", run.model,
        ": only gpt2 and llama read sequences of tokens; a row of ", run.model, " is one input vector");
  check(run.batch >= run.world, "--batch ", run.batch, " is smaller than --world ", run.world,
        ": every rank needs at least one row");
  check(run.batch % run.world == 0, "--batch ", run.batch, " is not a multiple of --world ", run.world,
        ": every rank takes the same number of rows, so that the mean of the ranks' losses is the batch's mean");
  BuiltModel built;
  if (run.model == "toy") {
    built.model = std::make_unique<ToyModel>();
    built.identity = {{"fsdplab_model", "toy"}, {"in_features", 10}, {"out_features", 5}};
    built.config = built.identity;
    built.batch = {BatchShape::Kind::regression, run.batch, 10, 5, 0, 0};
    built.unit_kinds = {"Linear", "LayerNorm"};  // each layer a unit, as the assignment's FSDP tests wrap it
  } else if (run.model == "mlp") {
    built.model = std::make_unique<MlpModel>(run.mlp_width, run.mlp_depth);
    built.identity = {{"fsdplab_model", "mlp"}, {"width", run.mlp_width}, {"depth", run.mlp_depth}};
    built.config = built.identity;
    built.batch = {BatchShape::Kind::regression, run.batch, run.mlp_width, run.mlp_width, 0, 0};
    built.unit_kinds = {"MlpBlock"};
  } else if (run.model == "gpt2") {
    const std::string preset = model_preset(run);
    Gpt2Config c = gpt2_preset(preset);
    if (run.vocab_multiple != 0) c.vocab_multiple = run.vocab_multiple;
    c.attention = parse_attention_kind(run.attention);
    const std::int64_t seq = run.seq == 0 ? c.n_positions : run.seq;
    check(seq >= 1 && seq <= c.n_positions, "--seq ", seq, " for gpt2 '", preset,
          "': expected 1 to the position table's ", c.n_positions, " tokens");
    built.model = std::make_unique<Gpt2Model>(c);
    // Hugging Face's GPT2Config keys, so GPT2LMHeadModel.from_pretrained(DIR) builds this model.
    built.identity = {{"model_type", "gpt2"},    {"vocab_size", c.vocab_size}, {"n_positions", c.n_positions},
                      {"n_embd", c.n_embd},      {"n_head", c.n_head},         {"n_layer", c.n_layer}};
    built.settings = {{"layer_norm_epsilon", shortest_decimal(c.layer_norm_epsilon), 1e-5},
                      {"activation_function", "gelu_new", "gelu_new"},
                      {"scale_attn_weights", true, true},
                      {"scale_attn_by_inverse_layer_idx", false, false}};
    built.config = config_of(built);
    built.config.update({{"fsdplab_model", "gpt2"},
                         {"architectures", {"GPT2LMHeadModel"}},
                         {"n_ctx", c.n_positions},
                         {"resid_pdrop", 0.0},
                         {"embd_pdrop", 0.0},
                         {"attn_pdrop", 0.0},
                         {"tie_word_embeddings", true}});
    built.batch = {BatchShape::Kind::tokens, run.batch, 0, 0, seq, c.vocab_size};
    built.unit_kinds = {"Block"};  // the root unit keeps wte (tied to the LM head), wpe and ln_f
  } else if (run.model == "llama") {
    const std::string preset = model_preset(run);
    LlamaConfig c = llama_preset(preset);
    c.attention = parse_attention_kind(run.attention);
    const std::int64_t seq = run.seq == 0 ? c.max_position_embeddings : run.seq;
    check(seq >= 1 && seq <= c.max_position_embeddings, "--seq ", seq, " for llama '", preset,
          "': expected 1 to the context's ", c.max_position_embeddings, " tokens");
    built.model = std::make_unique<LlamaModel>(c);
    // Hugging Face's LlamaConfig keys, so LlamaForCausalLM.from_pretrained(DIR) builds this model.
    built.identity = {{"model_type", "llama"},
                      {"vocab_size", c.vocab_size},
                      {"hidden_size", c.hidden_size},
                      {"intermediate_size", c.intermediate_size},
                      {"num_hidden_layers", c.num_hidden_layers},
                      {"num_attention_heads", c.num_attention_heads},
                      {"num_key_value_heads", c.num_key_value_heads}};
    built.settings = {{"rms_norm_eps", shortest_decimal(c.rms_norm_eps), 1e-6},
                      {"rope_theta", shortest_decimal(c.rope_theta), 10000.0},
                      {"rope_scaling", nullptr, nullptr},
                      {"hidden_act", "silu", "silu"}};
    built.config = config_of(built);
    built.config.update({{"fsdplab_model", "llama"},
                         {"architectures", {"LlamaForCausalLM"}},
                         {"max_position_embeddings", c.max_position_embeddings},
                         {"attention_bias", false},
                         {"tie_word_embeddings", false}});
    built.batch = {BatchShape::Kind::tokens, run.batch, 0, 0, seq, c.vocab_size};
    // One unit per decoder layer; the root unit keeps embed_tokens, norm and lm_head.
    built.unit_kinds = {"LlamaDecoderLayer"};
  } else {
    fail("--model '", run.model, "'; expected toy, mlp, gpt2 or llama");
  }
  built.unit_kinds = wrap_policy(run, built.unit_kinds);
  return built;
}

std::string model_preset(const RunConfig& run) {
  if (!model_has_named_sizes(run.model)) return "";
  return run.preset.empty() ? "test-tiny" : run.preset;
}

}  // namespace fsdplab
