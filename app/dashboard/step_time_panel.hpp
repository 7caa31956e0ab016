// step_time_panel.hpp — the dashboard's STEP TIMES panel: each step's duration (virtual time on sim, wall clock on
// cuda) for every source as it happens, SYNC against ASYNC, with the compute-only, comm-only and ideal lines and the
// overlap efficiency η; a table of each series' times and overlap %.
//
// Series: each source gives a SYNC series (its steps when the source runs SYNC, or the steps flagged
// StepTime::sync of an A/B source) and an ASYNC series (the others). The panel compares the first SYNC
// series with the first ASYNC one — two sources, or the two halves of one A/B source — with the
// definitions of `fsdplab bench --what overlap` (app/bench_overlap.cpp), read from the stored steps:
//   pairs      the k-th SYNC step with the k-th ASYNC step, each series without its source's first step
//              (warm-up: forward prefetch records the forward order in it) and, where the run's end is
//              known, its last (no next step to gather the root for: shorter than the steady state, which
//              `bench --what overlap` measures); two runs of one configuration pair step i with step i,
//              whichever of them is ahead
//   averages   over the last kRecentSteps pairs:
//              T_sync, T_async   mean step durations of the SYNC and of the ASYNC steps
//              compute           mean |union of compute| on rank 0 of the ASYNC steps (StepTime::compute)
//              comm              mean link busy time on rank 0 of the ASYNC steps (StepTime::comm)
//              ideal             max(compute, comm): perfect overlap
//   η          (T_sync − T_async) / (T_sync − ideal): the share of what perfect overlap would save that
//              ASYNC saves; undefined when T_sync ≤ ideal (nothing to hide)
// Plot: duration per step index, SYNC as squares, ASYNC as circles, the three times as horizontal lines
// once a pair is compared (the legend lists them only then), each value labelled where it covers no other
// label and no marker; a tooltip (step, duration, compute, comm, loss) over a point; a table of each series
// under it (its last step; the means of its recent steps; their overlap %, |comm ∩ compute| / |comm| as `bench
// --what overlap` defines it, so SYNC's 0 % reads beside ASYNC's), whose numbers keep their width and whose names
// are elided; a run that failed (TraceSource::failure) is marked "failed" there, its error in the row's tooltip, so
// it does not pass for a slow run. Beside a reference
// (--compare impl), a line says whether the other run's losses are the reference's, step by step, within 1e-5
// relative as the grader's trainings compare them: a wrong value shows there before any curve parts.
// draw() submits into the current ImGui window (the dashboard's "Step times" window).
#pragma once
#include <imgui.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "app/dashboard/timeline_format.hpp"
#include "app/dashboard/trace_store.hpp"

namespace fsdplab::app {

// The unit the panel (and the Run panel's lines) write step times in: time_unit_for the longest step of `store`. The
// panel's numbers stay in milliseconds (Summary's *_ms); only their text changes.
TimeUnit step_time_unit(const TraceStore& store);

class StepTimePanel {
 public:
  static constexpr int kRecentSteps = 10;  // pairs the averages are over
  static constexpr float kPlotHeight = 200;

  // reference: the source the other's losses are compared with (--compare impl's reference, not in a dry run, whose
  // losses are not computed), or none.
  void draw(const TraceStore& store, std::optional<int> reference = std::nullopt);

  // The last frame's line on the losses beside the reference's: "losses differ from step 1: 4.1704, the
  // reference's 4.1629" or "losses as the reference's to step 3"; none without a reference, or before both runs
  // have a step.
  struct LossComparison {
    std::string text;
    bool differ = false;
  };
  const std::optional<LossComparison>& losses() const { return losses_; }

  struct Summary {
    int sync_source = -1, async_source = -1;  // the sources compared (equal for an A/B source); -1: none
    int steps_compared = 0;                   // (SYNC, ASYNC) pairs the averages are over
    double t_sync_ms = 0, t_async_ms = 0, compute_ms = 0, comm_ms = 0, ideal_ms = 0;
    std::optional<double> eta;
    // What overlap can take off T_sync − ideal: min(compute, comm). The rest of the SYNC step past the ideal is
    // the compute stream waiting (launches, host work), which no schedule hides; where it is most of the gap (one
    // rank, whose collectives are local copies; CPU offload's host optimizer), η cannot come near 1, and the
    // panel says so (eta_reach_note) with η's reach, overlappable / (T_sync − ideal).
    double overlappable_ms = 0;
    std::string eta_reach_note;  // empty where the reach is 0.8 or more
    std::string why;  // why η is undefined, or why nothing is compared yet; empty when η is defined
  };
  const Summary& summary() const { return summary_; }  // of the last frame

  // For tests: the points the last frame plotted (one per step when they fit, the plot's rect) and the
  // one under the mouse.
  struct Point {
    int source = 0;
    int index = 0;  // in the source's steps
    int step = 0;
    bool sync = false;
    ImVec2 pos;
  };
  const std::vector<Point>& points() const { return points_; }
  std::optional<Point> hovered() const;
  ImVec2 plot_min() const { return plot_min_; }
  ImVec2 plot_max() const { return plot_max_; }
  // For tests: the legend's names, the reference lines' labels (text and backing box), the table's columns
  // and whether each of its numbers fitted its column, as the last frame drew them.
  struct Label {
    std::string text;
    ImVec2 min, max;
  };
  const std::vector<std::string>& legend() const { return legend_; }
  const std::vector<Label>& reference_labels() const { return reference_labels_; }
  const std::vector<std::string>& table_columns() const { return table_columns_; }
  bool table_fits() const { return table_fits_; }
  // For tests: the table's rows (each series' whole name, whether it is marked failed, where its name cell is, its
  // numbers by column, shown or not: "" where it has none yet) and the text of the tooltip shown over one of them,
  // "" when none was.
  struct TableRow {
    std::string name;
    bool failed = false;
    ImVec2 min, max;
    std::map<std::string, std::string> numbers;
  };
  const std::vector<TableRow>& table_rows() const { return table_rows_; }
  const std::string& row_tooltip() const { return row_tooltip_; }

 private:
  std::optional<LossComparison> losses_;
  Summary summary_;
  std::vector<Point> points_;
  int hovered_ = -1;
  ImVec2 plot_min_, plot_max_;
  std::vector<std::string> legend_;
  std::vector<Label> reference_labels_;
  std::vector<std::string> table_columns_;
  bool table_fits_ = true;
  std::vector<TableRow> table_rows_;
  std::string row_tooltip_;
};

// The panel's numbers without drawing: which series are compared and their averages (see above).
StepTimePanel::Summary summarize_steps(const TraceStore& store, int recent = StepTimePanel::kRecentSteps);

}  // namespace fsdplab::app
