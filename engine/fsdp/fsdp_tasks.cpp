#include "engine/fsdp/fsdp_tasks.hpp"

#include <charconv>

#include "engine/fsdp/lab_todo.hpp"

namespace fsdplab {
namespace {

constexpr std::array<TaskInfo, kTaskCount> kTasks{{
    {1, "MetaInitTask", "labs/01-meta-init", "meta init: materialise only this rank's shard"},
    {2, "FlatParameterTask", "labs/02-flat-parameter", "FlatParameter: flatten, pad, shard, view"},
    {3, "ForwardTask", "labs/03-forward", "forward: all-gather before, free after"},
    {4, "BackwardTask", "labs/04-backward", "backward: gradients reduce-scattered into the shard"},
    {5, "ShardedOptimizerTask", "labs/05-sharded-optimizer", "sharded optimizer: step the shard only"},
    {6, "OverlapTask", "labs/06-prefetch-overlap", "prefetch and overlap: streams, events, memory"},
    {7, "IntegrationTask", "labs/07-integration", "integration: a model as nested units"},
    {8, "HybridShardTask", "labs/08-hybrid-shard", "hybrid shard: shard in a group, replicate across"},
    {9, "CpuOffloadTask", "labs/09-cpu-offload", "CPU offload: shards and the optimizer on the host"},
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

std::string FsdpTask::where() const {
  return std::string(repository_path(origin_.file_name())) + ":" + std::to_string(origin_.line());
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

const FsdpTask& FsdpTasks::task(int number) const {
  check_number(number);
  const FsdpTask* const slots[kTaskCount] = {meta_init, flat_parameter, forward, backward,   optimizer,
                                             overlap,   integration,    hybrid_shard, cpu_offload};
  const FsdpTask* t = slots[number - 1];
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

bool ImplChoice::any_student() const {
  for (bool s : student)
    if (s) return true;
  return false;
}

ImplChoice parse_impl(std::string_view text) {
  ImplChoice choice;
  if (text == "reference") return choice;
  if (text == "student") {
    choice.student.fill(true);
    return choice;
  }
  const auto bad = [&](std::string_view why) {
    fail("--impl '", text, "': ", why, "; expected reference, student, or a comma list of TASK=reference|student ",
         "with TASK from 1 to ", kTaskCount, " (e.g. 3=student,6=student)");
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
    if (impl != "student" && impl != "reference") bad("task " + std::to_string(n) + " is given '" + std::string(impl) + "'");
    if (named[static_cast<std::size_t>(n - 1)]) bad("task " + std::to_string(n) + " is named twice");
    named[static_cast<std::size_t>(n - 1)] = true;
    choice.student[static_cast<std::size_t>(n - 1)] = impl == "student";
    begin = end + 1;
  }
  return choice;
}

std::string impl_name(const ImplChoice& choice) {
  if (!choice.any_student()) return "reference";
  bool all = true;
  for (bool s : choice.student) all = all && s;
  if (all) return "student";
  std::string name;
  for (int n = 1; n <= kTaskCount; ++n) {
    if (!choice.student[static_cast<std::size_t>(n - 1)]) continue;
    if (!name.empty()) name += ",";
    name += std::to_string(n) + "=student";
  }
  return name;
}

FsdpTasks select_tasks(const ImplChoice& choice, const FsdpTasks& student) {
  FsdpTasks tasks = reference_tasks();
  const auto pick = [&](int n, auto& slot, auto* theirs) {
    if (!choice.student[static_cast<std::size_t>(n - 1)]) return;
    check(theirs != nullptr, "--impl ", n, "=student: this build has no student implementation of task ", n, " (",
          task_info(n).interface, ")");
    slot = theirs;
  };
  pick(1, tasks.meta_init, student.meta_init);
  pick(2, tasks.flat_parameter, student.flat_parameter);
  pick(3, tasks.forward, student.forward);
  pick(4, tasks.backward, student.backward);
  pick(5, tasks.optimizer, student.optimizer);
  pick(6, tasks.overlap, student.overlap);
  pick(7, tasks.integration, student.integration);
  pick(8, tasks.hybrid_shard, student.hybrid_shard);
  pick(9, tasks.cpu_offload, student.cpu_offload);
  return tasks;
}

}  // namespace fsdplab
