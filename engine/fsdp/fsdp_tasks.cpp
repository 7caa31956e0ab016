#include "engine/fsdp/fsdp_tasks.hpp"

#include <charconv>
#include <source_location>
#include <string>
#include <type_traits>

#include "engine/fsdp/lab_todo.hpp"

namespace fsdplab {
namespace {

constexpr std::array<TaskInfo, kTaskCount> kTasks{{
    {1, "MetaInitTask", "reference_meta_init", "labs/01-meta-init", "meta init: materialise only this rank's shard"},
    {2, "FlatParameterTask", "reference_flat_parameter", "labs/02-flat-parameter",
     "FlatParameter: flatten, pad, shard, view"},
    {3, "ForwardTask", "reference_forward", "labs/03-forward", "forward: all-gather before, free after"},
    {4, "BackwardTask", "reference_backward", "labs/04-backward",
     "backward: gradients reduce-scattered into the shard"},
    {5, "ShardedOptimizerTask", "reference_sharded_optimizer", "labs/05-sharded-optimizer",
     "sharded optimizer: step the shard only"},
    {6, "OverlapTask", "reference_overlap", "labs/06-prefetch-overlap",
     "prefetch and overlap: streams, events, memory"},
    {7, "IntegrationTask", "reference_integration", "labs/07-integration", "integration: a model as nested units"},
    {8, "HybridShardTask", "reference_hybrid_shard", "labs/08-hybrid-shard",
     "hybrid shard: shard in a group, replicate across", true},
    {9, "CpuOffloadTask", "reference_cpu_offload", "labs/09-cpu-offload",
     "CPU offload: shards and the optimizer on the host", true},
}};

void check_number(int number) {
  check(number >= 1 && number <= kTaskCount, "task ", number, ": the lab's tasks are numbered 1 to ", kTaskCount);
}

}  // namespace

std::string_view repository_path(std::string_view path) {
  std::size_t best = std::string_view::npos;
  for (std::string_view folder : {"/engine/", "/labs/", "/tests/"}) {
    const std::size_t at = path.rfind(folder);
    if (at != std::string_view::npos && (best == std::string_view::npos || at > best)) best = at;
  }
  return best == std::string_view::npos ? path : path.substr(best + 1);
}

namespace {

// The tree a source file was compiled in: its path as the compiler saw it, less the repository path.
std::string_view tree_of(std::string_view file) { return file.substr(0, file.size() - repository_path(file).size()); }

}  // namespace

// A handout's references are object code (scripts/make_handout.sh), compiled in the course's tree, not the one
// this file was: their source is not in the student's tree, which where() says instead of pointing at nothing.
std::string FsdpTask::where() const {
  const std::string_view file = origin_.file_name();
  std::string at = std::string(repository_path(file)) + ":" + std::to_string(origin_.line());
  if (is_a_reference() && tree_of(file) != tree_of(std::source_location::current().file_name()))
    at += ", prebuilt: its source is not in this tree";
  return at;
}

bool FsdpTask::is_a_reference() const {
  const std::string_view path = repository_path(origin_.file_name());
  return path.starts_with("engine/fsdp/") && path.ends_with("_reference.cpp");
}

void todo(int task, std::string_view method, std::source_location where) {
  const TaskInfo& info = task_info(task);
  throw TaskNotImplemented("task " + std::to_string(task) + ", " + std::string(method) +
                           ": not implemented yet — see " + std::string(info.lab) + "/README.md (the TODO at " +
                           std::string(repository_path(where.file_name())) + ":" + std::to_string(where.line()) + ")");
}

const TaskInfo& task_info(int number) {
  check_number(number);
  return kTasks[static_cast<std::size_t>(number - 1)];
}

namespace {

// Calls `f` with task `number`'s member of `tasks` (its pointer, by reference): the one place a task's number
// meets its member. `number` is checked by the caller.
template <class Tasks, class F>
decltype(auto) with_slot(Tasks& tasks, int number, F&& f) {
  switch (number) {
    case 1:
      return f(tasks.meta_init);
    case 2:
      return f(tasks.flat_parameter);
    case 3:
      return f(tasks.forward);
    case 4:
      return f(tasks.backward);
    case 5:
      return f(tasks.optimizer);
    case 6:
      return f(tasks.overlap);
    case 7:
      return f(tasks.integration);
    case 8:
      return f(tasks.hybrid_shard);
    default:
      return f(tasks.cpu_offload);
  }
}

}  // namespace

const FsdpTask& FsdpTasks::task(int number) const {
  check_number(number);
  const FsdpTask* t = with_slot(*this, number, [](const auto* slot) -> const FsdpTask* { return slot; });
  check(t != nullptr, "FSDP: task ", number, " (", task_info(number).interface, ") has no implementation");
  return *t;
}

void FsdpTasks::check_complete() const {
  for (int n = 1; n <= kTaskCount; ++n) task(n);
}

FsdpTasks reference_tasks() {
  return {&reference_meta_init(), &reference_flat_parameter(), &reference_forward(),
          &reference_backward(),  &reference_sharded_optimizer(), &reference_overlap(),
          &reference_integration(), &reference_hybrid_shard(), &reference_cpu_offload()};
}

bool ImplChoice::replaced(int number) const {
  check_number(number);
  return of[static_cast<std::size_t>(number - 1)] != "reference";
}

bool ImplChoice::any_replaced() const {
  for (int n = 1; n <= kTaskCount; ++n)
    if (replaced(n)) return true;
  return false;
}

std::array<bool, kTaskCount> ImplChoice::replaced_tasks() const {
  std::array<bool, kTaskCount> out{};
  for (int n = 1; n <= kTaskCount; ++n) out[static_cast<std::size_t>(n - 1)] = replaced(n);
  return out;
}

ImplChoice parse_impl(std::string_view text) {
  ImplChoice choice;
  if (text == "reference") return choice;
  if (text == "student") {
    choice.of.fill("student");
    return choice;
  }
  const auto bad = [&](std::string_view why) {
    fail("--impl '", text, "': ", why,
         "; expected reference, student, or a comma list of TASK=IMPL with TASK from 1 to ", kTaskCount,
         " and IMPL reference, student or mutant:NAME (e.g. 3=student,6=student)");
  };
  if (text.empty()) bad("empty");
  std::array<bool, kTaskCount> named{};
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    const std::string_view item = text.substr(begin, end - begin);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) bad("'" + std::string(item) + "' has no '='");
    const std::string_view number = item.substr(0, eq), impl = item.substr(eq + 1);
    int n = 0;
    const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), n);
    if (ec != std::errc() || ptr != number.data() + number.size() || n < 1 || n > kTaskCount)
      bad("'" + std::string(number) + "' is not a task number");
    const bool mutant = impl.starts_with("mutant:") && impl.size() > 7;
    if (impl != "student" && impl != "reference" && !mutant)
      bad("task " + std::to_string(n) + " is given '" + std::string(impl) + "'");
    if (named[static_cast<std::size_t>(n - 1)]) bad("task " + std::to_string(n) + " is named twice");
    named[static_cast<std::size_t>(n - 1)] = true;
    choice.of[static_cast<std::size_t>(n - 1)] = std::string(impl);
    begin = end + 1;
  }
  return choice;
}

std::string impl_name(const ImplChoice& choice) {
  if (!choice.any_replaced()) return "reference";
  bool all_student = true;
  for (const std::string& impl : choice.of) all_student = all_student && impl == "student";
  if (all_student) return "student";
  std::string name;
  for (int n = 1; n <= kTaskCount; ++n) {
    if (!choice.replaced(n)) continue;
    if (!name.empty()) name += ",";
    name += std::to_string(n) + "=" + choice.of[static_cast<std::size_t>(n - 1)];
  }
  return name;
}

void FsdpTasks::set(int number, const FsdpTask& impl) {
  check_number(number);
  const auto put = [&](auto& slot) {
    using Interface = std::remove_cvref_t<decltype(*slot)>;
    const auto* typed = dynamic_cast<const Interface*>(&impl);
    check(typed != nullptr, "FSDP: task ", number, " takes a ", task_info(number).interface, "; the implementation at ",
          impl.where(), " is not one");
    slot = typed;
  };
  with_slot(*this, number, put);
}

}  // namespace fsdplab
