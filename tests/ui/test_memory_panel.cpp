// The MEMORY panel, headless: what each rank's row shows at `now`, the colours and widths of its stacked
// bar in the frame's vertices, the analytic expectation beside it, the chart's time axis, one scale for bars
// and charts, a peak shorter than a pixel drawn where it happened, a stopped run drawn only as far as it got,
// a chart's height fitting every rank in the panel, the device's memory marked and the ranks past it named, and a
// chart over a million samples costing vertices per pixel column, not per sample.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "app/dashboard/headless_imgui.hpp"
#include "app/dashboard/memory_panel.hpp"
#include "app/dashboard/palette.hpp"

namespace fsdplab::app {
namespace {

constexpr float kWidth = 1200, kHeight = 800;

std::size_t at(MemTag t) { return static_cast<std::size_t>(t); }

// Feeds one rank's ledger changes to the store as the engine's counters do: each sample carries the
// tag's new live bytes and the rank's new total.
class Ledger {
 public:
  Ledger(TraceStore& store, int source, int rank) : store_(store), source_(source), rank_(rank) {}
  void set(SimTime t, MemTag tag, std::int64_t live) {
    total_ += live - live_[at(tag)];
    live_[at(tag)] = live;
    CounterSample c;
    c.rank = rank_;
    c.time = t;
    c.tag = tag;
    c.tag_live = live;
    c.total_live = total_;
    store_.add_counter(source_, c);
  }

 private:
  TraceStore& store_;
  int source_, rank_;
  TagBytes live_{};
  std::int64_t total_ = 0;
};

// Where vertices of exactly `color` lie inside [min, max].
struct Extent {
  float x0 = 1e9f, x1 = -1e9f, y0 = 1e9f, y1 = -1e9f;
  int count = 0;
  float width() const { return count ? x1 - x0 : 0; }
};

Extent extent(const ImDrawData& data, ImU32 color, ImVec2 min, ImVec2 max) {
  Extent e;
  for (int l = 0; l < data.CmdListsCount; ++l)
    for (const ImDrawVert& v : data.CmdLists[l]->VtxBuffer) {
      if (v.col != color || v.pos.x < min.x - 0.5f || v.pos.x > max.x + 0.5f || v.pos.y < min.y - 0.5f ||
          v.pos.y > max.y + 0.5f)
        continue;
      e.x0 = std::min(e.x0, v.pos.x);
      e.x1 = std::max(e.x1, v.pos.x);
      e.y0 = std::min(e.y0, v.pos.y);
      e.y1 = std::max(e.y1, v.pos.y);
      ++e.count;
    }
  return e;
}

// One frame of the panel in a window filling the display, or `height` of it.
ImDrawData& frame(HeadlessImGui& ui, MemoryPanel& panel, const TraceStore& store,
                  std::span<const std::optional<TagBytes>> expected, SimTime begin, SimTime end, SimTime now,
                  float height = kHeight) {
  ui.new_frame();
  ImGui::GetIO().BackendFlags |= ImGuiBackendFlags_RendererHasVtxOffset;  // as the GL3 backend: > 64k vertices
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(ImVec2(kWidth, height));
  ImGui::Begin("Memory", nullptr, ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoSavedSettings);
  panel.draw(store, expected, begin, end, now);
  ImGui::End();
  return ui.render();
}

// Two ranks of one source with known ledger changes; `now` = 15.
//   rank 0: param_shard 400 at 0, activation 600 at 10, activation 100 at 20      -> now {400, act 600}, peak 1000
//   rank 1: param_shard 400 at 0, grad_full 300 at 5, grad_full 0 at 12,
//           optim_state 800 at 14                                                  -> now {400, optim 800}, peak 1200
TraceStore two_ranks() {
  TraceStore store;
  const int s = store.add_source("SYNC", 2, true);
  Ledger r0(store, s, 0), r1(store, s, 1);
  r0.set(0, MemTag::param_shard, 400);
  r1.set(0, MemTag::param_shard, 400);
  r1.set(5, MemTag::grad_full, 300);
  r0.set(10, MemTag::activation, 600);
  r1.set(12, MemTag::grad_full, 0);
  r1.set(14, MemTag::optim_state, 800);
  r0.set(20, MemTag::activation, 100);
  return store;
}

TagBytes expectation() {
  TagBytes e{};
  e[at(MemTag::param_shard)] = 400;
  e[at(MemTag::grad_full)] = 300;
  e[at(MemTag::optim_state)] = 800;
  e[at(MemTag::activation)] = 600;
  return e;  // 2100 in all
}

TEST(MemoryPanel, RowsShowEachRankNowAndItsPeak) {
  const TraceStore store = two_ranks();
  const std::vector<std::optional<TagBytes>> expected = {expectation()};
  HeadlessImGui ui(kWidth, kHeight);
  MemoryPanel panel;
  frame(ui, panel, store, expected, 0, 30, 15);

  ASSERT_EQ(panel.rows().size(), 2u);
  const MemoryPanel::RankRow& r0 = panel.rows()[0];
  const MemoryPanel::RankRow& r1 = panel.rows()[1];
  EXPECT_EQ(r0.source, 0);
  EXPECT_EQ(r0.rank, 0);
  EXPECT_EQ(r1.rank, 1);
  std::array<std::int64_t, kMemTagCount> now0{}, now1{};
  now0[at(MemTag::param_shard)] = 400;
  now0[at(MemTag::activation)] = 600;
  now1[at(MemTag::param_shard)] = 400;
  now1[at(MemTag::optim_state)] = 800;
  EXPECT_EQ(r0.now, now0);
  EXPECT_EQ(r1.now, now1);
  EXPECT_EQ(r0.peak, 1000);
  EXPECT_EQ(r1.peak, 1200);
  EXPECT_EQ(r0.expected_total, 2100);
  EXPECT_EQ(r1.expected_total, 2100);
  EXPECT_LE(r0.max.y, r1.min.y);  // rank 1 below rank 0
  EXPECT_LT(r0.bar_max.y, r0.chart_min.y + 1);

  // Another `now`: grad_full was live on rank 1 at 7, activation at 100 on rank 0 after 20.
  frame(ui, panel, store, expected, 0, 30, 7);
  EXPECT_EQ(panel.rows()[1].now[at(MemTag::grad_full)], 300);
  EXPECT_EQ(panel.rows()[1].now[at(MemTag::optim_state)], 0);
  frame(ui, panel, store, expected, 0, 30, 25);
  EXPECT_EQ(panel.rows()[0].now[at(MemTag::activation)], 100);
}

TEST(MemoryPanel, BarsAreStackedInTheTagsColoursToScale) {
  const TraceStore store = two_ranks();
  const std::vector<std::optional<TagBytes>> expected = {expectation()};
  HeadlessImGui ui(kWidth, kHeight);
  MemoryPanel panel;
  const ImDrawData& data = frame(ui, panel, store, expected, 0, 30, 15);
  ASSERT_EQ(panel.rows().size(), 2u);

  // The live stack is the bar's top kBarHeight pixels; the expected stack lies under it.
  const auto live = [&](const MemoryPanel::RankRow& r, MemTag tag) {
    return extent(data, mem_tag_color(tag), r.bar_min, ImVec2(r.bar_max.x, r.bar_min.y + MemoryPanel::kBarHeight));
  };
  const MemoryPanel::RankRow& r0 = panel.rows()[0];
  const MemoryPanel::RankRow& r1 = panel.rows()[1];
  const Extent ps0 = live(r0, MemTag::param_shard), act0 = live(r0, MemTag::activation);
  const Extent ps1 = live(r1, MemTag::param_shard), os1 = live(r1, MemTag::optim_state);
  ASSERT_GT(ps0.count, 0);
  ASSERT_GT(act0.count, 0);
  ASSERT_GT(ps1.count, 0);
  ASSERT_GT(os1.count, 0);
  EXPECT_EQ(live(r0, MemTag::grad_full).count, 0);  // nothing of it live at 15
  EXPECT_EQ(live(r1, MemTag::grad_full).count, 0);
  EXPECT_EQ(live(r0, MemTag::optim_state).count, 0);
  // Stacked: activation starts where param_shard ends; widths in proportion to bytes, one scale for all rows.
  EXPECT_NEAR(act0.x0, ps0.x1, 0.5);
  EXPECT_NEAR(act0.width() / ps0.width(), 600.0 / 400.0, 0.01);
  EXPECT_NEAR(os1.width() / ps0.width(), 800.0 / 400.0, 0.01);
  EXPECT_NEAR(ps1.width(), ps0.width(), 0.5);

  // The peak tick and the expected tick: at 1000 and 2100 bytes on that scale.
  const float per_byte = ps0.width() / 400;
  const Extent peak0 = extent(data, kPeakColor, r0.bar_min, r0.bar_max);
  const Extent exp0 = extent(data, kExpectedColor, ImVec2(r0.bar_min.x, r0.bar_min.y - 3), r0.bar_max);
  ASSERT_GT(peak0.count, 0);
  ASSERT_GT(exp0.count, 0);
  EXPECT_NEAR((peak0.x0 + peak0.x1) / 2, ps0.x0 + 1000 * per_byte, 1.5);
  EXPECT_NEAR((exp0.x0 + exp0.x1) / 2, ps0.x0 + 2100 * per_byte, 1.5);
  const Extent peak1 = extent(data, kPeakColor, r1.bar_min, r1.bar_max);
  EXPECT_NEAR((peak1.x0 + peak1.x1) / 2, ps1.x0 + 1200 * per_byte, 1.5);
  // The expected per-tag stack under the live one has grad_full (expected 300, not live now).
  const Extent exp_gf = extent(data, mem_tag_color(MemTag::grad_full),
                               ImVec2(r0.bar_min.x, r0.bar_min.y + MemoryPanel::kBarHeight + 1), r0.bar_max);
  ASSERT_GT(exp_gf.count, 0);
  EXPECT_NEAR(exp_gf.width(), 300 * per_byte, 0.5);
}

TEST(MemoryPanel, ChartStacksTheTagsOverTheView) {
  const TraceStore store = two_ranks();
  const std::vector<std::optional<TagBytes>> expected = {expectation()};
  HeadlessImGui ui(kWidth, kHeight);
  MemoryPanel panel;
  const ImDrawData& data = frame(ui, panel, store, expected, 0, 30, 15);
  const MemoryPanel::RankRow& r1 = panel.rows().at(1);
  const float w = r1.chart_max.x - r1.chart_min.x;
  // optim_state on rank 1 from 14 until the source's last sample, at 20 (nothing is known of it after);
  // grad_full in [5, 12).
  const Extent os = extent(data, mem_tag_color(MemTag::optim_state), r1.chart_min, r1.chart_max);
  ASSERT_GT(os.count, 0);
  EXPECT_NEAR(os.x0, r1.chart_min.x + w * 14 / 30, 1.5);
  EXPECT_NEAR(os.x1, r1.chart_min.x + w * 20 / 30, 1.5);
  const Extent gf = extent(data, mem_tag_color(MemTag::grad_full), r1.chart_min, r1.chart_max);
  ASSERT_GT(gf.count, 0);
  EXPECT_NEAR(gf.x0, r1.chart_min.x + w * 5 / 30, 1.5);
  EXPECT_NEAR(gf.x1, r1.chart_min.x + w * 12 / 30, 1.5);
  // Heights: optim_state (800) stacked over param_shard (400) is twice as tall, to the pixel a stack's edges round to.
  const Extent ps = extent(data, mem_tag_color(MemTag::param_shard), r1.chart_min, r1.chart_max);
  EXPECT_NEAR(os.y1 - os.y0, 2 * (ps.y1 - ps.y0), 1.5);
  EXPECT_NEAR(os.y1, ps.y0, 0.5);
  // The peak line and the dashed expected line cross the chart, the expected one higher (2100 > 1200).
  // (A solid line has vertices at its ends only: the peak line is found at its left end; the dashes of the expected
  // one lie all along it.)
  const Extent peak = extent(data, kPeakColor, r1.chart_min, r1.chart_max);
  const Extent exp = extent(data, kExpectedColor, r1.chart_min, r1.chart_max);
  ASSERT_GT(peak.count, 0);
  ASSERT_GT(exp.count, 0);
  EXPECT_GT(peak.width(), w * 0.9f);
  EXPECT_GT(exp.width(), w * 0.9f);
  const ImVec2 middle_min(r1.chart_min.x + w * 0.5f, r1.chart_min.y + 2),
      middle_max(r1.chart_min.x + w * 0.65f, r1.chart_max.y);  // over the stack
  const Extent peak_line =
      extent(data, kPeakColor, ImVec2(r1.chart_min.x - 1, r1.chart_min.y), ImVec2(r1.chart_min.x + 2, r1.chart_max.y));
  const Extent exp_line = extent(data, kExpectedColor, middle_min, middle_max);
  ASSERT_GT(peak_line.count, 0);
  ASSERT_GT(exp_line.count, 0);
  EXPECT_LT(peak_line.y1 - peak_line.y0, 3);  // a line
  EXPECT_LT(exp_line.y0, peak_line.y0);
  // The peak (1200, the total after 14) is the top of the stack there; the expected total (2100) is 1.75
  // times as high above the chart's floor.
  const float peak_y = (peak_line.y0 + peak_line.y1) / 2, exp_y = (exp_line.y0 + exp_line.y1) / 2;
  EXPECT_NEAR(peak_y, os.y0, 1.0);
  EXPECT_NEAR((ps.y1 - exp_y) / (ps.y1 - peak_y), 2100.0 / 1200, 0.03);
}

TEST(MemoryPanel, BarsAndChartsShareTheHeadersScale) {
  // The highest bytes shown are the expected 2100; the scale has headroom over them, and a bar's full width
  // and a chart's full height both stand for it (the header's "scale" and each chart's top label).
  const TraceStore store = two_ranks();
  const std::vector<std::optional<TagBytes>> expected = {expectation()};
  HeadlessImGui ui(kWidth, kHeight);
  MemoryPanel panel;
  const ImDrawData& data = frame(ui, panel, store, expected, 0, 30, 15);
  const std::int64_t scale = panel.scale();
  EXPECT_GT(scale, 2100);
  const MemoryPanel::RankRow& r1 = panel.rows().at(1);
  const Extent bar_peak = extent(data, kPeakColor, r1.bar_min, r1.bar_max);
  ASSERT_GT(bar_peak.count, 0);
  const float bar_width = r1.bar_max.x - r1.bar_min.x;
  EXPECT_NEAR((bar_peak.x0 + bar_peak.x1) / 2 - r1.bar_min.x, bar_width * 1200 / static_cast<float>(scale), 1.5);
  const Extent chart_peak =
      extent(data, kPeakColor, ImVec2(r1.chart_min.x - 1, r1.chart_min.y), ImVec2(r1.chart_min.x + 2, r1.chart_max.y));
  ASSERT_GT(chart_peak.count, 0);
  const float floor = r1.chart_max.y - 2, height = floor - r1.chart_min.y;  // the chart keeps 2 px under it
  EXPECT_NEAR(floor - (chart_peak.y0 + chart_peak.y1) / 2, height * 1200 / static_cast<float>(scale), 1.5);
}

// A 9 KB spike of activations over 1 KB of shards: drawn in the column at `where` (a fraction of the chart's
// width), a pixel or two wide, and up to the peak line's height (10 KB).
void expect_spike_drawn(const ImDrawData& data, const MemoryPanel::RankRow& row, double where) {
  const float w = row.chart_max.x - row.chart_min.x;
  const Extent drawn = extent(data, mem_tag_color(MemTag::activation), row.chart_min, row.chart_max);
  ASSERT_GT(drawn.count, 0) << "the peak at " << where << " of the chart is not drawn";
  EXPECT_NEAR(drawn.x0, row.chart_min.x + w * static_cast<float>(where), 1.5);
  EXPECT_GE(drawn.x0, row.chart_min.x + 1) << "under the frame's left side";
  EXPECT_LT(drawn.width(), 2.5f);
  const Extent peak = extent(data, kPeakColor, ImVec2(row.chart_max.x - 3, row.chart_min.y),
                             ImVec2(row.chart_max.x + 1, row.chart_max.y));
  ASSERT_GT(peak.count, 0);
  EXPECT_NEAR(drawn.y0, (peak.y0 + peak.y1) / 2, 1.5);
}

TEST(MemoryPanel, APeakShorterThanAPixelShowsWhereItHappened) {
  // 9 KB of activations for 1 ns in a millisecond: a pixel column spans about 1 us. A chart sampled once per
  // column missed it while marking the peak there; each column's highest stack shows it, in the middle and
  // in the first column (not under the chart's frame).
  for (const double where : {0.5, 0.0}) {
    TraceStore store;
    const int s = store.add_source("ASYNC", 1, false);
    Ledger ledger(store, s, 0);
    constexpr SimTime kEnd = 1'000'000;
    const auto spike = static_cast<SimTime>(where * kEnd) + 3;
    ledger.set(0, MemTag::param_shard, 1000);
    ledger.set(spike, MemTag::activation, 9000);
    ledger.set(spike + 1, MemTag::activation, 0);
    ledger.set(kEnd, MemTag::param_shard, 1000);
    HeadlessImGui ui(kWidth, kHeight);
    MemoryPanel panel;
    const std::vector<std::optional<TagBytes>> expected = {std::nullopt};
    const ImDrawData& data = frame(ui, panel, store, expected, 0, kEnd, kEnd);
    expect_spike_drawn(data, panel.rows().at(0), where);
  }
}

TEST(MemoryPanel, APeakFreedAtTheTimeItWasMadeIsDrawn) {
  // A temporary of 9 KB allocated and freed at one host time (the ledger's clock had not moved on): the chart
  // draws it up to the peak line, as it draws a peak that lasted a nanosecond. The series once kept only the
  // last sample at a time, the free: the peak line was marked at 10 KB with nothing under it.
  TraceStore store;
  const int s = store.add_source("ASYNC", 1, false);
  Ledger ledger(store, s, 0);
  constexpr SimTime kEnd = 1'000'000, kSpike = kEnd / 2 + 3;
  ledger.set(0, MemTag::param_shard, 1000);
  ledger.set(kSpike, MemTag::activation, 9000);
  ledger.set(kSpike, MemTag::activation, 0);
  ledger.set(kEnd, MemTag::param_shard, 1000);
  HeadlessImGui ui(kWidth, kHeight);
  MemoryPanel panel;
  const std::vector<std::optional<TagBytes>> expected = {std::nullopt};
  const ImDrawData& data = frame(ui, panel, store, expected, 0, kEnd, kEnd);
  const MemoryPanel::RankRow& row = panel.rows().at(0);
  EXPECT_EQ(row.peak, 10'000);
  EXPECT_EQ(row.now[at(MemTag::activation)], 0);  // freed: the bar shows what is live after the free
  expect_spike_drawn(data, row, 0.5);
}

TEST(MemoryPanel, TagsChangingAtOneTimeStackAsTheyWereAtTheTotalsPeak) {
  // At one host time rank 0 frees a gathered unit (5 KB) and then allocates 5 KB of activations: the total
  // never goes above 6 KB. The column stacks the tags as they were at one moment, never each tag's highest
  // (11 KB, above the peak line); at the next time the activations come before the free, and the stack
  // there reaches the total's peak of 11 KB.
  TraceStore store;
  const int s = store.add_source("ASYNC", 1, false);
  Ledger ledger(store, s, 0);
  constexpr SimTime kEnd = 1'000'000, kSwap = kEnd / 4, kOverlap = 3 * kEnd / 4;
  ledger.set(0, MemTag::param_shard, 1000);
  ledger.set(0, MemTag::param_full, 5000);
  ledger.set(kSwap, MemTag::param_full, 0);
  ledger.set(kSwap, MemTag::activation, 5000);
  ledger.set(kOverlap, MemTag::param_full, 5000);
  ledger.set(kOverlap, MemTag::activation, 0);
  ledger.set(kEnd, MemTag::param_shard, 1000);
  HeadlessImGui ui(kWidth, kHeight);
  MemoryPanel panel;
  const std::vector<std::optional<TagBytes>> expected = {std::nullopt};
  const ImDrawData& data = frame(ui, panel, store, expected, 0, kEnd, kEnd);
  const MemoryPanel::RankRow& row = panel.rows().at(0);
  EXPECT_EQ(row.peak, 11'000);
  const float w = row.chart_max.x - row.chart_min.x, floor = row.chart_max.y - 2;
  const float per_byte = (floor - row.chart_min.y) / static_cast<float>(panel.scale());
  // The tallest stack anywhere in the chart (the tags' colours only: lines are drawn over it).
  const auto top_between = [&](float x0, float x1) {
    float top = floor;
    for (MemTag tag : {MemTag::param_shard, MemTag::param_full, MemTag::activation}) {
      const Extent e = extent(data, mem_tag_color(tag), ImVec2(x0, row.chart_min.y), ImVec2(x1, row.chart_max.y));
      if (e.count > 0) top = std::min(top, e.y0);
    }
    return top;
  };
  const float x_swap = row.chart_min.x + w / 4, x_overlap = row.chart_min.x + 3 * w / 4;
  EXPECT_NEAR(floor - top_between(x_swap - 20, x_swap + 20), 6000 * per_byte, 1.5) << "at the swap";
  EXPECT_NEAR(floor - top_between(x_overlap - 1, x_overlap + 2), 11'000 * per_byte, 1.5) << "at the overlap";
}

TEST(MemoryPanel, AStoppedRunIsDrawnOnlyAsFarAsItGot) {
  // A run paused at 10 beside one at 30: the first's memory is not drawn flat on to 30.
  TraceStore store;
  const int paused = store.add_source("SYNC", 1, true);
  const int running = store.add_source("ASYNC", 1, false);
  Ledger stopped(store, paused, 0), going(store, running, 0);
  stopped.set(0, MemTag::param_shard, 400);
  stopped.set(10, MemTag::optim_state, 100);
  going.set(0, MemTag::param_shard, 400);
  going.set(30, MemTag::optim_state, 100);
  HeadlessImGui ui(kWidth, kHeight);
  MemoryPanel panel;
  const std::vector<std::optional<TagBytes>> expected = {std::nullopt, std::nullopt};
  const ImDrawData& data = frame(ui, panel, store, expected, 0, 30, 30);
  ASSERT_EQ(panel.rows().size(), 2u);
  for (const auto& [row, until] : {std::pair{panel.rows()[0], 10.0f}, std::pair{panel.rows()[1], 30.0f}}) {
    const float w = row.chart_max.x - row.chart_min.x;
    const Extent ps = extent(data, mem_tag_color(MemTag::param_shard), row.chart_min, row.chart_max);
    ASSERT_GT(ps.count, 0);
    EXPECT_NEAR(ps.x1, row.chart_min.x + w * until / 30, 1.5) << "source " << row.source;
  }
}

TEST(MemoryPanel, NoExpectationDrawsNone) {
  const TraceStore store = two_ranks();
  HeadlessImGui ui(kWidth, kHeight);
  MemoryPanel panel;
  const std::vector<std::optional<TagBytes>> none = {std::nullopt};
  for (std::span<const std::optional<TagBytes>> expected :
       {std::span<const std::optional<TagBytes>>(none), std::span<const std::optional<TagBytes>>()}) {
    const ImDrawData& data = frame(ui, panel, store, expected, 0, 30, 15);
    ASSERT_EQ(panel.rows().size(), 2u);
    for (const MemoryPanel::RankRow& r : panel.rows()) {
      EXPECT_EQ(r.expected_total, 0);
      EXPECT_EQ(extent(data, kExpectedColor, r.min, r.max).count, 0);
      EXPECT_GT(extent(data, kPeakColor, r.min, r.max).count, 0);
    }
  }
}

// A device of 1100 bytes: rank 1's peak of 1200 is past it, and the panel says so under the source's name; the
// device's line stands at 1100 bytes on each bar. A device the scale does not reach is neither drawn nor named.
TEST(MemoryPanel, RanksPastTheDevicesMemoryAreNamedAndTheDeviceMarked) {
  TraceStore store = two_ranks();
  store.set_device(0, "tiny-gpu", 1100);
  const std::vector<std::optional<TagBytes>> expected = {expectation()};
  HeadlessImGui ui(kWidth, kHeight);
  MemoryPanel panel;
  const ImDrawData& data = frame(ui, panel, store, expected, 0, 30, 15);
  ASSERT_EQ(panel.rows().size(), 2u);
  EXPECT_EQ(panel.rows()[0].device, 1100);
  ASSERT_EQ(panel.past_device().size(), 1u);
  const std::string& said = panel.past_device()[0];
  EXPECT_NE(said.find("does not fit tiny-gpu's 1.10 kB: rank 1 peaks at 1.20 kB;"), std::string::npos) << said;
  EXPECT_EQ(said.find("rank 0"), std::string::npos) << said;  // its peak of 1000 fits
  // On the bars' scale (2100 expected, with headroom): the device's line at 1100, the peak's at 1000.
  const MemoryPanel::RankRow& r0 = panel.rows()[0];
  const float per_byte = (r0.bar_max.x - r0.bar_min.x) / static_cast<float>(panel.scale());
  const Extent device = extent(data, kDeviceMemoryColor, ImVec2(r0.bar_min.x, r0.bar_min.y - 3), r0.bar_max);
  ASSERT_GT(device.count, 0);
  EXPECT_NEAR((device.x0 + device.x1) / 2, r0.bar_min.x + 1100 * per_byte, 1.5);

  store.set_device(0, "big-gpu", 80'000'000'000);
  const ImDrawData& roomy = frame(ui, panel, store, expected, 0, 30, 15);
  EXPECT_TRUE(panel.past_device().empty());
  for (const MemoryPanel::RankRow& r : panel.rows())
    EXPECT_EQ(extent(roomy, kDeviceMemoryColor, r.min, r.max).count, 0);
}

// A --compare's two runs of two ranks in a panel a third of the window's height: every rank's chart shrinks so
// that the last one ends above the panel's bottom; a panel with room keeps the full height; one with too little
// stops shrinking at the least and scrolls.
TEST(MemoryPanel, ChartsShrinkSoThatEveryRankOfEveryRunFits) {
  TraceStore store;
  for (const char* run : {"SYNC", "ASYNC"}) {
    const int s = store.add_source(run, 2, std::string_view(run) == "SYNC");
    for (int r = 0; r < 2; ++r) Ledger(store, s, r).set(0, MemTag::param_shard, 400);
  }
  const std::vector<std::optional<TagBytes>> expected = {expectation(), expectation()};
  HeadlessImGui ui(kWidth, kHeight);
  const auto chart_heights = [&](float height) {
    MemoryPanel panel;
    for (int f = 0; f < 3; ++f) frame(ui, panel, store, expected, 0, 30, 15, height);  // the headers measured
    EXPECT_EQ(panel.rows().size(), 4u);
    std::vector<float> heights;
    for (const MemoryPanel::RankRow& r : panel.rows()) heights.push_back(r.chart_max.y - r.chart_min.y);
    return std::pair{heights, panel.rows().empty() ? 0.0f : panel.rows().back().max.y};
  };

  const auto [fitted, bottom] = chart_heights(400);
  for (float h : fitted) {
    EXPECT_EQ(h, fitted.front());
    EXPECT_GT(h, MemoryPanel::kMinChartHeight);
    EXPECT_LT(h, MemoryPanel::kChartHeight);
  }
  const float end = 400 - ImGui::GetStyle().WindowPadding.y - ImGui::GetStyle().ItemSpacing.y;
  EXPECT_LE(bottom, end) << "the last rank's chart ends in the panel";
  EXPECT_GE(bottom, end - 4) << "and fills it: less than a pixel a chart left over";

  for (float h : chart_heights(kHeight).first) EXPECT_EQ(h, MemoryPanel::kChartHeight);
  const auto [least, past] = chart_heights(200);
  for (float h : least) EXPECT_EQ(h, MemoryPanel::kMinChartHeight);
  EXPECT_GT(past, 200) << "too little room: the panel scrolls";
}

TEST(MemoryPanel, AMillionSamplesCostVerticesPerPixelNotPerSample) {
  TraceStore store;
  const int s = store.add_source("ASYNC", 1, false);
  Ledger ledger(store, s, 0);
  constexpr int kSamples = 1'000'000;
  constexpr std::array<MemTag, 3> kTags = {MemTag::param_full, MemTag::activation, MemTag::comm_buffer};
  for (std::int64_t i = 0; i < kSamples; ++i)
    ledger.set(i * 10, kTags[static_cast<std::size_t>(i % 3)], 1000 + (i * 7919) % 100'000);
  const SimTime end = SimTime{kSamples} * 10;
  const std::vector<std::optional<TagBytes>> expected = {std::nullopt};
  HeadlessImGui ui(kWidth, kHeight);
  MemoryPanel panel;
  double best_ms = 1e9;
  int vertices = 0;
  const ImDrawData* last = nullptr;
  for (int f = 0; f < 3; ++f) {
    const auto start = std::chrono::steady_clock::now();
    const ImDrawData& data = frame(ui, panel, store, expected, 0, end, end);
    best_ms = std::min(best_ms,
                       std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    vertices = data.TotalVtxCount;
    last = &data;
  }
  const MemoryPanel::RankRow& row = panel.rows().at(0);
  const float chart_width = row.chart_max.x - row.chart_min.x;
  ASSERT_GT(chart_width, 500);
  const Extent act = extent(*last, mem_tag_color(MemTag::activation), row.chart_min, row.chart_max);
  EXPECT_GT(act.width(), chart_width * 0.95f);  // drawn across the view
  // Three tags change within every column: at most a rectangle (4 vertices) per tag and column, plus the
  // legend, labels and lines; one per sample would be 4M.
  EXPECT_LT(vertices, static_cast<int>(16 * chart_width) + 6000)
      << vertices << " vertices for " << chart_width << " px";
  // Frame time is shown, not asserted: wall time depends on the machine and the sanitizer (TSan took 17.8 ms
  // here once); `fsdplab bench --what ui` is where the dashboard's frame times are measured.
  std::printf("a frame over a million samples: %.2f ms (best of 3), %d vertices\n", best_ms, vertices);
}

}  // namespace
}  // namespace fsdplab::app
