#include "grader/grading_cases.hpp"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <type_traits>

#include "engine/optim/optimizer.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/input_file.hpp"
#include "engine/runtime/json_input.hpp"
#include "engine/train/fsdp_run_plan.hpp"
#include "grader/diagnostic_text.hpp"
#include "grader/graded_run.hpp"

namespace fsdplab::grading {
namespace {

namespace fs = std::filesystem;

const std::set<std::string>& known_keys() {
  static const std::set<std::string> keys = {
      "name",  "task",     "points",  "model",        "preset",    "mlp_width", "mlp_depth", "world",
      "batch", "seq",      "steps",   "seed",         "optimizer", "lr",        "strategy",  "hybrid_group",
      "mode",  "prefetch", "buffers", "max_inflight", "offload",   "tolerance"};
  return keys;
}

// The most ranks a case may train: the grader's own checks go up to 8, and a case must train within a check's
// time limit (--time-limit) with every rank on this host's sim device.
constexpr int kMaxCaseWorld = 16;
constexpr int kMaxCaseSteps = 100;

// A run's error with each option that is a case's key named as the key: "--batch 7 is not a multiple of --world 2"
// becomes "\"batch\" 7 is not a multiple of \"world\" 2", as the case's author wrote them.
std::string named_as_keys(const std::string& message) {
  static const std::regex option("--([a-z][a-z0-9-]*)");
  std::string out;
  auto last = message.cbegin();
  for (std::sregex_iterator it(message.begin(), message.end(), option), end; it != end; ++it) {
    std::string key = (*it)[1].str();
    std::replace(key.begin(), key.end(), '-', '_');
    out.append(last, (*it)[0].first);
    out += known_keys().contains(key) ? "\"" + key + "\"" : (*it)[0].str();
    last = (*it)[0].second;
  }
  return out.append(last, message.cend());
}

Check load_case(const fs::path& file) {
  const auto bad = [&](const std::string& why) -> Error {
    return Error("grade --cases: " + file.string() + ": " + why);
  };
  nlohmann::json j;
  const std::string text = read_input_file(file, "grading case", 1u << 20, "a JSON object, grader/grading_cases.hpp");
  try {
    j = parse_json_input(text, {.unique_keys = true});
  } catch (const Error& e) {
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
    const nlohmann::json& value = j.at(key);
    // nlohmann converts 2.7 to the int 2 and 1e12 to whatever an int wraps to: a whole number is checked whole.
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const bool whole = std::is_signed_v<T> ? value.is_number_integer() : value.is_number_unsigned();
      const bool fits = whole && (std::is_signed_v<T> ? value.get<std::int64_t>() >= std::numeric_limits<T>::min() &&
                                                            value.get<std::int64_t>() <= std::numeric_limits<T>::max()
                                                      : value.get<std::uint64_t>() <= std::numeric_limits<T>::max());
      if (!fits) {
        throw bad(std::string("'") + key + "' is " + json_shown(value) + "; expected a whole number" +
                  (std::is_signed_v<T> ? "" : " >= 0") + " that fits in " + std::to_string(sizeof(T) * 8) + " bits");
      }
    }
    const char* kind = std::is_same_v<T, bool>            ? "true or false"
                       : std::is_same_v<T, std::string>     ? "a string"
                       : std::is_floating_point_v<T>        ? "a number"
                                                            : "a whole number";
    try {
      return value.get<T>();
    } catch (const nlohmann::json::exception&) {
      throw bad(std::string("'") + key + "' is " + json_shown(value) + "; expected " + kind);
    }
  };
  if (!j.contains("name") || !j.contains("task")) throw bad("a case needs a \"name\" and a \"task\" (1 to 9)");
  const int task = get("task", 0);
  if (task < 1 || task > kTaskCount) throw bad("\"task\" is " + std::to_string(task) + "; expected 1 to 9");
  const int points = get("points", 2);
  if (points < 1 || points > 100) throw bad("\"points\" is " + std::to_string(points) + "; expected 1 to 100");

  const int world = get("world", 2);
  if (world < 1 || world > kMaxCaseWorld) {
    throw bad("\"world\" is " + std::to_string(world) + "; expected 1 to " + std::to_string(kMaxCaseWorld) +
              " ranks, what a check can train within its time limit");
  }
  GradeCase c = small_gpt2(world);
  c.name = get("name", std::string());
  if (c.name.empty()) throw bad("\"name\" is empty; expected the case's name, which the report and the JSON's "
                                "check id (case:NAME) carry");
  c.run.model = get("model", c.run.model);
  // Named sizes and sequences are gpt2's and llama's; toy and mlp have neither (mlp's size: its width and depth).
  const bool reads_tokens = c.run.model == "gpt2" || c.run.model == "llama";
  if (!reads_tokens) {
    c.run.preset.clear();
    c.run.seq = 0;
  }
  c.run.preset = get("preset", c.run.preset);
  c.run.mlp_width = get("mlp_width", c.run.mlp_width);
  c.run.mlp_depth = get("mlp_depth", c.run.mlp_depth);
  if (c.run.mlp_width < 1 || c.run.mlp_width > (1 << 16) || c.run.mlp_depth < 1 || c.run.mlp_depth > 1024)
    throw bad("\"mlp_width\" " + std::to_string(c.run.mlp_width) + " and \"mlp_depth\" " +
              std::to_string(c.run.mlp_depth) + "; expected 1 to 65536 and 1 to 1024, as `fsdplab run` takes them");
  c.run.batch = get("batch", c.run.batch);
  c.run.seq = get("seq", c.run.seq);
  c.run.steps = get("steps", c.run.steps);
  c.run.optimizer = get("optimizer", c.run.optimizer);
  c.run.lr = get("lr", c.run.lr);
  if (j.contains("seed")) {
    c.run.seed = get("seed", std::uint64_t{0});
    c.fixed_seed = true;
  }
  // The values read first (get's refusals name the file already), then parsed (whose refusals do not).
  const std::string strategy = get("strategy", std::string(strategy_name(c.options.strategy)));
  const std::string mode = get("mode", std::string(overlap_mode_name(c.options.mode)));
  const std::string prefetch = get("prefetch", prefetch_name(c.options.prefetch));
  const std::string buffers = get("buffers", std::string(unshard_buffers_name(c.options.buffers)));
  c.options.hybrid_group = get("hybrid_group", c.options.hybrid_group);
  c.options.max_inflight = get("max_inflight", c.options.max_inflight);
  c.options.offload = get("offload", c.options.offload);
  try {
    c.options.strategy = parse_strategy(strategy);
    c.options.mode = parse_overlap_mode(mode);
    c.options.prefetch = parse_prefetch(prefetch);
    c.options.buffers = parse_unshard_buffers(buffers);
  } catch (const Error& e) {
    throw bad(e.what());
  }
  // As `fsdplab run` refuses --prefetch with --mode sync: SYNC's schedule has none, and would drop it unsaid. Left
  // out, "prefetch" is SYNC's none.
  if (c.options.mode == OverlapMode::sync && j.contains("prefetch") &&
      !(c.options.prefetch == sync_schedule(c.options).prefetch))
    throw bad("\"prefetch\" is \"" + prefetch + "\" with \"mode\": \"sync\"; SYNC never prefetches: leave \"prefetch\" "
              "out, or use \"mode\": \"async\"");
  if (c.options.mode == OverlapMode::sync) c.options = sync_schedule(c.options);
  // A case must train something: a run takes 0 steps and --seq 0 (the model's context length), a case does not.
  if (c.run.steps < 1 || c.run.steps > kMaxCaseSteps)
    throw bad("\"steps\" is " + std::to_string(c.run.steps) + "; expected 1 to " + std::to_string(kMaxCaseSteps) +
              " steps to compare, what a check can train within its time limit");
  if (reads_tokens && c.run.seq < 1) throw bad("\"seq\" is " + std::to_string(c.run.seq) + "; expected >= 1 tokens");
  // What a run of this case would refuse, refused now (the plan's checks: the numbers, model and preset, the batch
  // split, the FSDP options against W; and the optimizer), so the reference never loses a case's points to it.
  try {
    make_optimizer(c.run.optimizer_spec(), {});
    FsdpRun fsdp;
    fsdp.run = c.run;
    fsdp.options = c.options;
    fsdp.tasks = reference_tasks();
    const FsdpRunPlan plan(fsdp, PresetCatalog::builtin());
  } catch (const Error& e) {
    throw bad(named_as_keys(e.what()));
  }
  // The task the case grades must run in it: the untouched skeleton must not earn a case's points. Tasks 1 to 7 run
  // in every FSDP training; task 8 only with replica groups (hybrid, 1 < S < W: lab 08), task 9 only with offload.
  if (task == 8 && !(c.options.strategy == ShardingStrategy::hybrid_shard && c.options.hybrid_group > 1 &&
                     c.options.hybrid_group < c.run.world))
    throw bad("a task 8 case with \"strategy\": \"" + strategy + "\", \"hybrid_group\" " +
              std::to_string(c.options.hybrid_group) + " and \"world\" " + std::to_string(c.run.world) +
              " never calls task 8 (it runs with replica groups only); expected \"strategy\": \"hybrid\" and "
              "1 < \"hybrid_group\" < \"world\"");
  if (task == 9 && !c.options.offload)
    throw bad("a task 9 case without \"offload\": true never calls task 9 (CPU offload); expected \"offload\": true");
  c.tolerance = get("tolerance", c.tolerance);
  // A tolerance near 1 passes wrong code (a gradient W times too large trains to losses within it): a typo, refused.
  if (!(c.tolerance > 0 && c.tolerance < 0.1))
    throw bad("\"tolerance\" is " + number(c.tolerance) +
              "; expected above 0 and below 0.1 (the built-in checks use 1e-5: a looser one passes wrong code)");
  // The title names what the case sets beyond its model, W and strategy (for the course: a student's text shows its
  // name alone).
  std::string set;
  const auto also = [&](bool given, const std::string& what) {
    if (given) set += (set.empty() ? " (" : ", ") + what;
  };
  also(c.options.mode == OverlapMode::sync, "SYNC");
  also(c.options.buffers == UnshardBuffers::pool, "two-buffer pool");
  also(c.options.offload, "CPU offload");
  if (!set.empty()) set += ")";
  const std::string title = held_out_case_title(c.name) + ": " + c.run.model + " W=" + std::to_string(c.run.world) +
                            " " + std::string(strategy_name(c.options.strategy)) + set +
                            " equals the single-rank baseline";
  // A race the detector stopped is named as one: its two ops are in "got", and the fix is an ordering, not arithmetic.
  const DifferenceCause race = [](const CheckContext&, const GradeCase&, const GradedRun& graded, const GradedRun&,
                                  double) -> std::string {
    if (!graded.race) return "";
    return "in a configuration the public checks do not cover, two ops use one buffer and no event orders the "
           "second after the first (both are in got): look for a wait your code makes only under some W, strategy "
           "or schedule, or one on the wrong event";
  };
  return equivalence_check(task, std::string(kHeldOutCaseIdPrefix) + c.name, title, points, c,
                           "a configuration the public checks do not cover trains differently: look for what depends "
                           "on W, the strategy or the schedule in your code",
                           race);
}

}  // namespace

std::vector<Check> load_cases(const fs::path& dir) {
  std::error_code ec;
  check(fs::exists(dir, ec), "grade --cases: '", dir.string(), "': no such folder; expected a folder of *.json cases");
  check(fs::is_directory(dir, ec), "grade --cases: '", dir.string(),
        "' is not a folder; expected a folder of *.json cases");
  std::vector<fs::path> files;
  fs::directory_iterator entries(dir, ec);
  check(!ec, "grade --cases: cannot list the folder '", dir.string(), "' (", ec.message(), ")");
  // ".JSON" as well: a case named in capitals is the course's case all the same, never skipped.
  const auto is_json = [](const fs::path& f) {
    std::string extension = f.extension().string();
    std::transform(extension.begin(), extension.end(), extension.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    return extension == ".json";
  };
  for (const auto& entry : entries)
    if (is_json(entry.path())) files.push_back(entry.path());
  std::sort(files.begin(), files.end());  // the same case is named first whatever order the folder lists
  // A *.json that is not a file is named, never skipped: a case the course meant to grade would be left out.
  for (const fs::path& f : files) {
    if (fs::is_regular_file(f, ec)) continue;
    const std::string what = ec ? ec.message() : fs::is_directory(f, ec) ? "a folder" : "not a regular file";
    fail("grade --cases: '", f.string(), "' is not a case file (", what,
         "); expected every *.json in the folder to be a case");
  }
  check(!files.empty(), "grade --cases: '", dir.string(), "' holds no *.json case");
  std::vector<Check> checks;
  std::map<std::string, fs::path> file_of;  // a check's id, and the case file it came from
  for (const fs::path& f : files) {
    checks.push_back(load_case(f));
    const auto [first, added] = file_of.emplace(checks.back().id, f);
    check(added, "grade --cases: ", first->second.string(), " and ", f.string(), " are both named '",
          checks.back().id.substr(checks.back().id.find(':') + 1), "'; expected a name of its own for each case (the "
          "report's and the JSON's check id, ", checks.back().id, ")");
  }
  return checks;
}

}  // namespace fsdplab::grading
