#include "engine/nn/checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "engine/nn/safetensors.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/input_file.hpp"
#include "engine/runtime/json_input.hpp"
#include "engine/runtime/output_file.hpp"

namespace fsdplab {
namespace {

// A model's config is a few hundred bytes; a megabyte leaves room for any the engine writes.
constexpr std::uint64_t kMaxConfigBytes = 1u << 20;

void write_json_atomically(const std::filesystem::path& path, const nlohmann::json& json) {
  write_output_file(path, "", [&](std::ostream& out) { out << json.dump(2) << "\n"; });
}

}  // namespace

void save_checkpoint(const std::filesystem::path& dir, Module& model, const nlohmann::json& config) {
  std::vector<std::vector<float>> values;
  for (Parameter* p : model.parameters()) {
    check(p->value.defined() && !p->value.is_meta(), "save: parameter '", p->name, "' is not materialised");
    p->value.device().synchronize();
    values.push_back(p->value.to_vector());
  }
  save_checkpoint(dir, model, values, config);
}

void save_checkpoint(const std::filesystem::path& dir, Module& model, std::span<const std::vector<float>> values,
                     const nlohmann::json& config) {
  const std::vector<Parameter*> params = model.parameters();
  check(values.size() == params.size(), "save: ", values.size(), " parameter values for a model of ", params.size());
  std::vector<SafetensorsEntry> entries;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Parameter* p = params[i];
    const std::vector<float>& v = values[i];
    check(static_cast<std::int64_t>(v.size()) == p->numel(), "save: parameter '", p->name, "' has ", p->numel(),
          " elements, given ", v.size(), " values");
    // A diverged model is never saved: it would replace a good folder with one nobody can train from.
    const auto bad = std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
    check(bad == v.end(), "not saving '", dir.string(), "': parameter '", p->name, "' holds ",
          bad == v.end() ? 0.f : *bad, " at element ", bad - v.begin(),
          "; expected finite values (the training diverged)");
    // The file holds the parameter without its padding rows, which must still be 0: dropping them loses nothing.
    const std::size_t logical = static_cast<std::size_t>(p->logical_numel());
    const auto nonzero =
        std::find_if(v.begin() + static_cast<std::ptrdiff_t>(logical), v.end(), [](float x) { return x != 0.f; });
    check(nonzero == v.end(), "not saving '", dir.string(), "': parameter '", p->name, "' holds ",
          nonzero == v.end() ? 0.f : *nonzero, " at element ", nonzero - v.begin(),
          ", in its padding rows (from element ", logical, "); expected 0 there, which no op writes");
    entries.push_back(
        {p->name, DType::f32, p->logical_shape(),
         std::span<const std::byte>(reinterpret_cast<const std::byte*>(v.data()), logical * sizeof(float))});
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  check(!ec, "cannot save to '", dir.string(), "': cannot create the folder: ", ec.message());
  write_safetensors(dir / kCheckpointWeightsFile, entries, {{"format", "pt"}});
  write_json_atomically(dir / kCheckpointConfigFile, config);
}

CheckpointFile CheckpointFile::open(const std::filesystem::path& dir, Module& model, const nlohmann::json& identity,
                                    std::span<const ModelSetting> settings) {
  const std::filesystem::path config_path = dir / kCheckpointConfigFile;
  std::error_code ec;
  check(std::filesystem::exists(std::filesystem::symlink_status(config_path, ec)), "'", dir.string(), "' ",
        std::filesystem::is_directory(dir, ec) ? "holds no " + std::string(kCheckpointConfigFile) : "is not a folder",
        "; expected a folder written by --save-init or --save-final");
  // Read by its kind first: a FIFO or a device in the folder is refused, never waited on or read without end.
  const std::string text =
      read_input_file(config_path, "the model's config", kMaxConfigBytes, "written by --save-init or --save-final");
  nlohmann::json saved;
  try {
    saved = parse_json_input(text);
  } catch (const Error& e) {
    fail("'", config_path.string(), "' is not valid JSON: ", e.what());
  }
  // The kind of model first: a folder of another kind differs in every key, and the first of them says little
  // ("config 'hidden_size' is missing" of a GPT-2's folder, loaded into a Llama).
  const auto kind_of = [](const nlohmann::json& config) -> std::string {
    for (const char* key : {"model_type", "fsdplab_model"})
      if (config.contains(key) && config[key].is_string()) return config[key].get<std::string>();
    return "";
  };
  const std::string saved_kind = kind_of(saved), kind = kind_of(identity);
  check(saved_kind == kind, "'", dir.string(), "' holds ",
        saved_kind.empty() ? std::string("a model of no kind fsdplab knows") : "a " + saved_kind + " model",
        "; this run's model is ", kind, " (--model)");
  for (const auto& [key, value] : identity.items()) {
    check(saved.contains(key) && saved[key] == value, "'", dir.string(), "' holds another model: config '", key,
          "' is ", saved.contains(key) ? json_shown(saved[key]) : std::string("missing"), ", this run's model has ",
          value.dump());
  }
  for (const ModelSetting& s : settings) {
    const bool given = saved.contains(s.key);
    check((given ? saved[s.key] : s.if_absent) == s.value, "'", dir.string(),
          "' holds a model that computes otherwise: config '", s.key, "' is ",
          given ? json_shown(saved[s.key]) : "missing, which means " + s.if_absent.dump() + " (Hugging Face's default)",
          ", this run's model has ", s.value.dump(), "; its weights would not compute here what they were trained to");
  }
  SafetensorsFile file = SafetensorsFile::read(dir / kCheckpointWeightsFile);
  std::set<std::string> expected;
  for (Parameter* p : model.parameters()) {
    expected.insert(p->name);
    file.expect(p->name, DType::f32, p->logical_shape());
  }
  for (const std::string& name : file.names())
    check(expected.contains(name), "'", (dir / kCheckpointWeightsFile).string(), "' has tensor '", name,
          "', which this model does not have");
  return CheckpointFile(std::move(file));
}

void CheckpointFile::read(const Parameter& param, std::int64_t begin, std::span<float> out) const {
  const std::int64_t end = begin + static_cast<std::int64_t>(out.size());
  check(begin >= 0 && end <= param.numel(), "checkpoint tensor '", param.name, "': elements [", begin, ", ", end,
        ") of ", param.numel());
  // The file ends where the parameter's padding rows begin; they read as the 0 they hold.
  const std::span<const std::byte> bytes = file_.at(param.name).bytes;
  const std::int64_t in_file = static_cast<std::int64_t>(bytes.size() / sizeof(float));
  const std::size_t copied = static_cast<std::size_t>(std::clamp<std::int64_t>(in_file - begin, 0, end - begin));
  if (copied > 0)  // the file may not align floats
    std::memcpy(out.data(), bytes.data() + static_cast<std::size_t>(begin) * sizeof(float), copied * sizeof(float));
  std::fill(out.begin() + static_cast<std::ptrdiff_t>(copied), out.end(), 0.f);
}

void load_checkpoint(const std::filesystem::path& dir, Module& model, const nlohmann::json& identity,
                     std::span<const ModelSetting> settings) {
  const CheckpointFile file = CheckpointFile::open(dir, model, identity, settings);
  for (Parameter* p : model.parameters()) {
    std::vector<float> values(static_cast<std::size_t>(p->numel()));
    file.read(*p, 0, values);
    p->value.device().synchronize();
    p->value.copy_from(values);
  }
}

}  // namespace fsdplab
