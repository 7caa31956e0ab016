#include "grader/grading_cases.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/runtime/error.hpp"
#include "engine/runtime/input_file.hpp"
#include "grader/graded_run.hpp"

namespace fsdplab::grading {
namespace {

namespace fs = std::filesystem;

const std::set<std::string>& known_keys() {
  static const std::set<std::string> keys = {
      "name",     "task",     "points",  "model",        "preset", "world",    "batch",        "seq",
      "steps",    "seed",     "optimizer", "lr",         "strategy", "hybrid_group", "mode", "prefetch",
      "buffers",  "max_inflight", "offload", "tolerance"};
  return keys;
}

Check load_case(const fs::path& file) {
  const auto bad = [&](const std::string& why) -> Error {
    return Error("grade --cases: " + file.string() + ": " + why);
  };
  nlohmann::json j;
  const std::string text = read_input_file(file, "grading case", 1u << 20, "a JSON object, grader/grading_cases.hpp");
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) throw bad("expected a JSON object of a case's settings");
  for (const auto& [key, value] : j.items())
    if (!known_keys().contains(key)) {
      std::string list;
      for (const std::string& k : known_keys()) list += (list.empty() ? "" : ", ") + k;
      throw bad("unknown key '" + key + "'; expected some of: " + list);
    }
  const auto get = [&]<typename T>(const char* key, T fallback) -> T {
    if (!j.contains(key)) return fallback;
    try {
      return j.at(key).get<T>();
    } catch (const nlohmann::json::exception&) {
      throw bad(std::string("'") + key + "' is " + j.at(key).dump() + ", not the kind of value expected");
    }
  };
  if (!j.contains("name") || !j.contains("task")) throw bad("a case needs a \"name\" and a \"task\" (1 to 9)");
  const int task = get("task", 0);
  if (task < 1 || task > kTaskCount) throw bad("\"task\" is " + std::to_string(task) + "; expected 1 to 9");
  const int points = get("points", 2);
  if (points < 1 || points > 100) throw bad("\"points\" is " + std::to_string(points) + "; expected 1 to 100");

  GradeCase c = small_gpt2(get("world", 2));
  c.name = get("name", std::string());
  c.run.model = get("model", c.run.model);
  c.run.preset = get("preset", c.run.preset);
  c.run.batch = get("batch", c.run.batch);
  c.run.seq = get("seq", c.run.seq);
  c.run.steps = get("steps", c.run.steps);
  c.run.optimizer = get("optimizer", c.run.optimizer);
  c.run.lr = get("lr", c.run.lr);
  if (j.contains("seed")) {
    c.run.seed = get("seed", std::uint64_t{0});
    c.fixed_seed = true;
  }
  try {
    c.options.strategy = parse_strategy(get("strategy", std::string(strategy_name(c.options.strategy))));
    c.options.hybrid_group = get("hybrid_group", c.options.hybrid_group);
    c.options.mode = parse_overlap_mode(get("mode", std::string(overlap_mode_name(c.options.mode))));
    c.options.prefetch = parse_prefetch(get("prefetch", prefetch_name(c.options.prefetch)));
    c.options.buffers = parse_unshard_buffers(get("buffers", std::string(unshard_buffers_name(c.options.buffers))));
    if (c.options.mode == OverlapMode::sync) c.options = sync_schedule(c.options);
    c.options.max_inflight = get("max_inflight", c.options.max_inflight);
    c.options.offload = get("offload", c.options.offload);
    validate_fsdp_options(c.options, c.run.world);
  } catch (const Error& e) {
    throw bad(e.what());
  }
  c.tolerance = get("tolerance", c.tolerance);
  if (!(c.tolerance > 0)) throw bad("\"tolerance\" must be above 0");
  const std::string title = "held-out case '" + c.name + "': " + c.run.model + " W=" + std::to_string(c.run.world) +
                            " " + std::string(strategy_name(c.options.strategy)) + " equals the single-rank baseline";
  return equivalence_check(task, "case:" + c.name, title, points, c,
                           "a configuration the public checks do not cover trains differently: look for what depends "
                           "on W, the strategy or the schedule in your code");
}

}  // namespace

std::vector<Check> load_cases(const fs::path& dir) {
  std::error_code ec;
  check(fs::is_directory(dir, ec), "grade --cases: '", dir.string(),
        "' is not a folder; expected a folder of *.json cases");
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".json" && entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  check(!files.empty(), "grade --cases: '", dir.string(), "' holds no *.json case");
  std::vector<Check> checks;
  for (const fs::path& f : files) checks.push_back(load_case(f));
  return checks;
}

}  // namespace fsdplab::grading
