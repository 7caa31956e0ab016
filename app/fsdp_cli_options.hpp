// fsdp_cli_options.hpp — the FSDP flags of `fsdplab run`, `gui` and `bench`, bound once: the flags as
// the command line spells them (FsdpFlags, defaults from FsdpOptions{}), the function that adds some of
// them to a CLI11 command, and the one that turns them into FsdpOptions and the --impl choice.
//
// Names come from the engine's tables (sharding.hpp: strategy_names() ...; fsdp_tasks.hpp: parse_impl),
// so a strategy added there is accepted, listed in the help and offered by the dashboard everywhere at once.
// The dashboard's settings hold an FsdpFlags too (live_session.hpp): its controls edit the same strings.
// The three commands' node placement flags (sim only) are bound here too, by add_node_flags.
#pragma once
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/fsdp/sharding.hpp"
#include "engine/train/run_config.hpp"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace fsdplab::app {

struct FsdpFlags {
  std::string strategy;      // --strategy
  int hybrid_group = 0;      // --hybrid-group (0: not given)
  std::string precision;     // --precision: the parameter and compute dtype (run: the baseline's too)
  std::string reduce_dtype;  // --reduce-dtype
  std::string prefetch;      // --prefetch (ASYNC)
  int max_inflight = 0;      // --max-inflight
  std::string buffers;       // --buffers
  bool offload = false;      // --offload
  bool offload_offered = false;    // whether the command has --offload (add_fsdp_flags)
  std::string embedding_grad;      // --embedding-grad
  std::string impl = "reference";  // --impl

  // FsdpOptions{}'s defaults, spelled as the flags spell them.
  FsdpFlags();
};

// --max-inflight's bound (the command line's range, the Run panel's): more gathered units than any model here
// has, so any larger value would mean no limit too.
inline constexpr int kMaxInflightFlag = 1 << 16;

enum class FsdpFlag {
  strategy,
  hybrid_group,
  precision,
  reduce_dtype,
  prefetch,
  max_inflight,
  buffers,
  offload,
  embedding_grad,
  impl
};

// Adds the flags `which` to `cmd`, bound to `flags`, with their checks and help. `scope` starts each help
// text where a command's flags configure only some of its modes ("memory, overlap"); empty for none.
// Returns the options added, in the order of `which`.
std::vector<CLI::Option*> add_fsdp_flags(CLI::App& cmd, FsdpFlags& flags, std::initializer_list<FsdpFlag> which,
                                         std::string_view scope = "");

// --ranks-per-node and --inter-node-link, bound to `nodes`; `scope` starts their help ("sim", "overlap").
std::vector<CLI::Option*> add_node_flags(CLI::App& cmd, NodePlacement& nodes, std::string_view scope);

// What the flags choose. Names are checked here (an Error naming what was expected); combinations that
// depend on the world size are validate_fsdp_options's, once the caller has set the mode.
struct FsdpChoice {
  FsdpOptions options;
  ImplChoice impl;
};
FsdpChoice parse_fsdp_flags(const FsdpFlags& flags);

// Says on stderr, as warnings, what of `choice.impl` will not run as the student may think: a student's file changed
// since the build (warn_of_student_code_not_built), task 9's code replaced where nothing offloads. Called once the
// command has refused what it cannot run, so that a refused command says only why.
void warn_of_impl_choice(const FsdpChoice& choice, const FsdpFlags& flags);

// "reference", or the student's tasks for a run's label: "student (3)", "student (3, 6)", "student (all)".
std::string impl_label(const ImplChoice& choice);

// Says on stderr, as a warning, each student's file `choice` runs that changed after this fsdplab was built
// ("labs/01-meta-init/student.cpp"): what runs is its code as of the last build that succeeded, not what the file
// holds now (a build that failed, or none since the edit). warn_of_impl_choice and `grade` call it.
void warn_of_student_code_not_built(const ImplChoice& choice);

}  // namespace fsdplab::app
