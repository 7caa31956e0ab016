// flat_parameter_map.hpp — the FlatParameter map panel: units × ranks, which slice of which parameter
// each rank's shard holds (task 2), and each unit's live state on each rank (sharded, being gathered,
// unsharded) as the FSDP events report it.
//
// The layout is planned here from a run's configuration with the tasks that run uses (its --impl): its
// task 7 makes the units, its task 2 lays each one out and names each chunk's slices, its task 8 groups the
// ranks that shard a unit under hybrid sharding, the same plan every rank makes (shapes only, nothing allocated). So a student's layout is the one drawn, mistakes included,
// the map is right before the first event arrives, and it costs nothing per frame but drawing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <imgui.h>

#include "app/dashboard/fsdp_event_log.hpp"
#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/fsdp/sharding.hpp"
#include "engine/train/run_config.hpp"

namespace fsdplab::app {

struct MappedParameter {
  std::string name;
  std::int64_t offset = 0;  // in the unit's flat buffer
  std::int64_t numel = 0;
  std::int64_t padding = 0;  // its last elements that are padding rows, in storage only (Parameter::padding_rows)
};

// A slice of one parameter that one chunk holds (task 2's ShardSlice, by the parameter's index).
struct MappedSlice {
  std::size_t param = 0;         // in MappedUnit::params
  std::int64_t param_begin = 0;  // first element of the parameter in the chunk
  std::int64_t count = 0;
  std::int64_t shard_offset = 0;  // where it sits in the chunk
  std::int64_t padding = 0;       // of its elements, the parameter's padding rows
};

struct MappedUnit {
  std::string name;
  std::int64_t padded_numel = 0;
  std::int64_t shard_numel = 0;
  std::vector<MappedParameter> params;  // in flat order
  std::vector<std::vector<MappedSlice>> chunks;  // by chunk (shard_group of them): its slices, as task 2 gives them
  // Where a task 7 or 2 not the reference's made it or laid it out: how it differs from the reference's, the first
  // difference in words, which no pixel would show: the parameters it holds against the reference's unit of its
  // name ("holds 12 parameters, the reference's 4: 'transformer.h.0.attn.c_attn.weight' is in the reference's
  // 'transformer.h.0.attn.c_attn'"), else its layout against the reference's layout of it ("padded to 7087874
  // elements; the reference's 7087872"). Empty where it does not differ, and in the reference's map.
  std::string differs;
};

struct FlatParameterMap {
  int world = 1;
  int shard_group = 1;  // S
  // The chunk of every unit each rank holds: its place among the ranks of its shard group, which task 8's colours
  // make under hybrid sharding (Communicator::split orders a group by rank). Empty: rank r holds chunk r % S, as under
  // the reference's colours (rank / S).
  std::vector<int> chunk_by_rank;
  // Where the run's task 8 is not the reference's and groups the ranks otherwise (shard groups of other ranks, or not
  // of S ranks): how, in words. Empty otherwise.
  std::string groups_differ;
  std::string tasks;    // which implementations of tasks 2 and 7 laid it out: "reference", or as --impl: "2=student"
  // Why there is no layout to draw: what the tasks threw, or how what they returned is not a layout. Empty
  // when `units` holds the plan.
  std::string error;
  std::vector<MappedUnit> units;
  // Where task 7 is not the reference's: the reference's units of names no unit here has (its root, say).
  std::vector<std::string> units_missing;

  int chunk_of(int rank) const {
    return chunk_by_rank.empty() ? rank % shard_group : chunk_by_rank[static_cast<std::size_t>(rank)];
  }
};

// The units `tasks` (the implementations `impl` chooses) make of `run`'s model under `options`, laid out for its
// shard group (whose ranks its task 8 chooses under hybrid sharding), each compared with the reference's unit and
// layout where `impl` replaces task 7 or 2 (MappedUnit::differs, FlatParameterMap::units_missing). What the tasks
// throw, or a layout that does not fit its unit, is not thrown: it is the map's error.
FlatParameterMap plan_flat_parameter_map(const RunConfig& run, const FsdpOptions& options, const ImplChoice& impl);

class FlatParameterPanel {
 public:
  // Draws `map` for `source` of `log` (its units' states on each rank); `run` names that source; a map with an
  // error shows the error instead of a grid. The names
  // keep their full width where the ranks' cells still fit, else are elided at their front (the whole name in
  // a tooltip); the headers read "rank 3" where a cell is wide enough, else "r3", else "3" (under a "rank"
  // heading) over every second, fourth... cell, a space apart; where the narrowest cells do not fit, the grid
  // scrolls sideways under the names and headers, which stay in view.
  void draw(const FlatParameterMap& map, const FsdpEventLog& log, int source, const std::string& run);

  // For tests: the cell of (unit, rank) laid out in the last frame, in view or scrolled out of it, and the
  // state it showed.
  struct Cell {
    int unit = 0;
    int rank = 0;
    UnitState state = UnitState::sharded;
    ImVec2 min, max;
  };
  const std::vector<Cell>& cells() const { return cells_; }
  // A text the last frame drew: a rank's header (the labelled ranks' only), or a unit's name in view (as
  // shown, elided or not).
  struct Label {
    std::string text;
    ImVec2 min, max;
  };
  const std::vector<Label>& headers() const { return headers_; }
  const std::vector<Label>& names() const { return names_; }
  // Where cells show: the grid's visible part right of the names and under the headers.
  ImVec2 grid_min() const { return grid_min_; }
  ImVec2 grid_max() const { return grid_max_; }
  float scroll_max_x() const { return scroll_max_x_; }  // how far the grid scrolls sideways
  // The last frame's line saying whose tasks laid the map out, the one saying how many units' layouts differ from
  // the reference's and the first one's difference (where none does: that all are alike for tasks not the
  // reference's, empty for the reference's), and the error it showed instead of a grid (empty when it drew one).
  const std::string& layout_line() const { return layout_line_; }
  const std::string& difference_line() const { return difference_line_; }
  const std::string& error_shown() const { return error_shown_; }

 private:
  std::vector<Cell> cells_;
  std::vector<Label> headers_, names_;
  float name_width_ = 0;
  ImVec2 grid_min_, grid_max_;
  float scroll_max_x_ = 0;
  std::string layout_line_, difference_line_, error_shown_;
};

}  // namespace fsdplab::app
