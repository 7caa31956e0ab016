// live_session.hpp — what the dashboard is running: the settings the controls edit, the runs they
// start (SYNC and ASYNC side by side, one mode, one A/B run alternating blocks of steps, or the
// reference beside the --impl tasks, both ASYNC, with the same configuration), the
// RunControl they share, and what the panels read (the trace store, the FSDP event log, the
// FlatParameter map, the analytic memory expectation).
//
// The default is the 2-GPU workstation the lab targets: GPT-2 test-small on 2 ranks of the sim
// device's RTX-class preset and its PCIe link without peer-to-peer, where communication is a large
// share of a step and SYNC and ASYNC visibly part. Runs are paced (steps per wall second) so a person
// can watch them; pacing changes nothing in virtual time.
#pragma once
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/dashboard/flat_parameter_map.hpp"
#include "app/dashboard/fsdp_event_log.hpp"
#include "app/dashboard/live_run.hpp"
#include "app/dashboard/trace_store.hpp"
#include "app/fsdp_cli_options.hpp"
#include "engine/runtime/memory_ledger.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/train/run_control.hpp"

namespace fsdplab::app {

// impl: the same configuration twice, ASYNC, the reference's tasks beside those --impl selects.
enum class Comparison { side_by_side, sync_only, async_only, ab, impl };
inline constexpr std::array kComparisons = {Comparison::side_by_side, Comparison::sync_only, Comparison::async_only,
                                            Comparison::ab, Comparison::impl};
std::string_view comparison_name(Comparison c);  // "SYNC and ASYNC side by side", ...
// --compare's words: side-by-side, sync, async, ab, impl.
std::string_view comparison_flag(Comparison c);
Comparison parse_comparison(std::string_view flag);  // an Error naming the words expected

// Where --break stops the world: at the focus rank's first event of `kind`, or of task `task`'s code (a
// task that reports events; 0: any task), in step `from_step` or a later one.
struct BreakAt {
  std::optional<FsdpEventKind> kind;
  int task = 0;
  int from_step = 0;
  // Every other rank holds at its own such event of step from_step (RunControl::set_hold_others_from_step): a
  // screenshot's, so that every run shows the same place whatever its speed.
  bool others_hold = false;
};

struct SessionSettings {
  std::string model = "gpt2";
  std::string preset = "test-small";
  std::string attention = "auto";  // gpt2, llama: auto, exact or flash (engine/nn/causal_attention.hpp)
  int world = 2;
  // What a step trains, as `fsdplab run` takes it (a grader's "see it" repeats its case's): rows a step (0: 8, or one
  // per rank), tokens a row (0: the model's context), and the optimizer.
  std::int64_t batch = 0;
  std::int64_t seq = 0;
  std::string optimizer = "adamw";
  double lr = 1e-3;
  double clip_grad_norm = 0;   // --clip-grad-norm: 0, none
  std::string device = "sim";  // sim (virtual time) or cuda (every rank on one GPU, CUPTI kernels, wall clock)
  std::string device_preset = "rtx-4090";  // sim: the device simulated; cuda: its cost model's figures
  std::string link_preset;  // empty: the device preset's own link
  NodePlacement nodes;       // sim only
  bool emulate_link = false;  // cuda: each collective holds its stream for the link preset's time
  bool cupti = true;          // cuda: the trace's kernels from CUPTI (else each op's CUDA-event span)
  std::string sm_split = "auto";  // cuda: --sm-split auto|on|off (set_sm_split, engine/train/run_device.hpp)
  Comparison comparison = Comparison::side_by_side;
  int ab_block = 4;         // A/B: steps per block
  // Strategy (reshard after forward off = grad_op; hybrid without a group: groups of W/2), precision,
  // ASYNC prefetch (SYNC never prefetches: sync_schedule), and --impl: which tasks are the student's.
  FsdpFlags fsdp;
  int steps = 500;
  std::string wrap = "block";  // FSDP's wrap policy (model_factory.hpp): block, linear, nested or model
  bool dry_run = false;     // shapes, time and memory only: the large presets at the speed of the small
  double steps_per_second = 4;  // 0: as fast as the host computes
  // Armed on the runs' RunControl before they start, so that no event of a short run passes by before it.
  std::optional<BreakAt> break_at;

  // The runs these settings make: (label, FsdpRun, SYNC?) per source. An Error for settings that cannot
  // run (validated as `fsdplab run` validates them), before anything starts.
  struct PlannedRun {
    std::string label;
    FsdpRun run;
    bool sync = false;
    ImplChoice impl;  // the tasks it runs as the student's
    // Each rank's analytic peak by tag (memory_model.hpp): the memory panel's expectation, and on the sim device
    // the host memory the run's ranks take; nullopt for units the memory model does not describe.
    std::optional<TagBytes> expected;
  };
  std::vector<PlannedRun> plan() const;
};

class LiveSession {
 public:
  // Starts the runs of `settings` (or throws an Error and starts nothing).
  explicit LiveSession(SessionSettings settings);
  ~LiveSession();

  // Stops the current runs and starts new ones with `settings`. Settings that cannot run are refused
  // with an Error before anything is stopped: the current runs go on.
  void restart(SessionSettings settings);
  // UI thread, once a frame: moves what the ranks published into the store and the log, and a failed run's
  // error into its source (TraceSource::failure).
  std::size_t drain();

  RunControl& control() { return *control_; }
  const SessionSettings& settings() const { return settings_; }
  // Where the runs run, for the title: "sim device, virtual time" or the GPU and its clock.
  const std::string& where() const { return where_; }
  const TraceStore& store() const { return store_; }
  const FsdpEventLog& log() const { return log_; }
  // Source `source`'s FlatParameter map, laid out by the tasks it runs (--compare impl: the reference's beside
  // the student's); an Error for an unknown source.
  const FlatParameterMap& map(int source) const;
  // Per source: the analytic peak of each tag on one rank.
  const std::vector<std::optional<TagBytes>>& expected_memory() const { return expected_; }
  const std::vector<std::unique_ptr<LiveRun>>& runs() const { return runs_; }
  // The tasks source `source` runs as the student's (none for an unknown source).
  ImplChoice impl_of(int source) const;
  bool finished() const;
  // "ASYNC: <what went wrong>" for each run that failed.
  std::vector<std::string> errors() const;

 private:
  void start(const std::vector<SessionSettings::PlannedRun>& planned);
  void stop();

  SessionSettings settings_;
  std::string where_;
  const PresetCatalog& presets_ = PresetCatalog::builtin();
  std::unique_ptr<RunControl> control_;
  TraceStore store_;
  FsdpEventLog log_;
  std::vector<FlatParameterMap> maps_;  // by source
  std::vector<std::optional<TagBytes>> expected_;
  std::vector<ImplChoice> impls_;  // by source
  std::vector<std::unique_ptr<LiveRun>> runs_;
};

}  // namespace fsdplab::app
