#include "app/dashboard/flat_parameter_map.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/fsdp/fully_sharded_model.hpp"
#include "engine/train/model_factory.hpp"

namespace fsdplab::app {

// ---- the plan --------------------------------------------------------------------------------------

FlatParameterMap plan_flat_parameter_map(const RunConfig& run, const FsdpOptions& options) {
  FlatParameterMap map;
  map.world = run.world;
  map.shard_group = shard_group_size(options, run.world);
  BuiltModel built = build_model(run);
  const FlatParameterTask& flat = reference_flat_parameter();
  for (const UnitPlan& plan : reference_integration().plan_units(*built.model, built.unit_kinds)) {
    const FlatParamLayout layout = flat.plan(plan.params, map.shard_group, options.align);
    MappedUnit unit;
    unit.name = plan.name;
    unit.padded_numel = layout.padded_numel;
    unit.shard_numel = layout.shard_numel();
    for (const FlatParamEntry& e : layout.entries)
      unit.params.push_back({e.param->name, e.offset, e.numel, e.param->numel() - e.param->logical_numel()});
    std::sort(unit.params.begin(), unit.params.end(),
              [](const MappedParameter& a, const MappedParameter& b) { return a.offset < b.offset; });
    map.units.push_back(std::move(unit));
  }
  return map;
}

std::vector<MappedSlice> slices_in(const MappedUnit& unit, std::int64_t begin, std::int64_t end) {
  std::vector<MappedSlice> slices;
  for (const MappedParameter& p : unit.params) {
    const std::int64_t from = std::max(begin, p.offset);
    const std::int64_t to = std::min(end, p.offset + p.numel);
    if (from < to) slices.push_back({&p, from - p.offset, to - from, from});
  }
  return slices;
}

std::int64_t padding_in(const MappedSlice& slice) {
  const std::int64_t padding_begin = slice.param->numel - slice.param->padding;
  return std::max<std::int64_t>(0, slice.param_begin + slice.count - std::max(slice.param_begin, padding_begin));
}

// ---- the panel -------------------------------------------------------------------------------------

namespace {

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

}  // namespace

void FlatParameterPanel::draw(const FlatParameterMap& map, const FsdpEventLog& log, int source) {
  cells_.clear();
  ImGui::TextDisabled("chunk r of each unit's flat buffer is rank r's shard (S = %d); colours are parameters, "
                      "grey is padding. Dim: sharded; orange frame: gather issued; bright: unsharded",
                      map.shard_group);
  if (!ImGui::BeginChild("flat_parameter_map", ImVec2(0, 0), false)) {
    ImGui::EndChild();
    return;
  }
  ImDrawList& draw = *ImGui::GetWindowDrawList();
  const float label_width = 190;
  const float row_height = ImGui::GetTextLineHeight() + 6;
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float cell_width = std::max(
      24.0f, (ImGui::GetContentRegionAvail().x - label_width) / static_cast<float>(std::max(map.world, 1)) - 4);
  for (int r = 0; r < map.world; ++r) {
    char header[32];
    std::snprintf(header, sizeof header, "rank %d", r);
    draw.AddText(ImVec2(origin.x + label_width + static_cast<float>(r) * (cell_width + 4), origin.y),
                 ImGui::GetColorU32(ImGuiCol_Text), header);
  }
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  for (std::size_t u = 0; u < map.units.size(); ++u) {
    const MappedUnit& unit = map.units[u];
    const float y = origin.y + row_height * static_cast<float>(u + 1);
    draw.AddText(ImVec2(origin.x, y + 3), ImGui::GetColorU32(ImGuiCol_Text), unit.name.c_str());
    for (int r = 0; r < map.world; ++r) {
      const UnitState state = log.unit_state(source, r, static_cast<int>(u));
      const ImVec2 min(origin.x + label_width + static_cast<float>(r) * (cell_width + 4), y + 2);
      const ImVec2 max(min.x + cell_width, y + row_height - 2);
      cells_.push_back({static_cast<int>(u), r, state, min, max});
      const float alpha = state == UnitState::sharded ? 0.45f : 1.0f;
      draw.AddRectFilled(min, max, IM_COL32(90, 90, 90, 255));  // padding, unless a parameter covers it
      const std::int64_t chunk_begin = unit.shard_numel * map.chunk_of(r);
      const std::int64_t chunk_end = chunk_begin + unit.shard_numel;
      const double scale =
          static_cast<double>(cell_width) / static_cast<double>(std::max<std::int64_t>(unit.shard_numel, 1));
      const std::vector<MappedSlice> slices = slices_in(unit, chunk_begin, chunk_end);
      for (const MappedSlice& s : slices) {
        const float x0 = min.x + static_cast<float>(static_cast<double>(s.flat_offset - chunk_begin) * scale);
        const float x1 = std::max(
            x0 + 1.0f, min.x + static_cast<float>(static_cast<double>(s.flat_offset + s.count - chunk_begin) * scale));
        draw.AddRectFilled(ImVec2(x0, min.y), ImVec2(x1, max.y),
                           parameter_color(static_cast<std::size_t>(s.param - unit.params.data()), alpha));
      }
      if (state == UnitState::gathering) draw.AddRect(min, max, IM_COL32(251, 140, 0, 255), 0, 0, 2.5f);
      if (state == UnitState::unsharded) draw.AddRect(min, max, IM_COL32(255, 255, 255, 255), 0, 0, 2.0f);
      if (mouse.x >= min.x && mouse.x < max.x && mouse.y >= min.y && mouse.y < max.y) {
        ImGui::BeginTooltip();
        ImGui::Text("unit %zu '%s', rank %d: chunk %d = flat [%lld, %lld) of %lld", u, unit.name.c_str(), r,
                    map.chunk_of(r), static_cast<long long>(chunk_begin), static_cast<long long>(chunk_end),
                    static_cast<long long>(unit.padded_numel));
        ImGui::TextUnformatted(state_name(state));
        constexpr std::size_t kShown = 12;
        for (std::size_t i = 0; i < slices.size() && i < kShown; ++i) {
          const MappedSlice& s = slices[i];
          ImGui::Text("  %s [%lld, %lld) of %lld", s.param->name.c_str(), static_cast<long long>(s.param_begin),
                      static_cast<long long>(s.param_begin + s.count), static_cast<long long>(s.param->numel));
          if (const std::int64_t padding = padding_in(s); padding > 0)  // [Note: the padded vocabulary]
            ImGui::Text("    of which %lld are padding rows: zeros the GPU's GEMM tiles want, never trained",
                        static_cast<long long>(padding));
        }
        if (slices.size() > kShown) ImGui::Text("  ... %zu more", slices.size() - kShown);
        if (slices.empty()) ImGui::TextUnformatted("  padding only");
        ImGui::EndTooltip();
      }
    }
  }
  ImGui::Dummy(ImVec2(label_width + static_cast<float>(map.world) * (cell_width + 4),
                      row_height * static_cast<float>(map.units.size() + 1)));
  ImGui::EndChild();
}

}  // namespace fsdplab::app
