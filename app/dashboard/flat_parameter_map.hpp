// flat_parameter_map.hpp — the FlatParameter map panel: units × ranks, which slice of which parameter
// each rank's shard holds (task 2), and each unit's live state on each rank (sharded, being gathered,
// unsharded) as the FSDP events report it.
//
// The layout is planned here from the run's configuration with the reference FlatParameter task, the
// same plan every rank makes (shapes only, nothing allocated), so the map is right before the first
// event arrives and costs nothing per frame but drawing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <imgui.h>

#include "app/dashboard/fsdp_event_log.hpp"
#include "engine/fsdp/sharding.hpp"
#include "engine/train/run_config.hpp"

namespace fsdplab::app {

struct MappedParameter {
  std::string name;
  std::int64_t offset = 0;  // in the unit's flat buffer
  std::int64_t numel = 0;
  std::int64_t padding = 0;  // its last elements that are padding rows, in storage only (Parameter::padding_rows)
};

struct MappedUnit {
  std::string name;
  std::int64_t padded_numel = 0;
  std::int64_t shard_numel = 0;
  std::vector<MappedParameter> params;  // in flat order
};

struct FlatParameterMap {
  int world = 1;
  int shard_group = 1;  // S: rank r holds chunk r % S of every unit
  std::vector<MappedUnit> units;

  int chunk_of(int rank) const { return rank % shard_group; }
};

// The units FSDP makes of `run`'s model under `options`, laid out for its shard group.
FlatParameterMap plan_flat_parameter_map(const RunConfig& run, const FsdpOptions& options);

// The slices of `unit`'s parameters inside [begin, end) of its flat buffer, in flat order: what a
// chunk holds. Elements of the range no parameter covers (alignment gaps, padding) are not listed.
struct MappedSlice {
  const MappedParameter* param = nullptr;
  std::int64_t param_begin = 0;  // first element of the parameter in the range
  std::int64_t count = 0;
  std::int64_t flat_offset = 0;  // where it sits in the flat buffer
};
std::vector<MappedSlice> slices_in(const MappedUnit& unit, std::int64_t begin, std::int64_t end);
// The elements of `slice` that are its parameter's padding rows.
std::int64_t padding_in(const MappedSlice& slice);

class FlatParameterPanel {
 public:
  // Draws `map` for `source` of `log` (its units' states on each rank); `run` names that source. The names
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
  float name_width() const { return name_width_; }  // the names' column, its gap to the cells included
  // Where cells show: the grid's visible part right of the names and under the headers.
  ImVec2 grid_min() const { return grid_min_; }
  ImVec2 grid_max() const { return grid_max_; }
  float scroll_max_x() const { return scroll_max_x_; }  // how far the grid scrolls sideways

 private:
  std::vector<Cell> cells_;
  std::vector<Label> headers_, names_;
  float name_width_ = 0;
  ImVec2 grid_min_, grid_max_;
  float scroll_max_x_ = 0;
};

}  // namespace fsdplab::app
