// `fsdplab bench --what ui` — the dashboard's frame build time: CPU wall clock of one headless frame
// (HeadlessImGui::new_frame, a window filling the display with TimelinePanel::draw in it, render), over
// synthetic traces of 10k, 100k and 1M events, first with the whole trace in view (the worst case for
// drawing: every event is in view and most are narrower than a pixel, so level of detail must fold them),
// then zoomed to 1 % of the trace (the common case while reading a step). The mouse rests over a compute
// lane, so each frame also finds the op or block under it and shows its tooltip. Building the store is
// timed apart and not counted in a frame. Then the whole dashboard (every panel) replaying the same traces.
#include "app/bench_ui.hpp"

#include <imgui.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "app/dashboard/dashboard.hpp"
#include "app/dashboard/headless_imgui.hpp"
#include "app/dashboard/timeline_format.hpp"
#include "app/dashboard/timeline_panel.hpp"
#include "app/median.hpp"

namespace fsdplab::app {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

constexpr double kGoalMs = 4.0;  // a quarter of a 60 Hz frame for the timeline at 1M events

// One rank of one source, written the way the sim device stamps ops (each stream a cursor; collectives
// share the rank's link).
class RankTrace {
 public:
  RankTrace(TraceStore& store, int source, int rank, bool sync, std::size_t budget)
      : store_(store), source_(source), rank_(rank), sync_(sync), budget_(budget),
        rng_(0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(2 * source + rank + 1)) {}

  void run() {
    for (int step = 0; budget_ > 0; ++step) {
      step_ = step;
      for (int u = 0; u < kUnits && budget_ > 0; ++u) unit(u, "forward", kForwardKernels, false);
      for (int u = kUnits - 1; u >= 0 && budget_ > 0; --u) unit(u, "backward", 2 * kForwardKernels, true);
      // The CPU optimizer step: the host waits for the device, then steps each unit's shard.
      host_ = std::max({host_, compute_, link_});
      for (int u = 0; u < kUnits && budget_ > 0; ++u) {
        const SimTime d = uniform(30'000, 80'000);
        emit(Lane::host, OpCategory::host, "adamw", u, "optimizer", host_, d, 4 * kShardBytes, {});
        host_ += d;
      }
      compute_ = std::max(compute_, host_);
    }
  }

 private:
  static constexpr int kUnits = 12;
  static constexpr int kForwardKernels = 40;
  static constexpr std::int64_t kShardBytes = 24'000'000;
  static constexpr std::int64_t kFullBytes = 2 * kShardBytes;
  static constexpr std::int64_t kActivationBytes = 30'000'000;

  // The ledger's samples as the sim device sends them: the tag's live bytes and the total, not counted
  // in the event budget (a memory panel reads them, the timeline does not).
  void sample(MemTag tag, std::int64_t live, SimTime time) {
    CounterSample c;
    c.rank = rank_;
    c.time = time;
    c.tag = tag;
    c.tag_live = live;
    c.total_live = 3 * kUnits * kShardBytes + full_live_ + act_live_;
    store_.add_counter(source_, c);
  }

  void unit(int u, const char* phase, int kernels, bool backward) {
    // The unit's all-gather: SYNC issues it when compute is done; ASYNC as soon as the link is free and
    // the unit before last has started computing (two gathers in flight).
    const SimTime gather_begin = sync_ ? std::max(link_, compute_) : std::max({link_, gather_, previous_compute_});
    const SimTime gather_end = gather_begin + uniform(250'000, 450'000);
    const OpId gather = emit(Lane::all_gather, OpCategory::all_gather, "all_gather", u, phase, gather_begin,
                             gather_end - gather_begin, 2 * kShardBytes, {});
    link_ = gather_ = gather_end;
    sample(MemTag::param_full, full_live_ += kFullBytes, gather_begin);
    if (budget_ == 0) return;
    const SimTime marker = uniform(2'000, 5'000);
    emit(Lane::host, OpCategory::host, backward ? "pre_backward" : "pre_forward", u, phase, host_, marker, 0, {});
    host_ += marker;

    compute_ = std::max(compute_, gather_end);
    previous_compute_ = current_compute_;
    current_compute_ = compute_;
    static constexpr std::array<const char*, 6> kNames = {"matmul", "layernorm", "gelu", "attention", "softmax", "add"};
    OpId last = 0;
    for (int k = 0; k < kernels && budget_ > 0; ++k) {
      const SimTime d = uniform(5'000, 60'000);
      last = emit(Lane::compute, OpCategory::compute, kNames[static_cast<std::size_t>(k) % kNames.size()], u, phase,
                  compute_, d, d * 1'500, k == 0 ? std::vector<OpRef>{{rank_, gather}} : std::vector<OpRef>{});
      compute_ += d + uniform(1'000, 3'000);
      host_ += 4'000;  // launches
    }
    sample(MemTag::param_full, full_live_ -= kFullBytes, compute_);
    sample(MemTag::activation, act_live_ += backward ? -kActivationBytes : kActivationBytes, compute_);
    if (!backward || budget_ == 0) return;
    const SimTime reduce_begin = std::max(link_, compute_);
    const SimTime reduce_end = reduce_begin + uniform(250'000, 450'000);
    emit(Lane::reduce_scatter, OpCategory::reduce_scatter, "reduce_scatter", u, phase, reduce_begin,
         reduce_end - reduce_begin, 2 * kShardBytes, {{rank_, last}});
    link_ = reduce_end;
    if (sync_) compute_ = std::max(compute_, reduce_end);
  }

  OpId emit(Lane lane, OpCategory category, const char* name, int unit, const char* phase, SimTime begin,
            SimTime duration, std::int64_t bytes, std::vector<OpRef> deps) {
    if (budget_ == 0) return 0;
    --budget_;
    event_.rank = rank_;
    event_.lane = lane;
    event_.name = name;
    event_.category = category;
    event_.step = step_;
    event_.unit = unit;
    event_.phase = phase;
    event_.begin = begin;
    event_.end = begin + duration;
    event_.bytes = bytes;
    event_.op = lane == Lane::host && category == OpCategory::host && bytes == 0 ? 0 : next_op_++;
    event_.deps = std::move(deps);
    store_.add_event(source_, event_);
    return event_.op;
  }

  SimTime uniform(SimTime lo, SimTime hi) {
    rng_ = rng_ * 6364136223846793005ull + 1442695040888963407ull;
    return lo + static_cast<SimTime>((rng_ >> 33) % static_cast<std::uint64_t>(hi - lo + 1));
  }

  TraceStore& store_;
  int source_, rank_;
  bool sync_;
  std::size_t budget_;
  std::uint64_t rng_;
  int step_ = 0;
  SimTime host_ = 0, compute_ = 0, link_ = 0, gather_ = 0, previous_compute_ = 0, current_compute_ = 0;
  OpId next_op_ = 1;
  std::int64_t full_live_ = 0, act_live_ = 0;
  TraceEvent event_;
};

struct ViewTiming {
  std::string view;
  TimelineStats stats;
  int vertices = 0;
  double median_ms = 0, max_ms = 0;
};

}  // namespace

TraceStore synthetic_trace(std::size_t events) {
  TraceStore store;
  const int sync = store.add_source("SYNC", 2, true);
  const int async = store.add_source("ASYNC", 2, false);
  std::size_t left = events;
  for (int source : {sync, async})
    for (int rank = 0; rank < 2; ++rank) {
      const int index = 2 * source + rank;  // 0..3: the last one takes the remainder
      const std::size_t share = index == 3 ? left : events / 4;
      RankTrace(store, source, rank, source == sync, share).run();
      left -= share;
    }
  return store;
}

void bench_ui(const UiBenchOptions& options) {
  const auto start = Clock::now();
  std::printf("fsdplab bench --what ui: the timeline's frame build time, CPU wall clock of this host (steady_clock)\n");
  std::printf(
      "Headless ImGui %.0f x %.0f: new_frame + a full-display window with TimelinePanel::draw + render, the mouse\n"
      "over a compute lane (its tooltip shown). %d warm-up frames, then %d timed. Synthetic trace: SYNC and ASYNC\n"
      "x 2 ranks; per step 12 FSDP units, each an all-gather (250-450 us), 40 forward / 80 backward compute\n"
      "kernels (5-60 us), a reduce-scatter after its backward, host markers and a CPU optimizer step.\n\n",
      options.width, options.height, options.warmup, options.frames);
  std::printf(
      "| events    | trace      | view               | lanes | items drawn | folded blocks | ops folded | vertices | "
      "median ms | max ms |\n");
  std::printf(
      "|-----------|------------|--------------------|-------|-------------|---------------|------------|----------|"
      "-----------|--------|\n");
  double goal_median = -1, goal_max = -1;
  std::vector<std::pair<std::size_t, double>> builds;
  for (const std::size_t n : options.events) {
    const auto build_start = Clock::now();
    const TraceStore store = synthetic_trace(n);
    builds.emplace_back(n, ms_since(build_start));

    HeadlessImGui ui(options.width, options.height);
    ImGui::GetIO().BackendFlags |= ImGuiBackendFlags_RendererHasVtxOffset;  // as the OpenGL 3 backend says
    TimelinePanel panel;
    ImVec2 mouse(-1, -1);
    const auto frame = [&] {
      ui.new_frame(mouse.x, mouse.y, false);
      ImGui::SetNextWindowPos(ImVec2(0, 0));
      ImGui::SetNextWindowSize(ImGui::GetIO().DisplaySize);
      ImGui::Begin("fsdplab bench ui", nullptr,
                   ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoSavedSettings);
      panel.draw(store);
      ImGui::End();
      return ui.render().TotalVtxCount;
    };

    const SimTime first = store.first_time(), last = store.last_time(), span = last - first;
    const std::array<std::pair<std::string, std::pair<SimTime, SimTime>>, 2> views = {
        std::pair{std::string("all"), std::pair{first, last}},
        std::pair{std::string("1 %"), std::pair{first + span / 2, first + span / 2 + span / 100}}};
    for (const auto& [name, view] : views) {
      panel.set_view(view.first, view.second);
      frame();
      const LaneRect& lane = panel.lanes_drawn().at(0);  // SYNC rank 0's compute lane
      mouse = ImVec2(std::floor((lane.min.x + lane.max.x) / 2), std::floor((lane.min.y + lane.max.y) / 2));
      for (int i = 0; i < options.warmup; ++i) frame();
      std::vector<double> times;
      ViewTiming row;
      row.view = name + " (" + format_duration(view.second - view.first) + ")";
      for (int i = 0; i < options.frames; ++i) {
        const auto t = Clock::now();
        row.vertices = frame();
        times.push_back(ms_since(t));
      }
      row.median_ms = median(times);
      row.max_ms = *std::max_element(times.begin(), times.end());
      row.stats = panel.stats();
      std::printf("| %9s | %10s | %-18s | %5d | %11s | %13s | %10s | %8s | %9.3f | %6.3f |\n", format_count(n).c_str(),
                  format_duration(span).c_str(), row.view.c_str(), row.stats.lanes,
                  format_count(row.stats.items_drawn).c_str(), format_count(row.stats.folded_blocks).c_str(),
                  format_count(row.stats.items_folded).c_str(),
                  format_count(static_cast<std::uint64_t>(row.vertices)).c_str(), row.median_ms, row.max_ms);
      if (n == options.events.back() && name == "all") goal_median = row.median_ms, goal_max = row.max_ms;
      mouse = ImVec2(-1, -1);
    }
  }
  // The whole dashboard as `fsdplab view` shows the same trace: every panel (the timeline with all of it in
  // view, memory over the view, step times, the replay's side panel), steps derived from the events.
  std::printf("\nThe whole dashboard (fsdplab view of the same trace, every panel, all of it in view, memory samples "
              "at each gather and free):\n\n| events    | median ms | max ms |\n|-----------|-----------|--------|\n");
  double dashboard_median = -1, dashboard_max = -1;
  for (const std::size_t n : options.events) {
    Replay replay;
    replay.store = synthetic_trace(n);
    for (int source = 0; source < static_cast<int>(replay.store.sources().size()); ++source)
      replay.store.derive_steps(source);
    replay.files = {"synthetic " + format_count(n)};
    HeadlessImGui ui(options.width, options.height);
    ImGui::GetIO().BackendFlags |= ImGuiBackendFlags_RendererHasVtxOffset;
    Dashboard dashboard(std::move(replay));
    const auto frame = [&] {
      ui.new_frame();
      dashboard.frame();
      ui.render();
    };
    for (int i = 0; i < options.warmup; ++i) frame();
    std::vector<double> times;
    for (int i = 0; i < options.frames; ++i) {
      const auto t = Clock::now();
      frame();
      times.push_back(ms_since(t));
    }
    const double median_ms = median(times), max_ms = *std::max_element(times.begin(), times.end());
    std::printf("| %9s | %9.3f | %6.3f |\n", format_count(n).c_str(), median_ms, max_ms);
    if (n == options.events.back()) dashboard_median = median_ms, dashboard_max = max_ms;
  }

  std::printf("\nStore build (not in the frame times):");
  for (const auto& [n, ms] : builds) std::printf("  %s events %.0f ms", format_count(n).c_str(), ms);
  std::printf(".\n");
  if (goal_median >= 0) {
    std::printf("Goal: a frame in <= %.0f ms with %s events all in view: %s (median %.3f ms, max %.3f ms).\n", kGoalMs,
                format_count(options.events.back()).c_str(), goal_median <= kGoalMs ? "met" : "NOT met", goal_median,
                goal_max);
  }
  if (dashboard_median >= 0) {
    std::printf("The whole dashboard with %s events all in view: median %.3f ms, max %.3f ms a frame.\n",
                format_count(options.events.back()).c_str(), dashboard_median, dashboard_max);
  }
  std::printf("Wall time %.1f s.\n", ms_since(start) / 1e3);
}

}  // namespace fsdplab::app
