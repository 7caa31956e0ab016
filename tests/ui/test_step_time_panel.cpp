// The STEP TIMES panel, headless: which series it compares, the averages and η against values worked out
// here by hand, the same from one A/B source, η undefined where T_sync ≤ ideal, steps arriving between
// frames, a run's known last step left out, and the plotted points (positions to scale, the hovered one).
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "app/dashboard/headless_imgui.hpp"
#include "app/dashboard/step_time_panel.hpp"

namespace fsdplab::app {
namespace {

constexpr SimTime kUs = 1000;  // steps below are written in µs

// A step of known duration, compute and comm: rank 0 computes for `compute` from the step's start and all-gathers
// for `comm` from `comm_from` on (comm_from + comm ≤ duration), so the store reads exactly these back.
struct Step {
  int step;
  SimTime duration, compute, comm;
  double loss = 1.0;
  SimTime comm_from = 0;
};

void add(TraceStore& store, int source, SimTime begin, const Step& s, bool sync) {
  TraceEvent c;
  c.rank = 0;
  c.lane = Lane::compute;
  c.name = "gemm";
  c.category = OpCategory::compute;
  c.step = s.step;
  c.begin = begin;
  c.end = begin + s.compute * kUs;
  store.add_event(source, c);
  TraceEvent g = c;
  g.lane = Lane::all_gather;
  g.name = "all_gather";
  g.category = OpCategory::all_gather;
  g.begin = begin + s.comm_from * kUs;
  g.end = g.begin + s.comm * kUs;
  store.add_event(source, g);
  store.add_step(source, s.step, begin, begin + s.duration * kUs, s.loss, std::numeric_limits<double>::quiet_NaN(),
                 sync);
}

// Adds `steps` one after another to `source`, from time `begin`; returns the end.
SimTime add_all(TraceStore& store, int source, const std::vector<Step>& steps, bool sync, SimTime begin = 0) {
  for (const Step& s : steps) {
    add(store, source, begin, s, sync);
    begin += s.duration * kUs;
  }
  return begin;
}

// Step 0 is warm-up (slow) and must be left out. Three steps each after it.
const std::vector<Step> kSync = {{0, 900, 100, 80}, {1, 300, 150, 120}, {2, 320, 160, 110}, {3, 310, 155, 125}};
const std::vector<Step> kAsync = {{0, 700, 100, 80}, {1, 200, 150, 120}, {2, 210, 150, 130}, {3, 190, 140, 115}};
// By hand, in ms: T_sync = (300 + 320 + 310) / 3 µs, T_async = (200 + 210 + 190) / 3 µs; compute and comm are
// the ASYNC steps' means (150 + 150 + 140) / 3 and (120 + 130 + 115) / 3; ideal = max of the two.
constexpr double kTSync = 930.0 / 3 / 1000, kTAsync = 600.0 / 3 / 1000;
constexpr double kCompute = 440.0 / 3 / 1000, kComm = 365.0 / 3 / 1000, kIdeal = kCompute;
constexpr double kEta = (kTSync - kTAsync) / (kTSync - kIdeal);  // 0.110 / 0.16333 = 0.673

void expect_hand_values(const StepTimePanel::Summary& s) {
  EXPECT_EQ(s.steps_compared, 3);
  EXPECT_NEAR(s.t_sync_ms, kTSync, 1e-12);
  EXPECT_NEAR(s.t_async_ms, kTAsync, 1e-12);
  EXPECT_NEAR(s.compute_ms, kCompute, 1e-12);
  EXPECT_NEAR(s.comm_ms, kComm, 1e-12);
  EXPECT_NEAR(s.ideal_ms, kIdeal, 1e-12);
  ASSERT_TRUE(s.eta.has_value());
  EXPECT_NEAR(*s.eta, kEta, 1e-12);
  EXPECT_NEAR(*s.eta, 0.673469387755102, 1e-9);
  EXPECT_TRUE(s.why.empty());
  // 0.122 ms of comm in a 0.163 ms gap: η's reach is 0.745, and said (to two places).
  EXPECT_NEAR(s.overlappable_ms, kComm, 1e-12);
  EXPECT_NE(s.eta_reach_note.find("under about 0.74 here"), std::string::npos) << s.eta_reach_note;
}

// One frame of the panel in a window filling the display, the mouse at (x, y) or nowhere.
ImDrawData& frame(HeadlessImGui& ui, StepTimePanel& panel, const TraceStore& store, float x = -1, float y = -1) {
  ui.new_frame(x, y);
  ImGui::GetIO().BackendFlags |= ImGuiBackendFlags_RendererHasVtxOffset;
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(ImVec2(1000, 700));
  ImGui::Begin("Step times", nullptr, ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoSavedSettings);
  panel.draw(store);
  ImGui::End();
  return ui.render();
}

TEST(StepTimePanel, ComparesTheSyncSourceWithTheAsyncOne) {
  TraceStore store;
  const int file = store.add_source("other.json", 1, false);  // an ASYNC file before the runs
  const int sync = store.add_source("SYNC", 2, true);
  const int async = store.add_source("ASYNC", 2, false);
  add_all(store, sync, kSync, true);
  add_all(store, async, kAsync, false);
  add_all(store, file, {{0, 50, 10, 10}, {1, 50, 10, 10}}, false);
  // The file's ASYNC steps come first in source order: compare SYNC with it, then without it.
  EXPECT_EQ(summarize_steps(store).async_source, file);

  TraceStore two;
  const int s = two.add_source("SYNC", 2, true);
  const int a = two.add_source("ASYNC", 2, false);
  add_all(two, s, kSync, true);
  add_all(two, a, kAsync, false);
  HeadlessImGui ui;
  StepTimePanel panel;
  frame(ui, panel, two);
  EXPECT_EQ(panel.summary().sync_source, s);
  EXPECT_EQ(panel.summary().async_source, a);
  expect_hand_values(panel.summary());
}

TEST(StepTimePanel, AnABSourceAloneGivesTheSame) {
  TraceStore store;
  const int ab = store.add_source("A/B", 2, false);
  // Warm-up step 0 (SYNC), then SYNC and ASYNC alternating with the steps above.
  std::vector<std::pair<Step, bool>> steps = {{{0, 900, 100, 80}, true}};
  for (std::size_t i = 1; i < kSync.size(); ++i) {
    Step s = kSync[i], a = kAsync[i];
    s.step = static_cast<int>(2 * i - 1);
    a.step = static_cast<int>(2 * i);
    steps.push_back({s, true});
    steps.push_back({a, false});
  }
  SimTime t = 0;
  for (const auto& [step, sync] : steps) {
    add(store, ab, t, step, sync);
    t += step.duration * kUs;
  }
  HeadlessImGui ui;
  StepTimePanel panel;
  frame(ui, panel, store);
  EXPECT_EQ(panel.summary().sync_source, ab);
  EXPECT_EQ(panel.summary().async_source, ab);
  expect_hand_values(panel.summary());
  EXPECT_EQ(panel.points().size(), steps.size());  // every step plotted, in its series
  int sync_points = 0;
  for (const StepTimePanel::Point& p : panel.points()) sync_points += p.sync ? 1 : 0;
  EXPECT_EQ(sync_points, 4);
}

TEST(StepTimePanel, EtaIsUndefinedWhenSyncIsNoSlowerThanIdeal) {
  TraceStore store;
  const int s = store.add_source("SYNC", 1, true);
  const int a = store.add_source("ASYNC", 1, false);
  // ideal = max(compute 150, comm 60) = 150 µs ≥ T_sync = 150 µs.
  add_all(store, s, {{0, 500, 100, 50}, {1, 150, 140, 60}}, true);
  add_all(store, a, {{0, 500, 100, 50}, {1, 140, 150, 60}}, false);
  HeadlessImGui ui;
  StepTimePanel panel;
  frame(ui, panel, store);
  const StepTimePanel::Summary& sum = panel.summary();
  EXPECT_EQ(sum.steps_compared, 1);
  EXPECT_NEAR(sum.t_sync_ms, 0.150, 1e-12);
  EXPECT_NEAR(sum.ideal_ms, 0.150, 1e-12);
  EXPECT_FALSE(sum.eta.has_value());
  EXPECT_NE(sum.why.find("nothing to hide"), std::string::npos) << sum.why;
}

// η's reach: overlap can take at most min(compute, comm) off T_sync − ideal. Where that is most of the gap, nothing
// is said; where it is little of it (one rank, whose collectives are local copies), the panel says how far η can go.
TEST(StepTimePanel, EtasReachIsSaidWhereLittleOfTheGapIsCommunication) {
  for (const int world : {2, 1}) {
    SCOPED_TRACE(world);
    TraceStore store;
    const int s = store.add_source("SYNC", world, true);
    const int a = store.add_source("ASYNC", world, false);
    // W = 2: T_sync 300, ideal = compute 150, comm 140: 140 of the 150 µs gap can overlap (0.93).
    // W = 1: T_sync 400, ideal = compute 250, comm 30: 30 of 150 (0.20).
    const SimTime t_sync = world == 2 ? 300 : 400, compute = world == 2 ? 150 : 250, comm = world == 2 ? 140 : 30;
    add_all(store, s, {{0, 500, 100, 50}, {1, t_sync, compute, comm}}, true);
    add_all(store, a, {{0, 500, 100, 50}, {1, t_sync - 20, compute, comm}}, false);
    HeadlessImGui ui;
    StepTimePanel panel;
    frame(ui, panel, store);
    const StepTimePanel::Summary& sum = panel.summary();
    ASSERT_TRUE(sum.eta.has_value());
    EXPECT_NEAR(sum.overlappable_ms, static_cast<double>(comm) / 1000, 1e-12);
    if (world == 2) {
      EXPECT_TRUE(sum.eta_reach_note.empty()) << sum.eta_reach_note;
    } else {
      EXPECT_EQ(sum.eta_reach_note.rfind("One rank: ", 0), 0u) << sum.eta_reach_note;
      EXPECT_NE(sum.eta_reach_note.find("min(compute, comm) = 0.030 ms"), std::string::npos) << sum.eta_reach_note;
      EXPECT_NE(sum.eta_reach_note.find("under about 0.20 here"), std::string::npos) << sum.eta_reach_note;
    }
  }
}

TEST(StepTimePanel, StepsArrivingBetweenFramesUpdateTheSummary) {
  TraceStore store;
  const int s = store.add_source("SYNC", 2, true);
  const int a = store.add_source("ASYNC", 2, false);
  HeadlessImGui ui;
  StepTimePanel panel;
  frame(ui, panel, store);
  EXPECT_EQ(panel.summary().steps_compared, 0);
  EXPECT_FALSE(panel.summary().eta.has_value());
  EXPECT_FALSE(panel.summary().why.empty());

  SimTime ts = add_all(store, s, {kSync[0], kSync[1]}, true);
  SimTime ta = add_all(store, a, {kAsync[0]}, false);
  frame(ui, panel, store);
  EXPECT_EQ(panel.summary().steps_compared, 0);  // ASYNC has only its warm-up step
  EXPECT_EQ(panel.points().size(), 3u);

  ta = add_all(store, a, {kAsync[1]}, false, ta);
  frame(ui, panel, store);
  EXPECT_EQ(panel.summary().steps_compared, 1);
  EXPECT_NEAR(panel.summary().t_sync_ms, 0.300, 1e-12);
  EXPECT_NEAR(panel.summary().t_async_ms, 0.200, 1e-12);
  ASSERT_TRUE(panel.summary().eta.has_value());
  EXPECT_NEAR(*panel.summary().eta, (0.300 - 0.200) / (0.300 - 0.150), 1e-12);

  // ASYNC runs ahead: its step 2 has no SYNC partner yet and does not count; then SYNC catches up.
  ta = add_all(store, a, {kAsync[2], kAsync[3]}, false, ta);
  frame(ui, panel, store);
  EXPECT_EQ(panel.summary().steps_compared, 1);
  EXPECT_NEAR(panel.summary().t_async_ms, 0.200, 1e-12);
  add_all(store, s, {kSync[2], kSync[3]}, true, ts);
  frame(ui, panel, store);
  expect_hand_values(panel.summary());
}

TEST(StepTimePanel, AveragesTheLastTenPairs) {
  TraceStore store;
  const int s = store.add_source("SYNC", 1, true);
  const int a = store.add_source("ASYNC", 1, false);
  std::vector<Step> sync, async;
  for (int i = 0; i <= 15; ++i) {
    sync.push_back({i, 1000 + 10 * i, 300 + i, 200});
    async.push_back({i, 600 + 5 * i, 300 + i, 250 + 2 * i});
  }
  add_all(store, s, sync, true);
  add_all(store, a, async, false);
  // Steps 6..15: the last ten after step 0.
  double ts = 0, ta = 0, c = 0, m = 0;
  for (int i = 6; i <= 15; ++i) {
    ts += 1000 + 10 * i;
    ta += 600 + 5 * i;
    c += 300 + i;
    m += 250 + 2 * i;
  }
  const StepTimePanel::Summary sum = summarize_steps(store);
  EXPECT_EQ(sum.steps_compared, 10);
  EXPECT_NEAR(sum.t_sync_ms, ts / 10 / 1000, 1e-12);
  EXPECT_NEAR(sum.t_async_ms, ta / 10 / 1000, 1e-12);
  EXPECT_NEAR(sum.compute_ms, c / 10 / 1000, 1e-12);
  EXPECT_NEAR(sum.comm_ms, m / 10 / 1000, 1e-12);
  EXPECT_NEAR(sum.ideal_ms, std::max(c, m) / 10 / 1000, 1e-12);
  ASSERT_TRUE(sum.eta.has_value());
  EXPECT_NEAR(*sum.eta, (ts - ta) / (ts - std::max(c, m)), 1e-12);
}

TEST(StepTimePanel, AKnownLastStepIsLeftOutLikeTheFirst) {
  // A run's last ASYNC step gathers no root for a next step and runs shorter: where the store knows the
  // run ends there, the averages are those of steps 1 and 2 alone.
  TraceStore store;
  const int s = store.add_source("SYNC", 2, true);
  const int a = store.add_source("ASYNC", 2, false);
  add_all(store, s, kSync, true);
  add_all(store, a, kAsync, false);
  store.set_last_step(s, 3);
  store.set_last_step(a, 3);
  const StepTimePanel::Summary sum = summarize_steps(store);
  EXPECT_EQ(sum.steps_compared, 2);
  EXPECT_NEAR(sum.t_sync_ms, (300.0 + 320) / 2 / 1000, 1e-12);
  EXPECT_NEAR(sum.t_async_ms, (200.0 + 210) / 2 / 1000, 1e-12);
  EXPECT_NEAR(sum.compute_ms, 150.0 / 1000, 1e-12);
  EXPECT_NEAR(sum.comm_ms, 125.0 / 1000, 1e-12);
  // Unknown (a remote run): the last step counts.
  store.set_last_step(a, -1);
  store.set_last_step(s, -1);
  EXPECT_EQ(summarize_steps(store).steps_compared, 3);
}

TEST(StepTimePanel, PlotsEachStepToScaleAndHoversIt) {
  TraceStore store;
  const int s = store.add_source("SYNC", 2, true);
  const int a = store.add_source("ASYNC", 2, false);
  add_all(store, s, kSync, true);
  add_all(store, a, kAsync, false);
  HeadlessImGui ui;
  StepTimePanel panel;
  frame(ui, panel, store);
  ASSERT_EQ(panel.points().size(), kSync.size() + kAsync.size());
  const float floor = panel.plot_max().y;
  // Heights above the plot's floor in proportion to durations; x by step index, the same for both series.
  const StepTimePanel::Point& first = panel.points()[0];
  ASSERT_TRUE(first.sync);
  const double per_us = (floor - first.pos.y) / 900.0;
  for (const StepTimePanel::Point& p : panel.points()) {
    const Step& want = (p.sync ? kSync : kAsync)[static_cast<std::size_t>(p.index)];
    EXPECT_EQ(p.step, want.step);
    EXPECT_NEAR(floor - p.pos.y, per_us * static_cast<double>(want.duration), 1.0) << "step " << p.step;
    EXPECT_GE(p.pos.x, panel.plot_min().x);
    EXPECT_LE(p.pos.x, panel.plot_max().x);
  }
  EXPECT_FLOAT_EQ(panel.points()[1].pos.x, panel.points()[5].pos.x);  // SYNC and ASYNC step 1
  EXPECT_LT(panel.points()[1].pos.x, panel.points()[2].pos.x);
  EXPECT_FALSE(panel.hovered().has_value());

  // The mouse over ASYNC step 2: that point is the hovered one (ImGui hovers after a frame under the mouse).
  const ImVec2 target = panel.points()[6].pos;
  frame(ui, panel, store, target.x + 2, target.y - 1);
  frame(ui, panel, store, target.x + 2, target.y - 1);
  ASSERT_TRUE(panel.hovered().has_value());
  EXPECT_EQ(panel.hovered()->source, a);
  EXPECT_EQ(panel.hovered()->step, 2);
  EXPECT_FALSE(panel.hovered()->sync);
}

// Three frames of the panel in a window `width` wide: a table's columns fit their contents after a frame.
void frames_at(HeadlessImGui& ui, StepTimePanel& panel, const TraceStore& store, float width) {
  for (int i = 0; i < 3; ++i) {
    ui.new_frame();
    ImGui::SetNextWindowPos(ImVec2(0, 0));
    ImGui::SetNextWindowSize(ImVec2(width, 700));
    ImGui::Begin("Step times", nullptr, ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoSavedSettings);
    panel.draw(store);
    ImGui::End();
    ui.render();
  }
}

bool intersect(ImVec2 a0, ImVec2 a1, ImVec2 b0, ImVec2 b1) {
  return a0.x < b1.x && b0.x < a1.x && a0.y < b1.y && b0.y < a1.y;
}

TEST(StepTimePanel, TheLegendListsOnlyTheLinesDrawn) {
  // One ASYNC trace (fsdplab view of one file), or SYNC alone: no pair, so no reference lines.
  TraceStore store;
  const int a = store.add_source("ASYNC", 2, false);
  add_all(store, a, kAsync, false);
  HeadlessImGui ui;
  StepTimePanel panel;
  frame(ui, panel, store);
  EXPECT_EQ(panel.legend(), std::vector<std::string>{"ASYNC"});
  EXPECT_TRUE(panel.reference_labels().empty());
  // With a SYNC run beside it, the three lines are drawn and listed.
  const int s = store.add_source("SYNC", 2, true);
  add_all(store, s, kSync, true);
  frame(ui, panel, store);
  EXPECT_EQ(panel.legend(),
            (std::vector<std::string>{"ASYNC", "SYNC", "compute", "comm", "ideal = max(compute, comm)"}));
}

TEST(StepTimePanel, RunsThatEndedWithNoPairSaySoRatherThanWait) {
  // Two steps each (--steps 2): the first is warm-up, the last has no next step; nothing is left to pair.
  TraceStore store;
  const int s = store.add_source("SYNC", 16, true);
  const int a = store.add_source("ASYNC", 16, false);
  add_all(store, s, {kSync[0], kSync[1]}, true);
  add_all(store, a, {kAsync[0], kAsync[1]}, false);
  store.set_last_step(s, 1);
  store.set_last_step(a, 1);
  const StepTimePanel::Summary ended = summarize_steps(store);
  EXPECT_EQ(ended.steps_compared, 0);
  EXPECT_EQ(ended.why.find("waiting"), std::string::npos) << ended.why;
  EXPECT_NE(ended.why.find("ended"), std::string::npos) << ended.why;
  // While a run may still bring a step (its end unknown, or not reached), it waits.
  store.set_last_step(a, 5);
  EXPECT_NE(summarize_steps(store).why.find("waiting"), std::string::npos);
}

TEST(StepTimePanel, ReferenceLabelsCoverNeitherEachOtherNorAMarker) {
  // comm above compute and ASYNC's steps at about comm = ideal, their markers on its line: the case where
  // "ideal" and "comm" labels ran into each other on the ASYNC marker; then compute and comm 3 % apart.
  for (const auto& [async_comm, compute] : {std::pair<SimTime, SimTime>{300, 100}, {290, 300}}) {
    TraceStore store;
    const int s = store.add_source("SYNC", 2, true);
    const int a = store.add_source("ASYNC", 2, false);
    std::vector<Step> sync, async;
    for (int i = 0; i < 4; ++i) {
      sync.push_back({i, 500, compute, async_comm});
      async.push_back({i, std::max(async_comm, compute) + 2, compute, async_comm});
    }
    add_all(store, s, sync, true);
    add_all(store, a, async, false);
    for (float width : {1000.0f, 520.0f, 300.0f}) {
      HeadlessImGui ui;
      StepTimePanel panel;
      frames_at(ui, panel, store, width);
      const auto& labels = panel.reference_labels();
      if (width >= 500) {
        EXPECT_EQ(labels.size(), 2u) << "at " << width << " px";  // room for both
      }
      for (std::size_t i = 0; i < labels.size(); ++i) {
        EXPECT_GE(labels[i].min.x, panel.plot_min().x);
        EXPECT_LE(labels[i].max.x, panel.plot_max().x);
        for (std::size_t j = 0; j < i; ++j)
          EXPECT_FALSE(intersect(labels[i].min, labels[i].max, labels[j].min, labels[j].max))
              << "'" << labels[i].text << "' over '" << labels[j].text << "' at " << width << " px";
        for (const StepTimePanel::Point& p : panel.points())
          EXPECT_FALSE(intersect(labels[i].min, labels[i].max, ImVec2(p.pos.x - 3, p.pos.y - 3),
                                 ImVec2(p.pos.x + 3, p.pos.y + 3)))
              << "'" << labels[i].text << "' over step " << p.step << " at " << width << " px";
      }
      // ideal = max(compute, comm) shares the higher line's label, placed first.
      if (!labels.empty()) {
        EXPECT_NE(labels[0].text.find("= ideal"), std::string::npos) << labels[0].text;
      }
    }
  }
}

// A dry run of a large model on a slow link takes minutes a step: the panel writes seconds ("14.667 s"), which fit its
// axis and its table, where milliseconds ("14666.667 ms", "100000 ms") ran off the axis's left side. Its numbers stay
// in milliseconds; the hand values' steps here are 100,000 times longer, 30 s and more.
TEST(StepTimePanel, StepsOfTenSecondsOrMoreAreWrittenInSeconds) {
  const auto longer = [](std::vector<Step> steps) {
    for (Step& step : steps) {
      step.duration *= 100'000;
      step.compute *= 100'000;
      step.comm *= 100'000;
    }
    return steps;
  };
  TraceStore store;
  const int s = store.add_source("SYNC", 2, true);
  const int a = store.add_source("ASYNC", 2, false);
  add_all(store, s, kSync, true);
  add_all(store, a, kAsync, false);
  EXPECT_EQ(std::string(step_time_unit(store).name), "ms");
  TraceStore slow;
  add_all(slow, slow.add_source("SYNC", 2, true), longer(kSync), true);
  add_all(slow, slow.add_source("ASYNC", 2, false), longer(kAsync), false);
  EXPECT_EQ(std::string(step_time_unit(slow).name), "s");
  EXPECT_EQ(clock_kind(slow, step_time_unit(slow).name), "virtual s");
  HeadlessImGui ui;
  StepTimePanel panel;
  const ImDrawData& data = frame(ui, panel, slow);
  EXPECT_NEAR(panel.summary().t_sync_ms, kTSync * 100'000, 1e-6);
  EXPECT_EQ(panel.table_columns(),
            (std::vector<std::string>{"series", "step", "s", "mean", "compute", "comm", "overlap"}));
  ASSERT_FALSE(panel.reference_labels().empty());
  for (const StepTimePanel::Label& label : panel.reference_labels())
    EXPECT_TRUE(label.text.ends_with(" s")) << label.text;
  EXPECT_TRUE(std::any_of(panel.reference_labels().begin(), panel.reference_labels().end(),
                          [](const StepTimePanel::Label& l) { return l.text.ends_with(" 14.667 s"); }));
  // The axis's labels (dim text left of the plot) begin inside the panel's content, none cut off at its left.
  float leftmost = panel.plot_min().x;
  for (int l = 0; l < data.CmdListsCount; ++l)
    for (const ImDrawVert& v : data.CmdLists[l]->VtxBuffer)
      if (v.col == IM_COL32(160, 160, 160, 255) && v.pos.x < panel.plot_min().x && v.pos.y >= panel.plot_min().y &&
          v.pos.y <= panel.plot_max().y)
        leftmost = std::min(leftmost, v.pos.x);
  EXPECT_LT(leftmost, panel.plot_min().x) << "no axis label found";
  EXPECT_GE(leftmost, ImGui::GetStyle().WindowPadding.x);
}

TEST(StepTimePanel, TheTableKeepsItsNumbersWholeAndElidesLongNames) {
  // A remote run's name is long; the numbers must still read in full.
  TraceStore store;
  const int a = store.add_source("remote: gpt2 test-small @vm:3793 (2 ranks, async)", 2, false);
  const int s = store.add_source("remote: gpt2 test-small @vm:3794 (2 ranks, sync)", 2, true);
  add_all(store, a, kAsync, false);
  add_all(store, s, kSync, true);
  HeadlessImGui ui;
  StepTimePanel panel;
  frames_at(ui, panel, store, 380);  // the panel at 1600 px
  EXPECT_EQ(panel.table_columns(),
            (std::vector<std::string>{"series", "step", "ms", "mean", "compute", "comm", "overlap"}));
  EXPECT_TRUE(panel.table_fits());
  frames_at(ui, panel, store, 200);  // at 1024 px: the columns least needed give way, the rest read whole
  const std::vector<std::string>& columns = panel.table_columns();
  EXPECT_NE(std::find(columns.begin(), columns.end(), "mean"), columns.end());
  EXPECT_NE(std::find(columns.begin(), columns.end(), "overlap"), columns.end());
  EXPECT_LT(columns.size(), 7u);
  EXPECT_TRUE(panel.table_fits());
}

// The table's overlap % is the share of a series' communication that compute covered, over its recent steps together
// (HTA's |comm ∩ compute| / |comm|): here SYNC gathers after its compute, ASYNC gathers beside it, 60 µs of each
// 100 µs gather under compute in steps 1 and 2, 90 of 100 in step 3: (60 + 60 + 90) / 300 = 70 %.
TEST(StepTimePanel, TheTableGivesEachSeriesTheShareOfItsCommunicationComputeHid) {
  TraceStore store;
  const int s = store.add_source("SYNC", 2, true);
  const int a = store.add_source("ASYNC", 2, false);
  for (int step = 0; step < 4; ++step) {
    add_all(store, s, {{step, 400, 200, 100, 1.0, 200}}, true, step * 1000 * kUs);
    add_all(store, a, {{step, 400, 200, 100, 1.0, step == 3 ? 110 : 140}}, false, step * 1000 * kUs);
  }
  HeadlessImGui ui;
  StepTimePanel panel;
  frame(ui, panel, store);
  const std::vector<StepTimePanel::TableRow>& rows = panel.table_rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].name, "SYNC");
  EXPECT_EQ(rows[0].numbers.at("overlap"), "0 %");
  EXPECT_EQ(rows[1].name, "ASYNC");
  EXPECT_EQ(rows[1].numbers.at("overlap"), "70 %");
  EXPECT_EQ(rows[1].numbers.at("comm"), "0.100");
}

// --compare impl: the student's run failed at its first step while the reference trains on. Its row once showed
// only its name with no numbers, as a run that is slow to its first step shows: now a "failed" mark goes before
// its name, and the error is in the row's tooltip.
TEST(StepTimePanel, AFailedRunIsMarkedFailedInTheTableWithItsErrorInTheTooltip) {
  TraceStore store;
  const int reference = store.add_source("reference", 2, false);
  const int student = store.add_source("student (3)", 2, false);
  add_all(store, reference, kAsync, false);
  const std::string error = "rank 0 failed: task 3, ForwardTask::wait_for_unshard: not implemented yet";
  store.set_failure(student, error);
  HeadlessImGui ui;
  StepTimePanel panel;
  frame(ui, panel, store);
  const std::vector<StepTimePanel::TableRow>& rows = panel.table_rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].name, "ASYNC (reference)");
  EXPECT_FALSE(rows[0].failed);
  EXPECT_EQ(rows[1].name, "ASYNC (student (3))");
  EXPECT_TRUE(rows[1].failed);
  EXPECT_EQ(panel.row_tooltip(), "");
  const ImVec2 over((rows[1].min.x + rows[1].max.x) / 2, (rows[1].min.y + rows[1].max.y) / 2);
  frame(ui, panel, store, over.x, over.y);
  frame(ui, panel, store, over.x, over.y);  // ImGui hovers a window from the frame before
  EXPECT_NE(panel.row_tooltip().find("failed: " + error), std::string::npos) << panel.row_tooltip();
  // The reference's row is not marked, and says nothing more when hovered (its name and numbers fit).
  const ImVec2 over_reference((rows[0].min.x + rows[0].max.x) / 2, (rows[0].min.y + rows[0].max.y) / 2);
  frame(ui, panel, store, over_reference.x, over_reference.y);
  EXPECT_EQ(panel.row_tooltip(), "");
  // At the dashboard's width (1600 px) the failed run's name still reads past the mark: a column gives way first
  // (the mark once took "ASYNC (3=mutant:...)" down to "A...").
  frames_at(ui, panel, store, 380);
  ASSERT_EQ(panel.table_rows().size(), 2u);
  const StepTimePanel::TableRow& failed = panel.table_rows()[1];
  EXPECT_GE(failed.max.x - failed.min.x, ImGui::CalcTextSize("failed ASYNC...").x);
  EXPECT_TRUE(panel.table_fits());
}

// Side by side, the ASYNC run failed after its warm-up step: the comparison says it will never come, rather
// than wait for it.
TEST(StepTimePanel, AComparisonWithAFailedRunSaysSoRatherThanWait) {
  TraceStore store;
  const int s = store.add_source("SYNC", 2, true);
  const int a = store.add_source("ASYNC", 2, false);
  add_all(store, s, kSync, true);
  add_all(store, a, {kAsync[0]}, false);
  EXPECT_NE(summarize_steps(store).why.find("waiting"), std::string::npos);
  store.set_failure(a, "rank 1 failed: loss is NaN at step 2");
  const StepTimePanel::Summary failed = summarize_steps(store);
  EXPECT_EQ(failed.steps_compared, 0);
  EXPECT_NE(failed.why.find("ASYNC failed"), std::string::npos) << failed.why;
}

}  // namespace
}  // namespace fsdplab::app
