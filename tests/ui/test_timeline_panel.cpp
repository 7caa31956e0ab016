// The timeline panel, headless: which lanes it draws and where, level of detail on a million ops, zoom
// around the cursor, drag to pan, follow mode, hover with its tooltip, and the measured selection.
// Expected values are computed here from the events and the lanes' rectangles, not read back from the
// panel's own arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "app/dashboard/headless_imgui.hpp"
#include "app/dashboard/palette.hpp"
#include "app/dashboard/timeline_format.hpp"
#include "app/dashboard/timeline_panel.hpp"
#include "app/dashboard/trace_store.hpp"

namespace fsdplab::app {
namespace {

struct Input {
  float x = -1, y = -1;
  bool left = false, right = false, shift = false;
  float wheel = 0;
};

// One frame: a window filling the display with the panel in it.
const ImDrawData& frame(HeadlessImGui& ui, TimelinePanel& panel, const TraceStore& store, const Input& in = {}) {
  ImGui::SetCurrentContext(ui.context());
  ImGuiIO& io = ImGui::GetIO();
  io.BackendFlags |= ImGuiBackendFlags_RendererHasVtxOffset;  // as the OpenGL 3 backend says
  io.MouseDown[1] = in.right;
  io.KeyShift = in.shift;
  io.MouseWheel = in.wheel;
  ui.new_frame(in.x, in.y, in.left);
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(io.DisplaySize);
  ImGui::Begin("timeline test", nullptr, ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove |
                                             ImGuiWindowFlags_NoSavedSettings);
  panel.draw(store);
  ImGui::End();
  return ui.render();
}

TraceEvent op(int rank, Lane lane, OpCategory category, SimTime begin, SimTime end, OpId id = 0) {
  TraceEvent e;
  e.rank = rank;
  e.lane = lane;
  e.name = std::string(category_name(category));
  e.category = category;
  e.begin = begin;
  e.end = end;
  e.op = id;
  return e;
}

// The time at screen x of a lane rectangle under the panel's current view: computed from the rectangle.
double time_at(const TimelinePanel& p, const LaneRect& r, float x) {
  return static_cast<double>(p.view_begin()) + static_cast<double>(x - r.min.x) /
                                                   static_cast<double>(r.max.x - r.min.x) *
                                                   static_cast<double>(p.view_end() - p.view_begin());
}
float x_at(const TimelinePanel& p, const LaneRect& r, double t) {  // whole pixels, as ImGui floors the mouse
  return std::floor(r.min.x + static_cast<float>((t - static_cast<double>(p.view_begin())) /
                                      static_cast<double>(p.view_end() - p.view_begin()) * (r.max.x - r.min.x)));
}
double pixel_time(const TimelinePanel& p, const LaneRect& r) {
  return static_cast<double>(p.view_end() - p.view_begin()) / static_cast<double>(r.max.x - r.min.x);
}
float mid_y(const LaneRect& r) { return (r.min.y + r.max.y) / 2; }

// A store with one lane of kBursts bursts of kPerBurst 3 ns ops 5 ns apart, a burst every 100 µs.
constexpr int kBursts = 200, kPerBurst = 5000;
constexpr SimTime kBurstPeriod = 100'000;
SimTime burst_begin(int b, int k) { return b * kBurstPeriod + k * 5; }
const TraceStore& million_store() {
  static const TraceStore store = [] {
    TraceStore s;
    const int src = s.add_source("ASYNC", 1, false);
    TraceEvent e = op(0, Lane::compute, OpCategory::compute, 0, 0);
    e.name = "gelu";
    for (int b = 0; b < kBursts; ++b)
      for (int k = 0; k < kPerBurst; ++k) {
        e.begin = burst_begin(b, k);
        e.end = e.begin + 3;
        s.add_event(src, e);
      }
    return s;
  }();
  return store;
}

TEST(TimelinePanel, DrawsEveryLaneInStoreOrderWithItsOps) {
  TraceStore store;
  const int sync = store.add_source("SYNC", 2, true);
  const int async = store.add_source("ASYNC", 2, false);
  const std::array<std::pair<Lane, OpCategory>, 3> streams = {
      std::pair{Lane::reduce_scatter, OpCategory::reduce_scatter},
      {Lane::compute, OpCategory::compute},
      {Lane::all_gather, OpCategory::all_gather}};
  // Added out of display order: rank 1 before rank 0, ASYNC before SYNC.
  for (int source : {async, sync})
    for (int rank : {1, 0})
      for (const auto& [lane, category] : streams)
        for (SimTime t = 0; t < 1'000'000; t += 100'000)
          store.add_event(source, op(rank, lane, category, t, t + 60'000));
  ASSERT_EQ(store.lanes().size(), 12u);

  HeadlessImGui ui(1600, 1000);
  TimelinePanel panel;
  panel.set_view(0, 1'000'000);
  frame(ui, panel, store);
  frame(ui, panel, store);
  const auto& drawn = panel.lanes_drawn();
  ASSERT_EQ(drawn.size(), 12u);
  EXPECT_EQ(panel.stats().lanes, 12);
  EXPECT_EQ(panel.stats().items_drawn, 120u);  // 10 ops a lane, each ~85 px wide
  EXPECT_EQ(panel.stats().folded_blocks, 0u);
  const std::array<Lane, 3> order = {Lane::compute, Lane::all_gather, Lane::reduce_scatter};
  for (std::size_t k = 0; k < drawn.size(); ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(drawn[k].source, static_cast<int>(k / 6));
    EXPECT_EQ(drawn[k].rank, static_cast<int>(k / 3 % 2));
    EXPECT_EQ(drawn[k].lane, order[k % 3]);
    EXPECT_LT(drawn[k].min.y, drawn[k].max.y);
    EXPECT_GT(drawn[k].max.x - drawn[k].min.x, 1000.0f);
    if (k > 0) {
      EXPECT_LE(drawn[k - 1].max.y, drawn[k].min.y);
    }
  }
  // The labels' column is left of the time area, and the time area stays inside the display.
  EXPECT_GE(drawn[0].min.x, 100.0f);
  EXPECT_LE(drawn[0].max.x, 1600.0f);

  // Each lane's rectangle holds vertices in its category's colour: its ops were drawn there.
  std::vector<int> vertices(drawn.size(), 0);
  const ImDrawData* data = ImGui::GetDrawData();
  ASSERT_NE(data, nullptr);
  for (int l = 0; l < data->CmdListsCount; ++l)
    for (const ImDrawVert& v : data->CmdLists[l]->VtxBuffer)
      for (std::size_t k = 0; k < drawn.size(); ++k) {
        const LaneRect& r = drawn[k];
        const auto& lane = store.lanes()[k];
        if (v.pos.x > r.min.x && v.pos.x < r.max.x && v.pos.y > r.min.y && v.pos.y < r.max.y &&
            v.col == category_color(lane.items.front().category))
          ++vertices[k];
      }
  for (std::size_t k = 0; k < drawn.size(); ++k) {
    EXPECT_GE(vertices[k], 4 * 9) << "lane " << k;  // 10 rectangles of 4 vertices (the first on the edge)
  }
}

// The legend above the lanes: a swatch of each category's colour with its name, then the folded blocks', whose
// colour is none of the categories'.
TEST(TimelinePanel, TheLegendShowsEachCategorysColourAndTheFoldedBlocks) {
  TraceStore store;
  const int source = store.add_source("ASYNC", 1, false);
  store.add_event(source, op(0, Lane::compute, OpCategory::compute, 0, 1000));
  HeadlessImGui ui(1600, 1000);
  TimelinePanel panel;
  frame(ui, panel, store);
  const ImDrawData& data = frame(ui, panel, store);
  ASSERT_EQ(panel.legend().size(), kOpCategoryCount + 1);
  ASSERT_FALSE(panel.lanes_drawn().empty());
  const float lanes_top = panel.lanes_drawn().front().min.y;
  const auto swatch_drawn = [&](ImU32 color) {
    for (int l = 0; l < data.CmdListsCount; ++l)
      for (const ImDrawVert& v : data.CmdLists[l]->VtxBuffer)
        if (v.col == color && v.pos.y < lanes_top) return true;
    return false;
  };
  for (std::size_t c = 0; c < kOpCategoryCount; ++c) {
    const auto category = static_cast<OpCategory>(c);
    EXPECT_EQ(panel.legend()[c], category_name(category));
    EXPECT_TRUE(swatch_drawn(category_color(category))) << category_name(category);
    EXPECT_NE(kFoldedColor, category_color(category)) << category_name(category);
  }
  EXPECT_NE(panel.legend().back().find("folded"), std::string::npos);
  EXPECT_TRUE(swatch_drawn(kFoldedColor));
}

TEST(TimelinePanel, ClickingAHeaderFoldsItsLanes) {
  TraceStore store;
  for (const char* label : {"SYNC", "ASYNC"}) {
    const int source = store.add_source(label, 2, false);
    for (int rank : {0, 1})
      for (Lane lane : {Lane::compute, Lane::all_gather})
        store.add_event(source, op(rank, lane, OpCategory::compute, 0, 500));
  }
  HeadlessImGui ui(1600, 1000);
  TimelinePanel panel;
  panel.set_view(0, 1'000);
  frame(ui, panel, store);
  ASSERT_EQ(panel.lanes_drawn().size(), 8u);
  const auto click = [&](float x, float y) {
    frame(ui, panel, store, {.x = x, .y = y});
    frame(ui, panel, store, {.x = x, .y = y, .left = true});
    frame(ui, panel, store, {.x = x, .y = y});
    frame(ui, panel, store);
  };
  // Above a source's first lane: its rank header, and above that its source header.
  const LaneRect first = panel.lanes_drawn()[0];
  const float x = first.min.x + 50;
  click(x, first.min.y - 5);  // rank 0 of SYNC
  ASSERT_EQ(panel.lanes_drawn().size(), 6u);
  EXPECT_EQ(panel.lanes_drawn()[0].rank, 1);
  click(x, panel.lanes_drawn()[0].min.y - 5);  // rank 1 of SYNC, now first
  ASSERT_EQ(panel.lanes_drawn().size(), 4u);
  EXPECT_EQ(panel.lanes_drawn()[0].source, 1);
  // The SYNC source header sits above its first rank header, at the top of the lanes.
  click(x, first.min.y - 30);
  for (const LaneRect& r : panel.lanes_drawn()) EXPECT_EQ(r.source, 1);
  ASSERT_EQ(panel.lanes_drawn().size(), 4u);
  click(x, first.min.y - 30);  // unfolds SYNC: its ranks are still folded
  EXPECT_EQ(panel.lanes_drawn().size(), 4u);
  EXPECT_EQ(panel.view_begin(), 0);  // clicks do not pan
}

// SYNC and ASYNC side by side at W = 4, three streams a rank (lab 08's hybrid shard), in a panel as tall as the
// dashboard gives the timeline: the lanes get shorter until both runs show, and keep their full height where they fit.
// While the rows would not fit at full height they never grow back by themselves (a click aimed at a row the frame
// before must land on it): only once every row fits at full height, or after a fold.
TEST(TimelinePanel, LanesGetShorterUntilBothRunsOfFourRanksShow) {
  const auto store_of = [](int world) {
    TraceStore store;
    for (const char* label : {"SYNC", "ASYNC"}) {
      const int source = store.add_source(label, world, false);
      for (int rank = 0; rank < world; ++rank)
        for (Lane lane : {Lane::compute, Lane::all_gather, Lane::reduce_scatter})
          store.add_event(source, op(rank, lane, OpCategory::compute, 0, 500));
    }
    return store;
  };
  const auto lane_heights = [](const TimelinePanel& panel) {
    std::set<float> heights;
    for (const LaneRect& r : panel.lanes_drawn()) heights.insert(r.max.y - r.min.y);
    return heights;
  };
  HeadlessImGui ui(1600, 560);
  ImGuiIO& io = ImGui::GetIO();
  {
    const TraceStore one_rank = store_of(1);
    TimelinePanel panel;
    panel.set_view(0, 1'000);
    frame(ui, panel, one_rank);
    ASSERT_EQ(panel.lanes_drawn().size(), 6u);
    EXPECT_EQ(lane_heights(panel), std::set<float>{TimelinePanel::kLaneHeight}) << "lanes that fit keep their height";
  }
  const TraceStore store = store_of(4);
  TimelinePanel panel;
  panel.set_view(0, 1'000);
  const auto all_shown = [&](float bottom) {
    ASSERT_EQ(panel.lanes_drawn().size(), 24u);
    EXPECT_EQ(panel.lanes_drawn().back().source, 1);
    EXPECT_LE(panel.lanes_drawn().back().max.y, bottom) << "ASYNC's last lane is below the panel";
  };
  frame(ui, panel, store);
  all_shown(560);
  const std::set<float> at_560 = lane_heights(panel);
  ASSERT_EQ(at_560.size(), 1u);
  EXPECT_GT(*at_560.begin(), TimelinePanel::kMinLaneHeight) << "shorter than the panel needs";
  EXPECT_LT(*at_560.begin(), TimelinePanel::kLaneHeight);

  io.DisplaySize.y = 520;  // a smaller window: shorter still
  frame(ui, panel, store);
  all_shown(520);
  const std::set<float> at_520 = lane_heights(panel);
  EXPECT_LT(*at_520.begin(), *at_560.begin());
  io.DisplaySize.y = 560;  // and taller again: they stay as they are
  frame(ui, panel, store);
  EXPECT_EQ(lane_heights(panel), at_520);
  const LaneRect first = panel.lanes_drawn().front();
  const auto click = [&](float x, float y) {
    frame(ui, panel, store, {.x = x, .y = y});
    frame(ui, panel, store, {.x = x, .y = y, .left = true});
    frame(ui, panel, store, {.x = x, .y = y});
    frame(ui, panel, store);
  };
  click(first.min.x + 50, first.min.y - 30);  // SYNC's header folds it, and the lanes are laid out anew
  click(first.min.x + 50, first.min.y - 30);  // unfolded: as tall as they fit now
  EXPECT_EQ(lane_heights(panel), at_560);
  io.DisplaySize.y = 1000;  // where every row fits at full height, they have it
  frame(ui, panel, store);
  EXPECT_EQ(lane_heights(panel), std::set<float>{TimelinePanel::kLaneHeight});
}

TEST(TimelinePanel, FoldsSubPixelOpsIntoOneBlockPerBurst) {
  const TraceStore& store = million_store();
  HeadlessImGui ui(1600, 1000);
  TimelinePanel panel;
  panel.set_view(0, kBursts * kBurstPeriod);
  frame(ui, panel, store);
  frame(ui, panel, store);
  ASSERT_EQ(panel.lanes_drawn().size(), 1u);
  const LaneRect& r = panel.lanes_drawn()[0];
  const double width = r.max.x - r.min.x;
  const double ns_per_pixel = pixel_time(panel, r);
  // What the expectation below needs: a burst (25 µs) spans under 3 pixels, the gap after it over 2.
  ASSERT_LT(kPerBurst * 5 / ns_per_pixel, 3.0);
  ASSERT_GT((kBurstPeriod - kPerBurst * 5) / ns_per_pixel, 2.0);
  const TimelineStats& s = panel.stats();
  EXPECT_EQ(s.folded_blocks, static_cast<std::size_t>(kBursts));
  EXPECT_EQ(s.items_folded, static_cast<std::size_t>(kBursts) * kPerBurst);
  EXPECT_EQ(s.items_drawn, 0u);
  EXPECT_LE(static_cast<double>(s.items_drawn + s.folded_blocks), 2 * width);

  // The folded block under the mouse, with its count in the tooltip; a double click zooms to it.
  const double t = static_cast<double>(burst_begin(37, kPerBurst / 2));
  const float x = x_at(panel, r, t);
  frame(ui, panel, store, {.x = x, .y = mid_y(r)});
  ASSERT_TRUE(panel.hovered_fold().has_value());
  EXPECT_FALSE(panel.hovered().has_value());
  EXPECT_EQ(panel.hovered_fold()->first, static_cast<std::size_t>(37 * kPerBurst));
  EXPECT_EQ(panel.hovered_fold()->count, static_cast<std::size_t>(kPerBurst));
  ASSERT_FALSE(panel.tooltip().empty());
  EXPECT_EQ(panel.tooltip()[0], "5,000 ops folded, zoom in");
  for (bool down : {true, false, true, false}) frame(ui, panel, store, {.x = x, .y = mid_y(r), .left = down});
  EXPECT_LE(panel.view_begin(), burst_begin(37, 0));
  EXPECT_GE(panel.view_end(), burst_begin(37, kPerBurst - 1) + 3);
  EXPECT_LT(panel.view_end() - panel.view_begin(), kBurstPeriod);
}

// A peer may send times up to 2^61 ns. There a 1 µs view's minor tick (20 ns) is below a double's resolution
// (512 ns at 2^61), and an axis stepping `t += minor` stood still: the frame never ended. The ticks are
// counted instead, one per 2 px at most, so the frame ends and what it draws is bounded by the pixels.
TEST(TimelinePanel, FarFromTimeZeroTheAxisFrameEndsWithBoundedTicks) {
  TraceStore store;
  const int source = store.add_source("ASYNC", 1, false);
  const SimTime far = SimTime{1} << 61;
  store.add_event(source, op(0, Lane::compute, OpCategory::compute, far, far + 500));
  HeadlessImGui ui(1600, 1000);
  TimelinePanel panel;
  panel.set_view(far, far + 1'000);
  const ImDrawData& drawn = frame(ui, panel, store);
  int vertices = 0;
  for (int i = 0; i < drawn.CmdListsCount; ++i) vertices += drawn.CmdLists[i]->VtxBuffer.Size;
  // Each tick is a line (4 vertices): 800 ticks at most on 1600 px, plus the lanes, labels and the op.
  EXPECT_LT(vertices, 800 * 4 + 20'000);
}

TEST(TimelinePanel, DrawsEveryVisibleOpWhenZoomedIn) {
  const TraceStore& store = million_store();
  HeadlessImGui ui(1600, 1000);
  TimelinePanel panel;
  const SimTime begin = burst_begin(123, 1000) + 2, end = begin + 2'000;
  panel.set_view(begin, end);
  frame(ui, panel, store);
  frame(ui, panel, store);
  ASSERT_EQ(panel.lanes_drawn().size(), 1u);
  ASSERT_GT(1.0 / pixel_time(panel, panel.lanes_drawn()[0]) * 3, 1.0);  // a 3 ns op is over a pixel wide
  std::size_t visible = 0;
  for (int k = 0; k < kPerBurst; ++k) {
    const SimTime b = burst_begin(123, k);
    if (b + 3 > begin && b < end) ++visible;
  }
  EXPECT_EQ(visible, 401u);  // ops 1000 (begun 2 ns before the view) to 1400
  EXPECT_EQ(panel.stats().items_drawn, visible);
  EXPECT_EQ(panel.stats().folded_blocks, 0u);
  EXPECT_EQ(panel.stats().items_folded, 0u);
}

TEST(TimelinePanel, EveryVisibleOpIsDrawnOrFoldedAndTheCostIsBoundedByPixels) {
  // Ops of mixed widths (1 ns to 2 ms) and gaps on one stream: whatever the zoom, each op in view is
  // counted once, drawn or folded, and the shapes drawn are bounded by the pixels.
  TraceStore store;
  const int src = store.add_source("file.json", 1, false);
  std::vector<std::pair<SimTime, SimTime>> ops;
  std::uint64_t rng = 12345;
  const auto next = [&](std::uint64_t mod) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<SimTime>((rng >> 33) % mod);
  };
  SimTime t = 0;
  for (int i = 0; i < 200'000; ++i) {
    const SimTime d = next(100) == 0 ? 1 + next(2'000'000) : 1 + next(400);
    t += next(10) == 0 ? next(50'000) : next(20);
    ops.emplace_back(t, t + d);
    store.add_event(src, op(0, Lane::compute, OpCategory::compute, t, t + d));
    t += d;
  }
  HeadlessImGui ui(1600, 1000);
  TimelinePanel panel;
  for (const auto& [b, e] : {std::pair<SimTime, SimTime>{0, t}, {t / 3, t / 3 + t / 50}, {t / 2, t / 2 + t / 2000},
                             {t / 5, t / 5 + 3'000}}) {
    SCOPED_TRACE(testing::Message() << "view " << b << " .. " << e);
    panel.set_view(b, e);
    frame(ui, panel, store);
    std::size_t visible = 0;
    for (const auto& [ob, oe] : ops) {
      if (oe > b && ob < e) ++visible;
    }
    const TimelineStats& s = panel.stats();
    EXPECT_EQ(s.items_drawn + s.items_folded, visible);
    const double width = panel.lanes_drawn().at(0).max.x - panel.lanes_drawn()[0].min.x;
    EXPECT_LE(static_cast<double>(s.items_drawn + s.folded_blocks), 2 * width);
  }
}

TEST(TimelinePanel, WheelZoomsAroundTheTimeUnderTheCursor) {
  TraceStore store;
  const int src = store.add_source("SYNC", 1, true);
  for (SimTime t = 0; t < 10'000'000; t += 10'000)
    store.add_event(src, op(0, Lane::compute, OpCategory::compute, t, t + 5'000));
  HeadlessImGui ui(1600, 1000);
  TimelinePanel panel;
  panel.set_view(2'000'000, 3'000'000);
  frame(ui, panel, store);
  const LaneRect r = panel.lanes_drawn().at(0);
  // Whole pixels: ImGui floors the mouse position.
  const float x = std::floor(r.min.x + 0.37f * (r.max.x - r.min.x)), y = mid_y(r);
  frame(ui, panel, store, {.x = x, .y = y});
  const double before = time_at(panel, r, x);
  const SimTime span = panel.view_end() - panel.view_begin();

  frame(ui, panel, store, {.x = x, .y = y, .wheel = 1});  // in
  EXPECT_LT(panel.view_end() - panel.view_begin(), span);
  EXPECT_NEAR(time_at(panel, r, x), before, pixel_time(panel, r));
  EXPECT_FALSE(panel.following());

  for (int i = 0; i < 3; ++i) frame(ui, panel, store, {.x = x, .y = y, .wheel = -1});  // out
  EXPECT_GT(panel.view_end() - panel.view_begin(), span);
  EXPECT_NEAR(time_at(panel, r, x), before, pixel_time(panel, r));

  // Bounds: 100 ns at the closest, the whole trace and a margin at the farthest.
  for (int i = 0; i < 100; ++i) frame(ui, panel, store, {.x = x, .y = y, .wheel = 1});
  EXPECT_NEAR(static_cast<double>(panel.view_end() - panel.view_begin()), TimelinePanel::kMinSpan, 1.0);
  EXPECT_NEAR(time_at(panel, r, x), before, 1.5);  // the view's ends are rounded to ns
  for (int i = 0; i < 200; ++i) frame(ui, panel, store, {.x = x, .y = y, .wheel = -1});
  const double trace = static_cast<double>(store.last_time() - store.first_time());
  EXPECT_GE(static_cast<double>(panel.view_end() - panel.view_begin()), trace);
  EXPECT_LE(static_cast<double>(panel.view_end() - panel.view_begin()), 1.25 * trace);
}

TEST(TimelinePanel, LeftDragPansByTheDraggedPixelsTime) {
  TraceStore store;
  const int src = store.add_source("SYNC", 1, true);
  for (SimTime t = 0; t < 10'000'000; t += 10'000)
    store.add_event(src, op(0, Lane::compute, OpCategory::compute, t, t + 5'000));
  HeadlessImGui ui(1600, 1000);
  TimelinePanel panel;
  panel.set_view(4'000'000, 5'000'000);
  frame(ui, panel, store);
  const LaneRect r = panel.lanes_drawn().at(0);
  const double ns_per_pixel = pixel_time(panel, r);
  const float x = r.min.x + 700, y = mid_y(r);
  frame(ui, panel, store, {.x = x, .y = y});
  frame(ui, panel, store, {.x = x, .y = y, .left = true});
  frame(ui, panel, store, {.x = x - 90, .y = y, .left = true});
  frame(ui, panel, store, {.x = x - 250, .y = y, .left = true});
  frame(ui, panel, store, {.x = x - 250, .y = y});
  // Dragged 250 pixels left: the view moved 250 pixels' time later, its span unchanged.
  EXPECT_NEAR(static_cast<double>(panel.view_begin()), 4'000'000 + 250 * ns_per_pixel, 1.0);
  EXPECT_EQ(panel.view_end() - panel.view_begin(), 1'000'000);
  EXPECT_FALSE(panel.selection().has_value());
}

TEST(TimelinePanel, FollowTracksAGrowingStoreUntilAPan) {
  TraceStore store;
  const int src = store.add_source("ASYNC", 1, false);
  store.add_event(src, op(0, Lane::compute, OpCategory::compute, 1'000, 5'000));
  HeadlessImGui ui(1600, 1000);
  TimelinePanel panel;
  EXPECT_TRUE(panel.following());
  frame(ui, panel, store);  // at first: the whole trace
  EXPECT_EQ(panel.view_begin(), 1'000);
  EXPECT_EQ(panel.view_end(), 5'000);

  panel.set_view(0, 1'000);
  EXPECT_FALSE(panel.following());
  panel.set_following(true);
  frame(ui, panel, store);
  EXPECT_EQ(panel.view_begin(), 4'000);  // the width kept, the end at the latest time
  EXPECT_EQ(panel.view_end(), 5'000);
  store.add_event(src, op(0, Lane::compute, OpCategory::compute, 6'000, 8'000));
  frame(ui, panel, store);
  EXPECT_EQ(panel.view_begin(), 7'000);
  EXPECT_EQ(panel.view_end(), 8'000);

  // A pan stops following: the view stays where it was put while the store grows.
  const LaneRect r = panel.lanes_drawn().at(0);
  const float x = r.min.x + 400, y = mid_y(r);
  frame(ui, panel, store, {.x = x, .y = y});
  frame(ui, panel, store, {.x = x, .y = y, .left = true});
  frame(ui, panel, store, {.x = x + 100, .y = y, .left = true});
  frame(ui, panel, store, {.x = x + 100, .y = y});
  EXPECT_FALSE(panel.following());
  const SimTime begin = panel.view_begin(), end = panel.view_end();
  EXPECT_LT(begin, 7'000);
  store.add_event(src, op(0, Lane::compute, OpCategory::compute, 8'000, 9'000));
  frame(ui, panel, store);
  EXPECT_EQ(panel.view_begin(), begin);
  EXPECT_EQ(panel.view_end(), end);
  panel.set_following(true);  // what the Follow box and the End key do
  frame(ui, panel, store);
  EXPECT_EQ(panel.view_end(), 9'000);
  EXPECT_EQ(panel.view_end() - panel.view_begin(), end - begin);
}

TEST(TimelinePanel, HoverNamesTheOpAndItsDependencies) {
  TraceStore store;
  const int src = store.add_source("ASYNC", 2, false);
  TraceEvent gather = op(1, Lane::all_gather, OpCategory::all_gather, 0, 700, 77);
  gather.link = RankLink::between_nodes;  // its group spans nodes (sim --ranks-per-node)
  store.add_event(src, gather);
  for (int k = 0; k < 8; ++k) {
    TraceEvent e = op(0, Lane::compute, OpCategory::compute, k * 1'000 + 100, k * 1'000 + 900, 10 + k);
    e.name = "matmul";
    e.unit = k == 3 ? 2 : -1;
    e.phase = "forward";
    e.step = 4;
    e.bytes = 12'500'000;
    if (k == 3)
      e.deps = {OpRef{.rank = 1, .op = 77}, OpRef{.rank = 0, .op = 12, .reason = WaitReason::freed_block},
                OpRef{.rank = 1, .op = 999}};
    store.add_event(src, e);
  }
  HeadlessImGui ui(1600, 1000);
  TimelinePanel panel;
  panel.set_view(0, 8'000);
  frame(ui, panel, store);
  ASSERT_EQ(panel.lanes_drawn().size(), 2u);
  const LaneRect r = panel.lanes_drawn()[0];  // rank 0's compute lane
  ASSERT_EQ(r.rank, 0);
  const float x = x_at(panel, r, 3'500);
  frame(ui, panel, store, {.x = x, .y = mid_y(r)});
  frame(ui, panel, store, {.x = x, .y = mid_y(r)});
  ASSERT_TRUE(panel.hovered().has_value());
  EXPECT_EQ(panel.hovered()->first, 0u);   // store.lanes()[0] is rank 0's compute
  EXPECT_EQ(panel.hovered()->second, 3u);
  const std::vector<std::string> expected = {"matmul",
                                             "category: compute (rank 0, compute lane)",
                                             "unit: 2",
                                             "phase: forward",
                                             "step: 4",
                                             "bytes: 12.5 MB",
                                             "duration: 800 ns",
                                             "begin: 3.100 \xC2\xB5s",
                                             "op: 13",
                                             "waited for rank 1 op 77 'all_gather'",
                                             "waited for rank 0 op 12 'matmul' (the allocator's: this stream "
                                             "took a block freed after it)",
                                             "waited for rank 1 op 999 (not in the trace)"};
  EXPECT_EQ(panel.tooltip(), expected);
  // Each dependency in the trace is drawn as an arrow from the end of the op waited for to the hovered op's begin:
  // rank 1's gather (the program's wait), then the matmul before (the allocator's); op 999 is not in the trace.
  const LaneRect gathers = panel.lanes_drawn()[1];
  ASSERT_EQ(gathers.rank, 1);
  const std::vector<DependencyLine>& lines = panel.dependencies_drawn();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].reason, WaitReason::event);
  EXPECT_NEAR(lines[0].from.x, x_at(panel, gathers, 700), 1.0);
  EXPECT_FLOAT_EQ(lines[0].from.y, mid_y(gathers));
  EXPECT_NEAR(lines[0].to.x, x_at(panel, r, 3'100), 1.0);
  EXPECT_FLOAT_EQ(lines[0].to.y, mid_y(r));
  EXPECT_EQ(lines[1].reason, WaitReason::freed_block);
  EXPECT_NEAR(lines[1].from.x, x_at(panel, r, 2'900), 1.0);
  EXPECT_FLOAT_EQ(lines[1].from.y, mid_y(r));
  // The missing dependency arrives (a live run): the tooltip names it from the next frame on.
  TraceEvent late = op(1, Lane::all_gather, OpCategory::compute, 9'000, 9'100, 999);  // on a lane already drawn
  late.name = "late_matmul";
  store.add_event(src, late);
  frame(ui, panel, store, {.x = x, .y = mid_y(r)});
  ASSERT_EQ(panel.tooltip().size(), expected.size());
  EXPECT_EQ(panel.tooltip().back(), "waited for rank 1 op 999 'late_matmul'");
  EXPECT_EQ(panel.dependencies_drawn().size(), 3u) << "drawn once it is in the trace, from the view's edge";

  // Between two ops: nothing.
  frame(ui, panel, store, {.x = x_at(panel, r, 3'950), .y = mid_y(r)});
  EXPECT_FALSE(panel.hovered().has_value());
  EXPECT_TRUE(panel.tooltip().empty());
  EXPECT_TRUE(panel.dependencies_drawn().empty());
  // Over the other rank's lane: its gather.
  ASSERT_EQ(panel.lanes_drawn().size(), 2u);
  const LaneRect r1 = panel.lanes_drawn()[1];
  ASSERT_EQ(r1.lane, Lane::all_gather);
  frame(ui, panel, store, {.x = x_at(panel, r1, 300), .y = mid_y(r1)});
  ASSERT_TRUE(panel.hovered().has_value());
  EXPECT_EQ(panel.hovered()->first, 1u);
  EXPECT_EQ(panel.hovered()->second, 0u);
  EXPECT_EQ(panel.tooltip().front(), "all_gather");
  EXPECT_NE(std::find(panel.tooltip().begin(), panel.tooltip().end(), "link: between nodes (its group spans them)"),
            panel.tooltip().end());
}

// A run the race detector stopped: the gather wrote a buffer that a reduce-scatter, the first of its lane, was
// about to read. Both accesses are marked on their lanes, the reduce-scatter's made for it; the view went to them
// as they came, and hovering a mark names the buffer, both accesses and the missing wait.
TEST(TimelinePanel, MarksTheRaceThatStoppedARunOnItsTwoLanes) {
  TraceStore store;
  const int src = store.add_source("ASYNC", 2, false);
  for (int k = 0; k < 40; ++k)
    store.add_event(src, op(0, Lane::compute, OpCategory::compute, k * 2'000, k * 2'000 + 1'500, k + 1));
  store.add_event(src, op(0, Lane::all_gather, OpCategory::all_gather, 38'000, 68'152, 41));
  store.add_event(src, op(1, Lane::compute, OpCategory::compute, 0, 90'000, 1));
  RaceReport race;
  race.rank = 0;
  race.earlier =
      Accessor{.op = 41, .name = "all_gather u2", .lane = Lane::all_gather, .seq = 3, .begin = 38'000, .end = 68'152};
  race.later = Accessor{
      .op = 42, .name = "reduce_scatter u1", .lane = Lane::reduce_scatter, .seq = 1, .begin = 41'000, .end = 43'000};
  race.earlier_wrote = true;
  race.block = 24;
  race.earlier_tag = race.later_tag = MemTag::param_full;
  store.set_failure(src, "rank 0 failed: stream race ...");
  store.set_race(src, race);

  HeadlessImGui ui(1600, 1000);
  TimelinePanel panel;
  frame(ui, panel, store);
  // Zoomed to the race: both accesses and as much again either side (30.152 us), no earlier than 0.
  EXPECT_FALSE(panel.following());
  EXPECT_EQ(panel.view_begin(), 38'000 - 30'152);
  EXPECT_EQ(panel.view_end(), 68'152 + 30'152);
  // Rank 0's reduce_scatter lane is laid out for the op that never ran; rank 1 has only its compute lane.
  std::vector<std::pair<int, Lane>> lanes;
  for (const LaneRect& r : panel.lanes_drawn()) lanes.emplace_back(r.rank, r.lane);
  const std::vector<std::pair<int, Lane>> expected_lanes = {
      {0, Lane::compute}, {0, Lane::all_gather}, {0, Lane::reduce_scatter}, {1, Lane::compute}};
  EXPECT_EQ(lanes, expected_lanes);
  ASSERT_EQ(panel.race_marks().size(), 2u);
  for (const RaceMarkRect& mark : panel.race_marks()) {
    const LaneRect& lane = panel.lanes_drawn()[mark.later ? 2 : 1];
    const double begin = mark.later ? 41'000 : 38'000, end = mark.later ? 43'000 : 68'152;
    EXPECT_NEAR(mark.min.x, x_at(panel, lane, begin), 1.5) << mark.later;
    EXPECT_NEAR(mark.max.x, x_at(panel, lane, end), 1.5) << mark.later;
    EXPECT_GT(mark.min.y, lane.min.y - 0.5f);
    EXPECT_LT(mark.max.y, lane.max.y + 0.5f);
  }

  // Hovering the op that never ran: what happened, not the lane's (absent) op.
  const RaceMarkRect later = panel.race_marks()[1];
  ASSERT_TRUE(later.later);
  const float x = (later.min.x + later.max.x) / 2, y = (later.min.y + later.max.y) / 2;
  frame(ui, panel, store, {.x = x, .y = y});
  frame(ui, panel, store, {.x = x, .y = y});
  const std::vector<std::string> expected = {
      "stream race on rank 0, buffer #24 (tag param_full)",
      "first: op #41 'all_gather u2' on the all_gather stream, 38.000 \xC2\xB5s to 68.152 \xC2\xB5s, wrote it",
      "then: op #42 'reduce_scatter u1' on the reduce_scatter stream, 41.000 \xC2\xB5s to 43.000 \xC2\xB5s, reads "
      "it: the run stopped here, before it ran",
      "no event orders the two (a missing stream wait: Device::wait on an event recorded after the",
      "first, on the first's stream?)"};
  EXPECT_EQ(panel.tooltip(), expected);

  // The whole run: each mark still at least 6 px wide; a view the user placed is not taken away again.
  panel.fit();
  frame(ui, panel, store);
  ASSERT_EQ(panel.race_marks().size(), 2u);
  for (const RaceMarkRect& mark : panel.race_marks()) EXPECT_GE(mark.max.x - mark.min.x, 5.9f);
  EXPECT_TRUE(panel.following());
  // "Show the race" zooms there again; a store without one has none to show.
  ASSERT_TRUE(panel.show_race(store));
  EXPECT_EQ(panel.view_begin(), 38'000 - 30'152);
  TraceStore clean;
  clean.add_source("ASYNC", 1, false);
  EXPECT_FALSE(panel.show_race(clean));
}

TEST(TimelinePanel, RightDragMeasuresASpan) {
  TraceStore store;
  const int src = store.add_source("SYNC", 1, true);
  for (SimTime t = 0; t < 1'000'000; t += 10'000)
    store.add_event(src, op(0, Lane::compute, OpCategory::compute, t, t + 5'000));
  HeadlessImGui ui(1600, 1000);
  TimelinePanel panel;
  panel.set_view(0, 1'000'000);
  frame(ui, panel, store);
  const LaneRect r = panel.lanes_drawn().at(0);
  const float x1 = r.min.x + 200, x2 = r.min.x + 650, y = mid_y(r);
  const double t1 = time_at(panel, r, x1), t2 = time_at(panel, r, x2), pixel = pixel_time(panel, r);
  frame(ui, panel, store, {.x = x2, .y = y});
  frame(ui, panel, store, {.x = x2, .y = y, .right = true});
  frame(ui, panel, store, {.x = x1, .y = y, .right = true});  // dragged leftwards: still ordered
  frame(ui, panel, store, {.x = x1, .y = y});
  ASSERT_TRUE(panel.selection().has_value());
  EXPECT_NEAR(static_cast<double>(panel.selection()->first), t1, pixel);
  EXPECT_NEAR(static_cast<double>(panel.selection()->second), t2, pixel);
  EXPECT_EQ(panel.view_begin(), 0);  // measuring does not pan
  EXPECT_EQ(panel.view_end(), 1'000'000);

  // Shift + left drag measures too.
  frame(ui, panel, store, {.x = x1, .y = y, .shift = true});
  frame(ui, panel, store, {.x = x1, .y = y, .left = true, .shift = true});
  frame(ui, panel, store, {.x = x1 + 100, .y = y, .left = true, .shift = true});
  frame(ui, panel, store, {.x = x1 + 100, .y = y});
  ASSERT_TRUE(panel.selection().has_value());
  EXPECT_NEAR(static_cast<double>(panel.selection()->second - panel.selection()->first), 100 * pixel, pixel);
  EXPECT_EQ(panel.view_begin(), 0);

  // A right click clears it.
  frame(ui, panel, store, {.x = x1, .y = y, .right = true});
  frame(ui, panel, store, {.x = x1, .y = y});
  EXPECT_FALSE(panel.selection().has_value());
}

TEST(TimelineFormat, UnitsAndTicks) {
  EXPECT_EQ(format_duration(850), "850 ns");
  EXPECT_EQ(format_duration(12'345), "12.35 \xC2\xB5s");
  EXPECT_EQ(format_duration(1'234'567), "1.235 ms");
  EXPECT_EQ(format_duration(2'500'000'000), "2.500 s");
  EXPECT_EQ(format_instant(1'234'567), "1.234567 ms");
  EXPECT_EQ(format_count(0), "0");
  EXPECT_EQ(format_count(999), "999");
  EXPECT_EQ(format_count(1'234), "1,234");
  EXPECT_EQ(format_count(1'234'567), "1,234,567");
  EXPECT_DOUBLE_EQ(tick_step(1'000, 100), 100'000);  // 100 px of 1 µs
  EXPECT_DOUBLE_EQ(tick_step(1'300, 100), 200'000);
  EXPECT_DOUBLE_EQ(tick_step(3'000, 100), 500'000);
  EXPECT_DOUBLE_EQ(tick_step(6'000, 100), 1'000'000);
  EXPECT_EQ(format_tick(1'200'000, 200'000, 3'000'000), "1.2 ms");
  EXPECT_EQ(format_tick(0, 200'000, 3'000'000), "0.0 ms");
  EXPECT_EQ(format_tick(5'000'020'000, 20'000, 5'000'100'000), "5.00002 s");
  EXPECT_EQ(format_tick(250'000, 50'000, 900'000), "250 \xC2\xB5s");
}

}  // namespace
}  // namespace fsdplab::app
