// model_factory.hpp — from a run's configuration to its model, the model's config.json, and the
// shape of its batches.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/nn/checkpoint.hpp"
#include "engine/nn/model.hpp"
#include "engine/train/batch_source.hpp"
#include "engine/train/run_config.hpp"

namespace fsdplab {

struct BuiltModel {
  std::unique_ptr<Model> model;  // shapes only: nothing materialised yet
  nlohmann::json config;         // what config.json holds; for gpt2 Hugging Face's GPT2Config keys
  // The keys of `config` that say which model a folder holds: --load-init checks exactly these, since
  // a folder saved by Hugging Face omits keys at their default values and may add others.
  nlohmann::json identity;
  // The keys of `config` that decide what it computes from its weights, which --load-init checks too, with what a
  // config that omits one means (ModelSetting, checkpoint.hpp): a folder of another variant is refused.
  std::vector<ModelSetting> settings;
  BatchShape batch;
  // FSDP's wrap policy for this model under run.wrap: the modules that become units of their own, by
  // kind ("Block") or by dotted name ("transformer.wpe"); IntegrationTask::plan_units (integration_task.hpp) reads it.
  //   block   each transformer block (gpt2 Block, llama LlamaDecoderLayer; mlp MlpBlock; toy every layer)
  //   linear  each Linear and Embedding, as the assignment's FSDP tests wrap — except an Embedding tied to
  //           the LM head (gpt2's wte), which stays in the root with its other user
  //   nested  both: blocks, each holding its Linears as units inside it
  //   model   none: the whole model is the root unit
  std::vector<std::string> unit_kinds;
};

// An Error before anything is allocated for a configuration that cannot work (unknown model or
// preset, a sequence longer than the position table, a batch smaller than the world).
// An Error too for an option the model would ignore: --preset for toy or mlp, --mlp-width or --mlp-depth for
// any model but mlp.
BuiltModel build_model(const RunConfig& run);

// --wrap's policies (BuiltModel::unit_kinds): block, linear, nested, model. `fsdplab run`, `fsdplab gui` and the
// dashboard's Run panel offer these; build_model refuses any other, and nested for a model without blocks to nest.
std::span<const std::string_view> wrap_names();

// Whether --preset names a size of `model` (gpt2, llama). Callers whose preset has a default (the dashboard,
// the benches) pass it only to these models.
bool model_has_named_sizes(std::string_view model);
// The size a run of a model with named sizes builds: --preset, or test-tiny when none is given; empty for the
// others (toy, mlp).
std::string model_preset(const RunConfig& run);

// Why `text` is not a seed (a whole number from 0 to 2^64-1), or empty when it is one. Checked on the text:
// a command-line parser reads "-5" into the unsigned seed as 2^64-5 without a word.
std::string seed_text_problem(std::string_view text);

}  // namespace fsdplab
