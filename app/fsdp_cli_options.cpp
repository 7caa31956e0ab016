#include "app/fsdp_cli_options.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "labs/student_tasks.hpp"

namespace fsdplab::app {
namespace {

std::vector<std::string> strings(std::span<const std::string_view> names) { return {names.begin(), names.end()}; }

std::string comma_list(std::span<const std::string_view> names) {
  std::string out;
  for (std::string_view n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

}  // namespace

FsdpFlags::FsdpFlags() {
  const FsdpOptions defaults;
  strategy = strategy_name(defaults.strategy);
  hybrid_group = defaults.hybrid_group;
  precision = dtype_name(defaults.param_dtype);
  reduce_dtype = dtype_name(defaults.reduce_dtype);
  prefetch = prefetch_name(defaults.prefetch);
  max_inflight = defaults.max_inflight;
  buffers = unshard_buffers_name(defaults.buffers);
  offload = defaults.offload;
  embedding_grad = embedding_gradient_name(defaults.embedding_grad);
}

std::vector<CLI::Option*> add_fsdp_flags(CLI::App& cmd, FsdpFlags& flags, std::initializer_list<FsdpFlag> which,
                                         std::string_view scope) {
  const FsdpFlags defaults;
  const auto help = [&](const std::string& text) { return scope.empty() ? text : std::string(scope) + ": " + text; };
  const std::string dtypes = names_list(fsdp_dtype_names());
  std::vector<CLI::Option*> added;
  for (FsdpFlag flag : which) {
    switch (flag) {
      case FsdpFlag::strategy:
        added.push_back(cmd.add_option("--strategy", flags.strategy,
                                       help("FSDP sharding: " + comma_list(strategy_names()) + " (default " +
                                            defaults.strategy + "; grad_op: no reshard after forward)"))
                            ->check(CLI::IsMember(strings(strategy_names()))));
        break;
      case FsdpFlag::hybrid_group:
        added.push_back(cmd.add_option("--hybrid-group", flags.hybrid_group,
                                       help("hybrid: ranks a unit is sharded over (divides --world)"))
                            ->check(CLI::Range(1, 1024)));  // 0 is "not given": refused when given
        break;
      case FsdpFlag::precision:
        added.push_back(cmd.add_option("--precision", flags.precision,
                                       help("Parameter and compute dtype: " + dtypes + " (default " +
                                            defaults.precision + "); bf16 is mixed precision, on f32 master "
                                            "weights and optimizer state"))
                            ->check(CLI::IsMember(strings(fsdp_dtype_names()))));
        break;
      case FsdpFlag::reduce_dtype:
        added.push_back(cmd.add_option("--reduce-dtype", flags.reduce_dtype,
                                       help("FSDP gradient reduction dtype: " + dtypes + " (default " +
                                            defaults.reduce_dtype + ")"))
                            ->check(CLI::IsMember(strings(fsdp_dtype_names()))));
        break;
      case FsdpFlag::prefetch:
        // A comma list: parse_prefetch checks it (parse_fsdp_flags).
        added.push_back(cmd.add_option("--prefetch", flags.prefetch,
                                       help("FSDP ASYNC prefetch: " + comma_list(prefetch_names()) +
                                            ", or a comma list (default " + defaults.prefetch +
                                            "; SYNC never prefetches)")));
        break;
      case FsdpFlag::max_inflight:
        added.push_back(cmd.add_option("--max-inflight", flags.max_inflight,
                                       help("FSDP ASYNC rate limit: gathered units allowed at once (default " +
                                            std::to_string(defaults.max_inflight) + "; 0: no limit)"))
                            ->check(CLI::Range(0, kMaxInflightFlag)));
        break;
      case FsdpFlag::buffers:
        added.push_back(cmd.add_option("--buffers", flags.buffers,
                                       help("FSDP gathered-parameter memory: alloc (per gather, default " +
                                            defaults.buffers + ") or pool (two buffers, YaFSDP)"))
                            ->check(CLI::IsMember(strings(unshard_buffers_names()))));
        break;
      case FsdpFlag::offload:
        flags.offload_offered = true;
        added.push_back(cmd.add_flag("--offload", flags.offload,
                                     help("FSDP CPU offload: shards and optimizer state in host memory, the optimizer "
                                          "step on the CPU")));
        break;
      case FsdpFlag::embedding_grad:
        added.push_back(
            cmd.add_option("--embedding-grad", flags.embedding_grad,
                           help("FSDP, gpt2 and llama: the input embeddings' gradient added into the "
                                "tables and reduced with the root at the backward's end (table), or its "
                                "rows all-gathered and the root reduced beside the Blocks' backward (rows); "
                                "default " +
                                defaults.embedding_grad))
                ->check(CLI::IsMember(strings(embedding_gradient_names()))));
        break;
      case FsdpFlag::impl:
        added.push_back(cmd.add_option("--impl", flags.impl,
                                       help("FSDP tasks: reference (default), student (every task from "
                                            "labs/NN-*/student.cpp), or per task, e.g. 3=student,6=student; "
                                            "N=mutant:NAME runs a known-wrong one (a wrong NAME lists them; fsdplab "
                                            "grade --mutants grades them)")));
        break;
    }
  }
  return added;
}

std::vector<CLI::Option*> add_node_flags(CLI::App& cmd, NodePlacement& nodes, std::string_view scope) {
  const std::string in = std::string(scope) + ": ";
  CLI::Option* ranks_per_node =
      cmd.add_option("--ranks-per-node", nodes.ranks_per_node,
                     in + "place the ranks on nodes of this many, --link-preset within a node and "
                          "--inter-node-link between; a collective whose group spans nodes runs at the inter-node "
                          "link's pace (default: one node)")
          ->check(CLI::Range(1, 1 << 20));
  // The link is looked up (its name checked) only where there are nodes: alone, a misspelt name would pass unread.
  CLI::Option* inter_node_link =
      cmd.add_option("--inter-node-link", nodes.inter_node_link,
                     std::string(scope) + ", with --ranks-per-node: the link preset between nodes (default: " +
                         NodePlacement{}.inter_node_link + ")")
          ->needs(ranks_per_node);
  return {ranks_per_node, inter_node_link};
}

FsdpChoice parse_fsdp_flags(const FsdpFlags& flags) {
  FsdpChoice choice;
  FsdpOptions& o = choice.options;
  o.strategy = parse_strategy(flags.strategy);
  o.hybrid_group = flags.hybrid_group;
  o.param_dtype = parse_dtype(flags.precision);
  o.reduce_dtype = parse_dtype(flags.reduce_dtype);
  o.prefetch = parse_prefetch(flags.prefetch);
  o.max_inflight = flags.max_inflight;
  o.buffers = parse_unshard_buffers(flags.buffers);
  o.offload = flags.offload;
  o.embedding_grad = parse_embedding_gradient(flags.embedding_grad);
  choice.impl = parse_impl(flags.impl);
  tasks_for(choice.impl);  // a mutant this build lacks is refused here, before a command prints anything
  return choice;
}

void warn_of_impl_choice(const FsdpChoice& choice, const FsdpFlags& flags) {
  warn_of_student_code_not_built(choice.impl);
  // Task 9's code runs only where the shards live on the host: without --offload the run would look like the
  // reference's and say nothing of why.
  if (choice.impl.replaced(9) && !choice.options.offload)
    std::cerr << "fsdplab: warning: --impl " << choice.impl.of[8] << " for task 9: CPU offload runs only with "
              << (flags.offload_offered ? "--offload" : "`fsdplab run --offload` or `fsdplab gui --offload`, not here")
              << "; this run never calls task 9's code\n";
}

void warn_of_student_code_not_built(const ImplChoice& choice) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (error) return;
  const fs::file_time_type built = fs::last_write_time(self, error);
  if (error) return;
  const FsdpTasks tasks = tasks_for(choice);
  for (int n = 1; n <= kTaskCount; ++n) {
    if (choice.of[static_cast<std::size_t>(n - 1)] != "student") continue;
    const char* file = tasks.task(n).origin().file_name();  // as the compiler saw it: this tree's absolute path
    const fs::file_time_type edited = fs::last_write_time(file, error);
    if (error || edited <= built) continue;
    const std::string changed(repository_path(file));
    std::fprintf(stderr,
                 "fsdplab: warning: %s changed after this fsdplab was built: what runs is its code as of the last "
                 "build that succeeded. Build again (bash scripts/build.sh), and fix what the build says first\n",
                 changed.c_str());
  }
}

std::string impl_label(const ImplChoice& choice) {
  if (!choice.any_replaced()) return "reference";
  std::string tasks;
  bool all = true;
  for (int n = 1; n <= kTaskCount; ++n) {
    const std::string& impl = choice.of[static_cast<std::size_t>(n - 1)];
    if (impl == "student") tasks += (tasks.empty() ? "" : ", ") + std::to_string(n);
    else all = false;
    if (impl.starts_with("mutant:")) return impl_name(choice);  // the grader's mutants: say which
  }
  return "student (" + (all ? std::string("all") : tasks) + ")";
}

}  // namespace fsdplab::app
