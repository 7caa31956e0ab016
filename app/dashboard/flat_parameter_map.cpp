#include "app/dashboard/flat_parameter_map.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "app/dashboard/palette.hpp"
#include "app/dashboard/printable_text.hpp"
#include "engine/fsdp/hybrid_shard_task.hpp"
#include "engine/runtime/error.hpp"
#include "engine/train/model_factory.hpp"
#include "labs/student_tasks.hpp"

namespace fsdplab::app {

// ---- the plan --------------------------------------------------------------------------------------

namespace {

// Which implementations of tasks 7 (the units) and 2 (their layout) `impl` runs: "reference" when both are the
// reference's, else the ones that are not, as --impl names them ("2=mutant:padding-off-by-one").
std::string layout_tasks(const ImplChoice& impl) {
  std::string named;
  for (const int task : {2, 7})
    if (impl.replaced(task))
      named += (named.empty() ? "" : ",") + std::to_string(task) + "=" + impl.of[static_cast<std::size_t>(task - 1)];
  return named.empty() ? "reference" : named;
}

// What the map draws must fit the unit: an Error naming what does not. (A layout that fits and is still wrong,
// a padding too large or the next rank's slices, is drawn as it is: that is what the map is for.)
void check_layout(const FlatParamLayout& layout, const UnitPlan& plan, int shards) {
  check(layout.world == shards, "a layout for a world of ", layout.world, "; expected the shard group's ", shards);
  check(layout.padded_numel >= layout.used_numel && layout.used_numel >= 0, "padded_numel ", layout.padded_numel,
        " and used_numel ", layout.used_numel, "; expected 0 <= used_numel <= padded_numel");
  check(layout.padded_numel % shards == 0, "padded_numel ", layout.padded_numel, "; expected a multiple of ", shards);
  check(layout.entries.size() == plan.params.size(), layout.entries.size(), " entries; expected one per parameter (",
        plan.params.size(), ")");
  for (const FlatParamEntry& e : layout.entries) {
    check(e.param != nullptr && std::count(plan.params.begin(), plan.params.end(), e.param) == 1,
          "an entry of a parameter that is not the unit's");
    check(e.numel == e.param->numel(), "'", e.param->name, "' of ", e.numel, " elements; it has ", e.param->numel());
    check(e.offset >= 0 && e.offset + e.numel <= layout.padded_numel, "'", e.param->name, "' at [", e.offset, ", ",
          e.offset + e.numel, "); expected within the flat buffer's [0, ", layout.padded_numel, ")");
  }
}

MappedSlice mapped_slice(const ShardSlice& s, const MappedUnit& unit, const std::vector<Parameter*>& params,
                         std::int64_t shard_numel) {
  const auto found = std::find(params.begin(), params.end(), s.param);
  check(found != params.end(), "a slice of a parameter that is not in the layout");
  const auto param = static_cast<std::size_t>(found - params.begin());
  const MappedParameter& p = unit.params[param];
  check(s.count > 0 && s.param_begin >= 0 && s.param_begin + s.count <= p.numel, "a slice of '", p.name, "' of [",
        s.param_begin, ", ", s.param_begin + s.count, "); expected within its ", p.numel, " elements");
  check(s.shard_offset >= 0 && s.shard_offset + s.count <= shard_numel, "a slice of '", p.name, "' at [",
        s.shard_offset, ", ", s.shard_offset + s.count, ") of the shard; expected within its ", shard_numel,
        " elements");
  const std::int64_t padding_begin = p.numel - p.padding;
  const std::int64_t padding =
      std::max<std::int64_t>(0, s.param_begin + s.count - std::max(s.param_begin, padding_begin));
  return {param, s.param_begin, s.count, s.shard_offset, padding};
}

MappedUnit map_unit(const UnitPlan& plan, const FlatParameterTask& flat, int shards, std::int64_t align) {
  const FlatParamLayout layout = flat.plan(plan.params, shards, align);
  try {
    check_layout(layout, plan, shards);
  } catch (const Error& e) {
    fail("FlatParameterTask::plan's layout: ", e.what());
  }
  MappedUnit unit;
  unit.name = plan.name;
  unit.padded_numel = layout.padded_numel;
  unit.shard_numel = layout.shard_numel();
  std::vector<FlatParamEntry> entries = layout.entries;
  std::sort(entries.begin(), entries.end(),
            [](const FlatParamEntry& a, const FlatParamEntry& b) { return a.offset < b.offset; });
  std::vector<Parameter*> params;  // by index in unit.params
  for (const FlatParamEntry& e : entries) {
    unit.params.push_back({e.param->name, e.offset, e.numel, e.param->numel() - e.param->logical_numel()});
    params.push_back(e.param);
  }
  for (int chunk = 0; chunk < shards; ++chunk) {
    std::vector<MappedSlice>& slices = unit.chunks.emplace_back();
    try {
      for (const ShardSlice& s : flat.shard_slices(layout, chunk))
        slices.push_back(mapped_slice(s, unit, params, unit.shard_numel));
    } catch (const std::exception& e) {
      fail("FlatParameterTask::shard_slices of chunk ", chunk, ": ", e.what());
    }
  }
  return unit;
}

// The first way `unit` differs from `reference`, the same unit laid out by the reference's task 2: a parameter's
// place in the flat buffer, its size, a chunk's slices, in that order (each may follow from the one before); "" when
// they are the same. A padding or an alignment a few elements off is a fraction of a pixel in the map: this says it.
std::string layout_difference(const MappedUnit& unit, const MappedUnit& reference) {
  const auto n = [](std::int64_t v) { return std::to_string(v); };
  for (const MappedParameter& want : reference.params) {
    const auto got = std::find_if(unit.params.begin(), unit.params.end(),
                                  [&](const MappedParameter& p) { return p.name == want.name; });
    if (got != unit.params.end() && got->offset != want.offset)
      return "'" + want.name + "' at flat offset " + n(got->offset) + "; the reference's " + n(want.offset);
  }
  if (unit.padded_numel != reference.padded_numel)
    return "padded to " + n(unit.padded_numel) + " elements; the reference's " + n(reference.padded_numel);
  const auto slice_text = [&](const MappedUnit& u, const std::vector<MappedSlice>& slices, std::size_t i) {
    if (i >= slices.size()) return std::string("none");
    const MappedSlice& s = slices[i];
    return "'" + u.params[s.param].name + "' [" + n(s.param_begin) + ", " + n(s.param_begin + s.count) +
           ") at shard offset " + n(s.shard_offset);
  };
  for (std::size_t c = 0; c < reference.chunks.size() && c < unit.chunks.size(); ++c) {
    for (std::size_t i = 0; i < std::max(unit.chunks[c].size(), reference.chunks[c].size()); ++i) {
      const std::string got = slice_text(unit, unit.chunks[c], i), want = slice_text(reference, reference.chunks[c], i);
      if (got != want)
        return "chunk " + n(static_cast<std::int64_t>(c)) + "'s slice " + n(static_cast<std::int64_t>(i)) + ": " + got +
               "; the reference's " + want;
    }
  }
  return "";
}

// How `unit`, made by a task 7 not the reference's, differs from the reference's units (`reference`, the same model):
// the reference's unit of its name holds other parameters, the first one named with the unit the reference puts it
// in, or the reference has none of its name; "" when it holds what the reference's does, in the same order.
std::string unit_difference(const UnitPlan& unit, const std::vector<UnitPlan>& reference) {
  const auto same =
      std::find_if(reference.begin(), reference.end(), [&](const UnitPlan& r) { return r.name == unit.name; });
  if (same == reference.end()) return "a unit the reference's task 7 does not make";
  if (unit.params == same->params) return "";
  const auto reference_unit_of = [&](const Parameter* p) -> std::string {
    for (const UnitPlan& r : reference)
      if (std::find(r.params.begin(), r.params.end(), p) != r.params.end()) return r.name;
    return "";
  };
  const std::string counts = "holds " + std::to_string(unit.params.size()) + " parameters, the reference's " +
                             std::to_string(same->params.size()) + ": ";
  for (const Parameter* p : unit.params)
    if (std::find(same->params.begin(), same->params.end(), p) == same->params.end())
      return counts + "'" + p->name + "' is in the reference's '" + reference_unit_of(p) + "'";
  for (const Parameter* p : same->params)
    if (std::find(unit.params.begin(), unit.params.end(), p) == unit.params.end())
      return counts + "'" + p->name + "' is missing";
  return "holds the reference's parameters in another order (the order given is the flat buffer's)";
}

// Task 8's shard group colour of each rank (Communicator::split's colour, rank by rank).
std::vector<int> shard_colors(const HybridShardTask& task, int world, int s) {
  std::vector<int> colors;
  for (int r = 0; r < world; ++r) colors.push_back(task.shard_group_color(r, s));
  return colors;
}

// The ranks of `rank`'s colour ("0, 1, 2"): its shard group.
std::string group_of(const std::vector<int>& colors, int rank) {
  std::string members;
  for (std::size_t r = 0; r < colors.size(); ++r)
    if (colors[r] == colors[static_cast<std::size_t>(rank)])
      members += (members.empty() ? "" : ", ") + std::to_string(r);
  return members;
}

// Under hybrid sharding (1 < S < W), a task 8 not the reference's: the groups its colours make, as the run makes
// them (Communicator::split, a group ordered by rank). A unit is sharded over its group, however many ranks that
// holds: each rank's chunk is its place there (FlatParameterMap::chunk_by_rank) and the group's size the map's S.
// Groups of unequal sizes, or what the task throws, are said, and the reference's groups drawn.
void map_shard_groups(FlatParameterMap& map, const HybridShardTask& task) {
  const int world = map.world, s = map.shard_group;
  std::vector<int> colors;
  try {
    colors = shard_colors(task, world, s);
  } catch (const std::exception& e) {
    map.groups_differ = "task 8, shard_group_color: " + std::string(e.what());
    return;
  }
  const auto group_size = [&](int r) {
    return static_cast<int>(std::count(colors.begin(), colors.end(), colors[static_cast<std::size_t>(r)]));
  };
  for (int r = 1; r < world; ++r)
    if (group_size(r) != group_size(0)) {
      map.groups_differ = "task 8's shard_group_color makes groups of unequal sizes (rank 0's: " + group_of(colors, 0) +
                          "; rank " + std::to_string(r) + "'s: " + group_of(colors, r) +
                          "): the map shows the reference's groups";
      return;
    }
  const std::vector<int> reference = shard_colors(reference_hybrid_shard(), world, s);
  for (int r = 0; r < world; ++r)
    if (const std::string mine = group_of(colors, r), theirs = group_of(reference, r); mine != theirs) {
      map.groups_differ = "task 8's shard groups unlike the reference's: rank " + std::to_string(r) +
                          " shards a unit over ranks " + mine + ", the reference's " + theirs +
                          " (each rank's cells are its chunk in its group)";
      break;
    }
  if (map.groups_differ.empty()) return;  // the reference's groups: rank r holds chunk r % S
  map.shard_group = group_size(0);
  for (int r = 0; r < world; ++r)
    map.chunk_by_rank.push_back(
        static_cast<int>(std::count(colors.begin(), colors.begin() + r, colors[static_cast<std::size_t>(r)])));
}

}  // namespace

FlatParameterMap plan_flat_parameter_map(const RunConfig& run, const FsdpOptions& options, const ImplChoice& impl) {
  FlatParameterMap map;
  map.world = run.world;
  map.shard_group = shard_group_size(options, run.world);
  map.tasks = layout_tasks(impl);
  const FsdpTasks tasks = tasks_for(impl);
  if (impl.replaced(8) && map.shard_group > 1 && map.shard_group < map.world)
    map_shard_groups(map, *tasks.hybrid_shard);
  BuiltModel built = build_model(run);
  std::vector<UnitPlan> plans;
  // A student's code may throw anything, not only an Error: whatever it is, the map says it and the rest of
  // the dashboard goes on.
  try {
    plans = tasks.integration->plan_units(*built.model, built.unit_kinds);
  } catch (const std::exception& e) {
    map.error = "task 7, IntegrationTask::plan_units: " + std::string(e.what());
    return map;
  }
  for (const UnitPlan& plan : plans) {
    try {
      map.units.push_back(map_unit(plan, *tasks.flat_parameter, map.shard_group, options.align));
    } catch (const std::exception& e) {
      // The reference's task 2 refusing a unit of a student's plan is the plan's mistake (a parameter given twice).
      map.error = impl.replaced(7) && !impl.replaced(2)
                      ? "task 7's plan_units made unit '" + plan.name +
                            "', which task 2 (the reference's) cannot lay out: " + e.what()
                      : "task 2 on unit '" + plan.name + "': " + e.what();
      map.units.clear();
      return map;
    }
  }
  // Where task 7 is not the reference's, a unit is first compared with the reference's of its name (which parameters
  // it holds: task 2's layout of other parameters would differ anyway); where task 2 is not, its layout with the
  // reference's layout of the same unit.
  const FsdpTasks reference = tasks_for(ImplChoice{});
  if (impl.replaced(7)) {
    const std::vector<UnitPlan> reference_plans = reference.integration->plan_units(*built.model, built.unit_kinds);
    for (std::size_t u = 0; u < plans.size(); ++u) map.units[u].differs = unit_difference(plans[u], reference_plans);
    for (const UnitPlan& r : reference_plans)
      if (std::none_of(plans.begin(), plans.end(), [&](const UnitPlan& p) { return p.name == r.name; }))
        map.units_missing.push_back(r.name);
  }
  if (impl.replaced(2)) {
    for (std::size_t u = 0; u < plans.size(); ++u) {
      if (!map.units[u].differs.empty()) continue;
      try {
        map.units[u].differs = layout_difference(
            map.units[u], map_unit(plans[u], *reference.flat_parameter, map.shard_group, options.align));
      } catch (const std::exception& e) {  // a unit of a student's task 7 that the reference's task 2 refuses
        map.units[u].differs = std::string("the reference's task 2 refuses this unit: ") + e.what();
      }
    }
  }
  return map;
}

// ---- the panel -------------------------------------------------------------------------------------

namespace {

// The grid's layout, in pixels. Cells share what the names leave; where even the narrowest cells do not
// fit, the grid scrolls sideways under the names and the rank headers, which stay put.
constexpr float kCellGap = 2;        // between two ranks' cells
constexpr float kMinCellWidth = 12;  // a cell's least width: its colours still read
constexpr float kHeaderGap = 6;      // between two ranks' headers, about a space
constexpr float kNamePad = 8;        // between a unit's name and its first cell
constexpr int kMinNameChars = 12;    // names are elided no shorter than this many characters' width
constexpr float kRowPad = 6;         // a row is a text line and this much
constexpr float kSubPixel = 1;       // a slice narrower than a pixel is drawn a pixel wide, inside its cell

// Neighbouring parameters get clearly different hues (golden-ratio steps round the colour wheel).
ImU32 parameter_color(std::size_t index, float alpha) {
  float r = 0, g = 0, b = 0;
  ImGui::ColorConvertHSVtoRGB(std::fmod(static_cast<float>(index) * 0.618034f, 1.0f), 0.55f, 0.9f, r, g, b);
  return ImGui::ColorConvertFloat4ToU32(ImVec4(r, g, b, alpha));
}

const char* state_name(UnitState s) {
  switch (s) {
    case UnitState::sharded: return "sharded: only this rank's chunk is held";
    case UnitState::gathering: return "gathering: the all-gather is issued, compute has not waited for it yet";
    case UnitState::unsharded: return "unsharded: the whole unit is gathered, its parameters point into it";
  }
  return "";
}

bool contains(ImVec2 min, ImVec2 max, ImVec2 p) { return p.x >= min.x && p.x < max.x && p.y >= min.y && p.y < max.y; }

void cell_tooltip(const FlatParameterMap& map, std::size_t u, int r, UnitState state) {
  const MappedUnit& unit = map.units[u];
  const int chunk = map.chunk_of(r);
  const std::int64_t chunk_begin = unit.shard_numel * chunk;
  const std::vector<MappedSlice>& slices = unit.chunks[static_cast<std::size_t>(chunk)];
  ImGui::BeginTooltip();
  ImGui::Text("unit %zu '%s', rank %d: chunk %d = flat [%lld, %lld) of %lld", u, unit.name.c_str(), r, chunk,
              static_cast<long long>(chunk_begin), static_cast<long long>(chunk_begin + unit.shard_numel),
              static_cast<long long>(unit.padded_numel));
  ImGui::TextUnformatted(state_name(state));
  constexpr std::size_t kShown = 12;
  for (std::size_t i = 0; i < slices.size() && i < kShown; ++i) {
    const MappedSlice& s = slices[i];
    const MappedParameter& p = unit.params[s.param];
    ImGui::Text("  %s [%lld, %lld) of %lld", p.name.c_str(), static_cast<long long>(s.param_begin),
                static_cast<long long>(s.param_begin + s.count), static_cast<long long>(p.numel));
    if (s.padding > 0)  // [Note: the padded vocabulary]
      ImGui::Text("    of which %lld are padding rows: zeros the GPU's GEMM tiles want, never trained",
                  static_cast<long long>(s.padding));
  }
  if (slices.size() > kShown) ImGui::Text("  ... %zu more", slices.size() - kShown);
  if (slices.empty()) ImGui::TextUnformatted("  padding only");
  ImGui::EndTooltip();
}

}  // namespace

void FlatParameterPanel::draw(const FlatParameterMap& map, const FsdpEventLog& log, int source,
                              const std::string& run) {
  cells_.clear();
  headers_.clear();
  names_.clear();
  layout_line_.clear();
  difference_line_.clear();
  error_shown_.clear();
  // Two runs side by side may lay their units out differently (--compare impl with a task 2 or 7 of the
  // student's): the map is the step-through's run's, its layout and its states; say whose, and whose tasks.
  ImGui::TextUnformatted("run:");
  ImGui::SameLine();
  text_elided(run, ImGui::GetContentRegionAvail().x);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("%s: the step-through's run, whose layout and units' states the map shows (choose it there)",
                      run.c_str());
  layout_line_ = "layout by tasks 2 and 7: " + (map.tasks == "reference" ? "the reference's" : map.tasks);
  text_wrapped_at_spaces(layout_line_);
  if (!map.error.empty()) {
    // A student's task 2 still at its TODO, or one whose layout does not fit its unit: nothing to draw but why.
    error_shown_ = "no map: " + printable(map.error);
    ImGui::PushStyleColor(ImGuiCol_Text, kFailedColor);
    text_wrapped_at_spaces(error_shown_);
    ImGui::PopStyleColor();
    return;
  }
  const auto differing =
      std::count_if(map.units.begin(), map.units.end(), [](const MappedUnit& u) { return !u.differs.empty(); });
  if (differing > 0 || !map.units_missing.empty() || !map.groups_differ.empty()) {
    if (!map.groups_differ.empty()) difference_line_ = printable(map.groups_differ);
    if (differing > 0) {
      const MappedUnit& first =
          *std::find_if(map.units.begin(), map.units.end(), [](const MappedUnit& u) { return !u.differs.empty(); });
      difference_line_ += std::string(difference_line_.empty() ? "" : "; ") + std::to_string(differing) + " of " +
                          std::to_string(map.units.size()) +
                          " units unlike the reference's (names in red; hover one): '" + first.name + "' " +
                          printable(first.differs);
    }
    if (!map.units_missing.empty()) {
      difference_line_ += std::string(difference_line_.empty() ? "" : "; ") + "the reference's task 7 also makes " +
                          std::to_string(map.units_missing.size()) + " unit" +
                          (map.units_missing.size() == 1 ? "" : "s") + " this run does not: '" +
                          printable(map.units_missing.front()) + "'" + (map.units_missing.size() > 1 ? ", ..." : "");
    }
    ImGui::PushStyleColor(ImGuiCol_Text, kFailedColor);
    text_wrapped_at_spaces(difference_line_);
    ImGui::PopStyleColor();
  } else if (map.tasks != "reference") {
    // A student's tasks 2 or 7 that lay every unit out as the reference's do: said, so that right is seen as right.
    difference_line_ = "all " + std::to_string(map.units.size()) + " units laid out as the reference's";
    text_wrapped_at_spaces(difference_line_);
  }
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  // Under hybrid shard a unit is cut into S chunks, and rank r holds chunk r % S: the replicas repeat the columns.
  const std::string chunks =
      map.shard_group == map.world
          ? "chunk r of each unit's flat buffer is rank r's shard (S = " + std::to_string(map.shard_group) + ")"
      : map.chunk_by_rank.empty()
          ? "rank r holds chunk r % S of each unit's flat buffer (S = " + std::to_string(map.shard_group) +
                ": ranks r and r + S hold the same)"
          : "each rank holds the chunk of its place in its shard group, as the run's task 8 groups the ranks (S = " +
                std::to_string(map.shard_group) + ")";
  text_wrapped_at_spaces(chunks +
                         "; colours are parameters, grey is padding. Dim: sharded; orange frame: gather issued; "
                         "bright: unsharded");
  ImGui::PopStyleColor();
  if (!ImGui::BeginChild("flat_parameter_map", ImVec2(0, 0), false, ImGuiWindowFlags_HorizontalScrollbar)) {
    ImGui::EndChild();
    return;
  }
  ImDrawList& draw = *ImGui::GetWindowDrawList();
  const int world = std::max(map.world, 1);
  const ImVec2 view = ImGui::GetContentRegionAvail();  // the visible part of the grid, scrollbars left out
  scroll_max_x_ = ImGui::GetScrollMaxX();
  const float avail = view.x;
  const float row_height = ImGui::GetTextLineHeight() + kRowPad;

  // Widths: cells at least kMinCellWidth; names in full where that leaves room, else elided down to
  // kMinNameChars characters; what is still too wide scrolls.
  float widest_name = 0;
  for (const MappedUnit& unit : map.units)
    widest_name = std::max(widest_name, ImGui::CalcTextSize(unit.name.c_str()).x);
  const float full_names = widest_name + kNamePad;
  const float min_names =
      std::min(full_names, ImGui::CalcTextSize("M").x * static_cast<float>(kMinNameChars) + kNamePad);
  name_width_ = std::clamp(avail - static_cast<float>(world) * (kMinCellWidth + kCellGap), min_names, full_names);
  const float cell_width = std::max(kMinCellWidth, (avail - name_width_) / static_cast<float>(world) - kCellGap);
  // The ranks' headers, a space apart at least: "rank 3" or "r3" over every cell where the widest fits one,
  // else bare numbers (under a "rank" heading) over every second, fourth... cell, the others unlabelled.
  const std::string last_rank = std::to_string(world - 1);
  const auto fits = [&](const std::string& header, int cells) {
    return ImGui::CalcTextSize(header.c_str()).x + kHeaderGap <= static_cast<float>(cells) * (cell_width + kCellGap);
  };
  const char* header_prefix = "";
  int header_every = 1;
  if (fits("rank " + last_rank, 1)) {
    header_prefix = "rank ";
  } else if (fits("r" + last_rank, 1)) {
    header_prefix = "r";
  } else {
    while (header_every < world && !fits(last_rank, header_every)) header_every *= 2;
  }

  // The grid scrolls (origin moves); the names stay at the window's left, the headers at its top.
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 window_min(origin.x + ImGui::GetScrollX(), origin.y + ImGui::GetScrollY());
  const ImVec2 window_max(window_min.x + view.x, window_min.y + view.y);
  grid_min_ = ImVec2(window_min.x + name_width_, window_min.y + row_height);
  grid_max_ = window_max;
  const auto cell_x = [&](int r) { return origin.x + name_width_ + static_cast<float>(r) * (cell_width + kCellGap); };
  const auto row_y = [&](std::size_t u) { return origin.y + row_height * static_cast<float>(u + 1); };
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  const bool hovered = ImGui::IsWindowHovered();

  draw.PushClipRect(ImVec2(grid_min_.x, window_min.y), ImVec2(grid_max_.x, grid_min_.y), true);
  for (int r = 0; r < world; r += header_every) {
    const std::string header = header_prefix + std::to_string(r);
    const ImVec2 at(cell_x(r), window_min.y);
    draw.AddText(at, ImGui::GetColorU32(ImGuiCol_Text), header.c_str());
    headers_.push_back({header, at, ImVec2(at.x + ImGui::CalcTextSize(header.c_str()).x, at.y + row_height)});
  }
  draw.PopClipRect();
  if (*header_prefix == '\0') {  // bare numbers: the names' column says what they count
    constexpr const char* kHeading = "rank";
    draw.AddText(ImVec2(grid_min_.x - kNamePad - ImGui::CalcTextSize(kHeading).x, window_min.y),
                 ImGui::GetColorU32(ImGuiCol_TextDisabled), kHeading);
  }

  // Only the rows in view are drawn (a nested wrap has hundreds of units); each one's cells are laid out.
  const auto first_row = static_cast<std::size_t>(std::max(0.0f, std::floor((grid_min_.y - row_y(0)) / row_height)));
  for (std::size_t u = 0; u < map.units.size(); ++u) {
    const MappedUnit& unit = map.units[u];
    const float y = row_y(u);
    const bool row_visible = u >= first_row && y < grid_max_.y;
    for (int r = 0; r < world; ++r)
      cells_.push_back({static_cast<int>(u), r, log.unit_state(source, r, static_cast<int>(u)),
                        ImVec2(cell_x(r), y + 2), ImVec2(cell_x(r) + cell_width, y + row_height - 2)});
    if (!row_visible) continue;

    // The name, elided at its front: the tail tells nested units apart ("...self_attn.q_proj").
    draw.PushClipRect(ImVec2(window_min.x, grid_min_.y), ImVec2(grid_min_.x, grid_max_.y), true);
    const std::string name = elided(unit.name, name_width_ - kNamePad, Elide::front);
    const ImVec2 name_at(window_min.x, y + kRowPad / 2);
    draw.AddText(name_at, unit.differs.empty() ? ImGui::GetColorU32(ImGuiCol_Text) : kFailedColor, name.c_str());
    const ImVec2 name_end(name_at.x + ImGui::CalcTextSize(name.c_str()).x, y + row_height);
    names_.push_back({name, name_at, name_end});
    draw.PopClipRect();
    if (hovered && (name != unit.name || !unit.differs.empty()) &&
        contains(ImVec2(window_min.x, std::max(y, grid_min_.y)), ImVec2(grid_min_.x, y + row_height), mouse)) {
      ImGui::SetTooltip("unit %zu '%s'%s%s", u, unit.name.c_str(),
                        unit.differs.empty() ? "" : ": unlike the reference's: ", printable(unit.differs).c_str());
    }

    draw.PushClipRect(grid_min_, grid_max_, true);
    for (int r = 0; r < world; ++r) {
      const Cell& cell = cells_[cells_.size() - static_cast<std::size_t>(world - r)];
      const ImVec2 min = cell.min, max = cell.max;
      if (max.x < grid_min_.x || min.x > grid_max_.x) continue;
      const float alpha = cell.state == UnitState::sharded ? 0.45f : 1.0f;
      draw.AddRectFilled(min, max, IM_COL32(90, 90, 90, 255));  // padding, unless a parameter covers it
      const double scale =
          static_cast<double>(cell_width) / static_cast<double>(std::max<std::int64_t>(unit.shard_numel, 1));
      for (const MappedSlice& s : unit.chunks[static_cast<std::size_t>(map.chunk_of(r))]) {
        const float x0 = min.x + static_cast<float>(static_cast<double>(s.shard_offset) * scale);
        const float x1 = std::min(
            max.x, std::max(x0 + kSubPixel,
                            min.x + static_cast<float>(static_cast<double>(s.shard_offset + s.count) * scale)));
        draw.AddRectFilled(ImVec2(x0, min.y), ImVec2(x1, max.y), parameter_color(s.param, alpha));
      }
      if (cell.state == UnitState::gathering)
        draw.AddRect(min, max, category_color(OpCategory::all_gather), 0, 0, 2.5f);  // the gather's colour
      if (cell.state == UnitState::unsharded) draw.AddRect(min, max, IM_COL32(255, 255, 255, 255), 0, 0, 2.0f);
      if (hovered && contains(grid_min_, grid_max_, mouse) && contains(min, max, mouse))
        cell_tooltip(map, u, r, cell.state);
    }
    draw.PopClipRect();
  }
  // The grid's whole extent, for the scrollbars.
  ImGui::Dummy(ImVec2(name_width_ + static_cast<float>(world) * (cell_width + kCellGap),
                      row_height * static_cast<float>(map.units.size() + 1)));
  ImGui::EndChild();
}

}  // namespace fsdplab::app
