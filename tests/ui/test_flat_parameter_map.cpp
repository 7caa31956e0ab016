// The FlatParameter map panel's layout, headless, at the widths the dashboard gives it (a window about 196 px
// wide in a 1024 px dashboard, 380 px at 1600) and wider, for 2 to 16 ranks: rank headers that never run into
// each other, shortened to "r3" or "3" where "rank 3" does not fit; names that keep to their column, elided
// at the front; every rank's cell in view or within the sideways scroll.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "app/dashboard/flat_parameter_map.hpp"
#include "app/dashboard/headless_imgui.hpp"
#include "app/dashboard/palette.hpp"
#include "dashboard_testing.hpp"

namespace fsdplab::app {
namespace {

constexpr float kHeight = 400;

// Units named as a nested wrap of Llama names them, the longest 31 characters; two parameters each.
FlatParameterMap nested_map(int world) {
  FlatParameterMap map;
  map.tasks = "reference";
  map.world = world;
  map.shard_group = world;
  for (const char* name : {"(root)", "model.embed_tokens", "model.layers.0", "model.layers.0.self_attn.q_proj",
                           "model.layers.0.mlp.down_proj", "lm_head"}) {
    MappedUnit unit;
    unit.name = name;
    unit.shard_numel = 64;
    unit.padded_numel = 64 * world;
    unit.params.push_back({std::string(name) + ".weight", 0, 48 * world, 0});
    unit.params.push_back({std::string(name) + ".bias", 48 * world, 16 * world, 0});
    for (std::int64_t begin = 0; begin < unit.padded_numel; begin += unit.shard_numel) {
      std::vector<MappedSlice>& chunk = unit.chunks.emplace_back();
      for (std::size_t p = 0; p < unit.params.size(); ++p) {
        const std::int64_t from = std::max(begin, unit.params[p].offset);
        const std::int64_t to = std::min(begin + unit.shard_numel, unit.params[p].offset + unit.params[p].numel);
        if (from < to) chunk.push_back({p, from - unit.params[p].offset, to - from, from - begin, 0});
      }
    }
    map.units.push_back(std::move(unit));
  }
  return map;
}

// Three frames of the panel in a window `width` wide (scroll limits settle after a frame); the last one's
// horizontal scroll range of the grid.
float draw(HeadlessImGui& ui, FlatParameterPanel& panel, const FlatParameterMap& map, const FsdpEventLog& log,
           float width) {
  for (int i = 0; i < 3; ++i) {
    ui.new_frame();
    ImGui::SetNextWindowPos(ImVec2(0, 0));
    ImGui::SetNextWindowSize(ImVec2(width, kHeight));
    ImGui::Begin("map", nullptr, ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoSavedSettings);
    panel.draw(map, log, 0, "ASYNC");
    ImGui::End();
    ui.render();
  }
  return panel.scroll_max_x();
}

// A unit unlike the reference's has its name in red, and the line above the grid says how many are and the first
// one's difference, and which units of the reference's this run lacks; a map without either says nothing of them.
TEST(FlatParameterMap, UnitsUnlikeTheReferencesAreNamedInRed) {
  HeadlessImGui ui(1024, 768);
  FlatParameterPanel panel;
  FsdpEventLog log;
  log.add_source();
  FlatParameterMap map = nested_map(2);
  draw(ui, panel, map, log, 380);
  EXPECT_EQ(panel.difference_line(), "");
  map.units[2].differs = "padded to 130 elements; the reference's 128";
  map.units[4].differs = "'x' at flat offset 3; the reference's 0";
  draw(ui, panel, map, log, 380);
  EXPECT_EQ(panel.difference_line(),
            "2 of 6 units unlike the reference's (names in red; hover one): 'model.layers.0' padded to 130 "
            "elements; the reference's 128");
  // The red text's vertices: the names of units 2 and 4, and none in the other names' rows.
  const auto red_in = [&](const FlatParameterPanel::Label& name) {
    int count = 0;
    const ImDrawData& data = *ImGui::GetDrawData();
    for (int l = 0; l < data.CmdListsCount; ++l)
      for (const ImDrawVert& v : data.CmdLists[l]->VtxBuffer)
        count += v.col == kFailedColor && v.pos.x >= name.min.x && v.pos.x <= name.max.x && v.pos.y >= name.min.y &&
                 v.pos.y <= name.max.y;
    return count;
  };
  ASSERT_EQ(panel.names().size(), 6u);
  for (std::size_t u = 0; u < 6; ++u)
    EXPECT_EQ(red_in(panel.names()[u]) > 0, u == 2 || u == 4) << panel.names()[u].text;
  map.units_missing = {"(root)", "lm_head"};
  draw(ui, panel, map, log, 380);
  EXPECT_TRUE(
      panel.difference_line().ends_with("; the reference's task 7 also makes 2 units this run does not: '(root)', ..."))
      << panel.difference_line();
  for (MappedUnit& unit : map.units) unit.differs.clear();
  map.units_missing = {"(root)"};
  draw(ui, panel, map, log, 380);
  EXPECT_EQ(panel.difference_line(), "the reference's task 7 also makes 1 unit this run does not: '(root)'");
  // A student's layout like the reference's in every unit is said to be: right is seen as right.
  map.units_missing.clear();
  map.tasks = "2=student";
  draw(ui, panel, map, log, 380);
  EXPECT_EQ(panel.difference_line(), "all 6 units laid out as the reference's");
}

class FlatParameterMapLayout : public testing::TestWithParam<std::tuple<int, float>> {};

TEST_P(FlatParameterMapLayout, HeadersNamesAndCellsKeepApartAndEveryRankCanBeReached) {
  const auto [world, width] = GetParam();
  const FlatParameterMap map = nested_map(world);
  FsdpEventLog log;
  log.add_source();
  HeadlessImGui ui(1600, 1000);
  FlatParameterPanel panel;
  const float scroll_max = draw(ui, panel, map, log, width);

  ASSERT_EQ(panel.cells().size(), map.units.size() * static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    const FlatParameterPanel::Cell& c = map_cell(panel, 0, r);
    // In view, or as far right as the grid scrolls.
    EXPECT_LE(c.max.x, panel.grid_max().x + scroll_max + 0.5f) << "rank " << r << " out of reach";
    EXPECT_GE(c.min.x, panel.grid_min().x - 0.5f);
  }
  // Headers: rank 0 and then every k-th (k = 1 where one fits each cell), each starting over its own cell,
  // a space apart, the last within the grid.
  const auto& headers = panel.headers();
  ASSERT_GE(headers.size(), 1u);
  const int every = world / static_cast<int>(headers.size());
  EXPECT_TRUE(every == 1 || every == 2 || every == 4) << every;
  for (std::size_t h = 0; h < headers.size(); ++h) {
    const int r = static_cast<int>(h) * every;
    const std::string number = std::to_string(r);
    EXPECT_TRUE(headers[h].text == "rank " + number || headers[h].text == "r" + number || headers[h].text == number)
        << headers[h].text << " over rank " << r;
    EXPECT_NEAR(headers[h].min.x, map_cell(panel, 0, r).min.x, 0.5f) << headers[h].text;
    if (h > 0) {
      EXPECT_GE(headers[h].min.x - headers[h - 1].max.x, ImGui::CalcTextSize(" ").x - 1) << headers[h].text;
    }
  }
  EXPECT_LE(headers.back().max.x, map_cell(panel, 0, world - 1).max.x + 0.5f);
  // Names keep to their column: whole, or their tail after "..." (nested units differ at the end).
  ASSERT_EQ(panel.names().size(), map.units.size());
  for (std::size_t u = 0; u < map.units.size(); ++u) {
    const FlatParameterPanel::Label& name = panel.names()[u];
    EXPECT_LE(name.max.x, panel.grid_min().x + 0.5f) << name.text;
    const std::string& whole = map.units[u].name;
    if (name.text != whole) {
      ASSERT_EQ(name.text.rfind("...", 0), 0u) << name.text;
      EXPECT_EQ(whole.substr(whole.size() - (name.text.size() - 3)), name.text.substr(3));
      EXPECT_GE(name.text.size(), 12u) << "elided to less than the names' least width: " << name.text;
    }
  }
}

// W = 2 to 16 in the map's width at 1024 px (the smallest the dashboard is meant to read at), at 1600 px,
// and wider.
INSTANTIATE_TEST_SUITE_P(WorldsAndWidths, FlatParameterMapLayout,
                         testing::Combine(testing::Values(2, 4, 8, 16), testing::Values(196.0f, 380.0f, 560.0f)));

TEST(FlatParameterMap, HeadersShortenOnlyWhereTheLongOnesDoNotFit) {
  FsdpEventLog log;
  log.add_source();
  HeadlessImGui ui(1600, 1000);
  FlatParameterPanel panel;
  draw(ui, panel, nested_map(2), log, 560);
  EXPECT_EQ(panel.headers().at(1).text, "rank 1");
  EXPECT_EQ(panel.names().at(3).text, "model.layers.0.self_attn.q_proj");  // room for the whole name
  draw(ui, panel, nested_map(8), log, 560);
  EXPECT_EQ(panel.headers().at(7).text, "r7");
  draw(ui, panel, nested_map(16), log, 380);  // 16 cells at 1600 px: every second one labelled
  ASSERT_EQ(panel.headers().size(), 8u);
  EXPECT_EQ(panel.headers().at(7).text, "14");
}

TEST(FlatParameterMap, AllRanksFitWithoutScrollingWhereTheCellsCanBeNarrowed) {
  FsdpEventLog log;
  log.add_source();
  HeadlessImGui ui(1600, 1000);
  FlatParameterPanel panel;
  // 16 ranks in the map's width at 1600 px: the names give way to the cells (elided) rather than scroll.
  EXPECT_EQ(draw(ui, panel, nested_map(16), log, 380), 0.0f);
  EXPECT_LE(map_cell(panel, 0, 15).max.x, panel.grid_max().x + 0.5f);
}

}  // namespace
}  // namespace fsdplab::app
