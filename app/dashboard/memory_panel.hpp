// memory_panel.hpp — the dashboard's MEMORY panel: each rank's memory by tag, now and over time, against
// the analytic expectation (engine/fsdp/memory_model.hpp).
//
// Per rank of each source, two lines:
//   now        a horizontal stacked bar of the live bytes of each tag at `now`, the peak of the total
//              marked by a kPeakColor tick (and "peak" label), the expected per-tag peaks as a thin
//              second stacked bar under it with a kExpectedColor tick at their sum; its tooltip lists
//              tag, live, peak and expected
//   over time  a stacked area chart of the tags over [view_begin, view_end], up to the source's latest
//              time (a stopped run ends where it stopped), one stack per pixel column: the tags when the
//              total is highest within the column's time (one walk over the total's samples in view, a
//              binary search per tag and column), so a peak shorter than a pixel shows where it happened;
//              the peak of the total as a kPeakColor line (its value in the row's text), the expected total as a dashed
//              kExpectedColor line, `now` as a thin vertical line; its tooltip reads the tags at the mouse.
//              Its x axis is the ledger's: when the host issued each allocation, on the device clock
//              (engine/runtime/memory_ledger.hpp), which the header says
// Where the source knows its device's memory (TraceSource::device_memory) and the scale reaches it, a
// kDeviceMemoryColor line marks it on the bar and the chart; the ranks whose peak is past it are named under the
// source's name in kFailedColor (a dry run goes on past the device's memory to say by how much; a run stops).
// Beside a reference (--compare impl), the tags whose peak is not the reference's are named under the other source's
// name in kFailedColor too: a tag a few percent above the reference's is no pixel of a stack gigabytes high.
// A legend of the tag colours above. Every bar and chart shares one byte scale, the header's, so ranks and
// sources compare at a glance. Bytes print in decimal units (1 kB = 1000 B; engine/runtime/byte_text.hpp), as the
// benches and dry runs do. draw() submits into the current ImGui window (the dashboard's "Memory" window) with its draw
// list: a handful of rectangles per pixel column at most, no widget per sample.
#pragma once
#include <imgui.h>

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "app/dashboard/trace_store.hpp"
#include "engine/runtime/memory_ledger.hpp"

namespace fsdplab::app {

class MemoryPanel {
 public:
  // expected: per source id, the analytic per-rank peak of each tag (memory_model.hpp), or nullopt where
  // there is none (a replayed file); sources past the span's end have none.
  // [view_begin, view_end]: the time range of the "over time" chart (the dashboard passes the timeline's
  // view so both line up); `now` is the time the "now" bars show (latest time for live runs).
  // reference: the source the others are compared with (--compare impl's reference), or none: under each other
  // source's name, the tags whose peak (the most of any rank) differs from the reference's by more than 1 %.
  void draw(const TraceStore& store, std::span<const std::optional<TagBytes>> expected, SimTime view_begin,
            SimTime view_end, SimTime now, std::optional<int> reference = std::nullopt);

  // For tests: what the last frame showed, one row per rank of each source, in source then rank order.
  struct RankRow {
    int source = 0;
    int rank = 0;
    std::array<std::int64_t, kMemTagCount> now{};  // live bytes of each tag at `now`
    std::int64_t peak = 0;                          // peak of the total over the whole run
    std::int64_t expected_total = 0;                // sum of the expected tag peaks; 0 where there is none
    std::int64_t device = 0;                        // the device's memory (TraceSource::device_memory); 0: unknown
    ImVec2 min, max;                                // the row: its "now" line and its chart, screen space
    ImVec2 bar_min, bar_max;                        // the "now" bar (the expected bar under it included)
    ImVec2 chart_min, chart_max;                    // the "over time" chart
  };
  const std::vector<RankRow>& rows() const { return rows_; }
  // For tests: the bytes of a bar's full width and a chart's full height in the last frame (the header's scale).
  std::int64_t scale() const { return scale_; }
  // For tests: the lines the last frame said of ranks past their device's memory, one per source that has some.
  const std::vector<std::string>& past_device() const { return past_device_; }
  // For tests: the lines the last frame said of tag peaks unlike the reference's, one per source that has some.
  const std::vector<std::string>& unlike_reference() const { return unlike_reference_; }

  // Layout, in pixels.
  static constexpr float kGutter = 72;     // rank labels left of the bars and charts
  static constexpr float kBarHeight = 10;  // the live stack
  static constexpr float kExpectedBarHeight = 4;
  // A chart's height: the most, and the least it shrinks to where every rank of every run would not fit the
  // panel's height otherwise (a --compare of two runs of two ranks); below the least, the panel scrolls.
  static constexpr float kChartHeight = 56;
  static constexpr float kMinChartHeight = 30;

 private:
  std::vector<RankRow> rows_;
  std::vector<std::string> past_device_;
  std::vector<std::string> unlike_reference_;
  std::int64_t scale_ = 1;
  float headers_height_ = 0;  // of every source's header, as the last frame drew them
};

}  // namespace fsdplab::app
