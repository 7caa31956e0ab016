#include "app/dashboard/memory_panel.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "app/dashboard/legend.hpp"
#include "app/dashboard/palette.hpp"
#include "app/dashboard/printable_text.hpp"
#include "app/dashboard/timeline_format.hpp"
#include "engine/runtime/byte_text.hpp"

namespace fsdplab::app {
namespace {

constexpr ImU32 kTrackColor = IM_COL32(45, 45, 48, 255);   // behind bars and charts
constexpr ImU32 kBorderColor = IM_COL32(90, 90, 95, 255);
constexpr ImU32 kNowColor = IM_COL32(255, 255, 255, 110);  // the "now" line in a chart
constexpr ImU32 kTextColor = IM_COL32(230, 230, 230, 255);
constexpr ImU32 kDimTextColor = IM_COL32(160, 160, 160, 255);

constexpr float kFrameWidth = 1;    // a chart's frame line, drawn over its edges
constexpr double kHeadroom = 1.05;  // the scale over the highest bytes shown: its line lies under the frame
// The charts' x axis: the ledger records an allocation when the host issues it (memory_ledger.hpp), on the
// device's clock, which is ahead of the device's work wherever the host runs ahead of it.
constexpr const char* kChartClock = "host issue time";

std::size_t index(MemTag t) { return static_cast<std::size_t>(t); }

// A step function read forward, column by column: each call starts where the last one stopped, so a column
// costs O(1) where samples are sparse and a binary search where they are dense, never a walk over the samples
// before it.
class SeriesReader {
 public:
  explicit SeriesReader(const TimeSeries& series) : series_(&series) {}
  // The moment (TimeSeries::moments) in [from, to) at which the series is highest: of its highest sample there,
  // or, where none there rises above the value it had before `from`, of the sample that set that value (0: no
  // sample yet). A walk over the samples in the range, several at one time included, so a pixel column shows
  // the peak of what happened within it, even a rise freed at the time it was made. `from` not before the last
  // `from` asked.
  std::uint64_t highest_in(SimTime from, SimTime to) {
    const std::vector<SimTime>& times = series_->times;
    if (next_ < times.size() && times[next_] < from)
      next_ = static_cast<std::size_t>(
          std::lower_bound(times.begin() + static_cast<std::ptrdiff_t>(next_), times.end(), from) - times.begin());
    std::uint64_t when = next_ == 0 ? 0 : series_->moments[next_ - 1];
    std::int64_t highest = next_ == 0 ? 0 : series_->values[next_ - 1];
    for (; next_ < times.size() && times[next_] < to; ++next_) {
      if (series_->values[next_] <= highest) continue;
      highest = series_->values[next_];
      when = series_->moments[next_];
    }
    return when;
  }
  // The value as of `moment`: of the last sample that came at or before it. `moment` not before the last asked.
  std::int64_t as_of(std::uint64_t moment) {
    const std::vector<std::uint64_t>& moments = series_->moments;
    if (next_ < moments.size() && moments[next_] <= moment)
      next_ = static_cast<std::size_t>(
          std::upper_bound(moments.begin() + static_cast<std::ptrdiff_t>(next_), moments.end(), moment) -
          moments.begin());
    return next_ == 0 ? 0 : series_->values[next_ - 1];
  }

 private:
  const TimeSeries* series_;
  std::size_t next_ = 0;  // the first sample not yet passed
};

// The tags' colours, the peak, the expected total and the device's memory, as the charts draw them.
void legend() {
  ImGui::TextUnformatted("tags:");
  ImGui::SameLine();
  const float side = ImGui::GetTextLineHeight() * 0.8f;
  for (MemTag t : kAllMemTags)
    legend_item(std::string(mem_tag_name(t)), [&](ImDrawList& dl, ImVec2 a, ImVec2 b) {
      const float pad = (b.y - a.y - side) / 2;
      dl.AddRectFilled({a.x, a.y + pad}, {a.x + side, a.y + pad + side}, mem_tag_color(t));
    });
  legend_item("peak", [](ImDrawList& dl, ImVec2 a, ImVec2 b) {
    dl.AddLine({a.x, (a.y + b.y) / 2}, {b.x, (a.y + b.y) / 2}, kPeakColor, 2);
  });
  legend_item("expected", [](ImDrawList& dl, ImVec2 a, ImVec2 b) {
    dashed_hline(dl, a.x, b.x, (a.y + b.y) / 2, kExpectedColor, 1.5f);
  });
  legend_item("device's memory", [](ImDrawList& dl, ImVec2 a, ImVec2 b) {
    dl.AddLine({a.x, (a.y + b.y) / 2}, {b.x, (a.y + b.y) / 2}, kDeviceMemoryColor, 1);
  });
  ImGui::NewLine();
}

// The tooltip of a "now" bar: each tag's live, peak and expected bytes.
void bar_tooltip(const MemoryPanel::RankRow& row, const RankMemory& memory, const TagBytes* expected,
                 const std::string& source_label, SimTime now) {
  ImGui::BeginTooltip();
  ImGui::Text("%s, rank %d at %s", source_label.c_str(), row.rank,
              time_unit_for(ns_to_ms(now)).text(ns_to_ms(now)).c_str());
  if (ImGui::BeginTable("##mem", 4, ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_RowBg)) {
    ImGui::TableSetupColumn("tag");
    ImGui::TableSetupColumn("live");
    ImGui::TableSetupColumn("peak");
    ImGui::TableSetupColumn("expected");
    ImGui::TableHeadersRow();
    const auto line = [&](const char* name, ImU32 color, std::int64_t live, std::int64_t peak,
                          std::optional<std::int64_t> exp) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(color), "%s", name);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_bytes(live).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_bytes(peak).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(exp ? format_bytes(*exp).c_str() : "-");
    };
    for (MemTag t : kAllMemTags) {
      const std::size_t i = index(t);
      line(std::string(mem_tag_name(t)).c_str(), mem_tag_color(t), row.now[i], memory.tags[i].peak(),
           expected ? std::optional<std::int64_t>((*expected)[i]) : std::nullopt);
    }
    line("total", kTextColor, tag_total(row.now), row.peak,
         expected ? std::optional<std::int64_t>(row.expected_total) : std::nullopt);
    ImGui::EndTable();
  }
  if (expected)
    ImGui::TextDisabled("expected: the analytic per-tag peaks; tags peak at different moments,\n"
                        "so their sum bounds the peak of the total from above");
  ImGui::EndTooltip();
}

void chart_tooltip(const RankMemory& memory, int rank, SimTime t) {
  ImGui::BeginTooltip();
  ImGui::Text("rank %d at %s (%s)", rank, time_unit_for(ns_to_ms(t)).text(ns_to_ms(t)).c_str(), kChartClock);
  for (MemTag tag : kAllMemTags) {
    const std::int64_t v = memory.tags[index(tag)].at(t);
    if (v == 0) continue;
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(mem_tag_color(tag)), "%-12s %s",
                       std::string(mem_tag_name(tag)).c_str(), format_bytes(v).c_str());
  }
  ImGui::Text("%-12s %s", "total", format_bytes(memory.total.at(t)).c_str());
  ImGui::EndTooltip();
}

// The stacked area of the tags over [begin, end], up to `last` (the source's latest time: a stopped run is
// not drawn on past where it stopped), one stack per pixel column: the tags at the moment in the column's
// time range when their total is highest, so a peak shorter than a pixel still shows where it happened (and
// a peak that lasted no time at all: the tags are read at the total's sample, not at a time). Runs
// of columns where a tag's band covers the same pixels become one rectangle, so a flat stretch costs one
// rectangle per tag.
void stacked_area(ImDrawList* dl, const RankMemory& memory, ImVec2 min, ImVec2 max, SimTime begin, SimTime end,
                  SimTime last, double scale) {
  const int columns = std::max(1, static_cast<int>(std::floor(max.x - min.x)));
  const double span = static_cast<double>(end - begin);
  const float height = max.y - min.y;
  const auto y_of = [&](std::int64_t v) {
    return std::round(std::max(min.y, max.y - static_cast<float>(static_cast<double>(v) / scale) * height));
  };
  std::vector<SeriesReader> readers;
  readers.reserve(kMemTagCount);
  for (const TimeSeries& s : memory.tags) readers.emplace_back(s);
  struct Run {
    float x0 = 0, top = 0, bottom = 0;
    bool open = false;
  };
  std::array<Run, kMemTagCount> runs{};
  const auto flush = [&](std::size_t k, float x1) {
    if (runs[k].open && runs[k].top < runs[k].bottom)
      dl->AddRectFilled({runs[k].x0, runs[k].top}, {x1, runs[k].bottom}, mem_tag_color(kAllMemTags[k]));
    runs[k].open = false;
  };
  SeriesReader total(memory.total);
  int c = 0;
  for (; c < columns; ++c) {
    const double start = span * c / columns;  // after `begin`; `from` rounds it down to the clock's tick
    if (static_cast<double>(begin) + start > static_cast<double>(last)) break;
    const auto from = begin + static_cast<SimTime>(start);
    const auto to = std::max(from + 1, begin + static_cast<SimTime>(span * (c + 1) / columns));
    const std::uint64_t highest = total.highest_in(from, std::min(to, last + 1));
    const float x = min.x + static_cast<float>(c);
    std::int64_t below = 0;
    for (std::size_t k = 0; k < kMemTagCount; ++k) {
      const float bottom = y_of(below);
      below += readers[k].as_of(highest);
      const float top = y_of(below);
      if (runs[k].open && runs[k].top == top && runs[k].bottom == bottom) continue;
      flush(k, x);
      runs[k] = Run{.x0 = x, .top = top, .bottom = bottom, .open = true};
    }
  }
  for (std::size_t k = 0; k < kMemTagCount; ++k) flush(k, min.x + static_cast<float>(c));
}

// "does not fit rtx-4090's 24.0 GB: rank 0 peaks at 54.3 GB, rank 1 at 54.3 GB; ...", naming a few of the ranks
// past the device's memory; empty where none is, or the device's memory is unknown.
std::string ranks_past_device(const TraceSource& src) {
  constexpr int kNamed = 3;
  std::string named;
  int past = 0;
  for (std::size_t r = 0; r < src.memory.size(); ++r) {
    const std::int64_t peak = src.memory[r].total.peak();
    if (src.device_memory <= 0 || peak <= src.device_memory) continue;
    if (++past <= kNamed)
      named += (named.empty() ? "rank " + std::to_string(r) + " peaks at " : ", rank " + std::to_string(r) + " at ") +
               format_bytes(peak);
  }
  if (past == 0) return "";
  if (past > kNamed) named += " and " + std::to_string(past - kNamed) + " more ranks";
  return "does not fit " + (src.device_name.empty() ? std::string("the device") : src.device_name) + "'s " +
         format_bytes(src.device_memory) + ": " + named + "; a run would stop out of memory";
}

// "peaks unlike the reference's: param_full 242.7 MB (the reference's 214.4 MB), ...": the tags of `src` whose peak,
// the most of any rank, is more than 1 % from `reference`'s; "" where none is, or either has no samples yet.
std::string peaks_unlike(const TraceSource& src, const TraceSource& reference) {
  if (src.memory.empty() || reference.memory.empty()) return "";
  const auto tag_peak = [](const TraceSource& s, std::size_t tag) {
    std::int64_t most = 0;
    for (const RankMemory& m : s.memory) most = std::max(most, m.tags[tag].peak());
    return most;
  };
  std::string unlike;
  for (std::size_t t = 0; t < kMemTagCount; ++t) {
    const std::int64_t mine = tag_peak(src, t), theirs = tag_peak(reference, t);
    if (std::abs(static_cast<double>(mine - theirs)) <= 0.01 * static_cast<double>(std::max(mine, theirs))) continue;
    unlike += (unlike.empty() ? "peaks unlike the reference's: " : ", ") +
              std::string(mem_tag_name(static_cast<MemTag>(t))) + " " + format_bytes(mine) + " (the reference's " +
              format_bytes(theirs) + ")";
  }
  return unlike;
}

}  // namespace

void MemoryPanel::draw(const TraceStore& store, std::span<const std::optional<TagBytes>> expected, SimTime view_begin,
                       SimTime view_end, SimTime now, std::optional<int> reference) {
  rows_.clear();
  past_device_.clear();
  unlike_reference_.clear();
  if (view_end <= view_begin) view_end = view_begin + 1;
  const auto expected_of = [&](std::size_t source) -> const TagBytes* {
    return source < expected.size() && expected[source] ? &*expected[source] : nullptr;
  };

  // What each row shows, and one byte scale for every bar and chart.
  std::int64_t top = 1;
  for (std::size_t s = 0; s < store.sources().size(); ++s) {
    const TraceSource& src = store.sources()[s];
    const TagBytes* exp = expected_of(s);
    for (std::size_t r = 0; r < src.memory.size(); ++r) {
      const RankMemory& m = src.memory[r];
      RankRow row;
      row.source = static_cast<int>(s);
      row.rank = static_cast<int>(r);
      for (std::size_t k = 0; k < kMemTagCount; ++k) row.now[k] = m.tags[k].at(now);
      row.peak = m.total.peak();
      row.expected_total = exp ? tag_total(*exp) : 0;
      row.device = src.device_memory;
      top = std::max({top, row.peak, row.expected_total, tag_total(row.now)});
      rows_.push_back(row);
    }
  }

  // One scale for every bar and chart, a little over the highest bytes shown; the header says it, and so does each
  // chart's top.
  const auto scale = static_cast<std::int64_t>(std::ceil(static_cast<double>(top) * kHeadroom));
  scale_ = scale;
  legend();
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  const TimeUnit unit = time_unit_for(ns_to_ms(std::max(now, view_end)));
  const std::string span = unit.number(ns_to_ms(view_begin)) + " - " + unit.text(ns_to_ms(view_end));
  text_wrapped_at_spaces("now: " + unbroken(unit.text(ns_to_ms(now))) + "   scale: " + unbroken(format_bytes(scale)) +
                         "\nover time, at " + std::string(kChartClock) + ": " + unbroken(span));
  ImGui::PopStyleColor();

  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImGuiStyle& style = ImGui::GetStyle();
  const float width = std::max(ImGui::GetContentRegionAvail().x, kGutter + 64);
  // The bar leaves room for its numbers where the panel is wide enough; they are cut short where not.
  const float bar_width =
      std::floor(std::clamp(width - kGutter - 300, (width - kGutter) * 0.4f, (width - kGutter) * 0.6f));
  const float line_height = std::max(ImGui::GetTextLineHeight(), kBarHeight + 2 + kExpectedBarHeight) + 4;
  const auto chart_scale = static_cast<double>(scale);
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  const auto inside = [&](ImVec2 a, ImVec2 b) {
    return mouse.x >= a.x && mouse.x < b.x && mouse.y >= a.y && mouse.y < b.y;
  };

  // The charts' height: what fits every row in the panel's height, between kMinChartHeight and kChartHeight. The
  // sources' headers are as tall as the last frame drew them (a header wraps by the panel's width, not by this).
  const float row_lines = line_height + style.ItemSpacing.y;
  const float fits =
      rows_.empty()
          ? kChartHeight
          : (ImGui::GetContentRegionAvail().y - headers_height_ - static_cast<float>(rows_.size()) * row_lines) /
                static_cast<float>(rows_.size());
  const float chart_height = std::floor(std::clamp(fits, kMinChartHeight, kChartHeight));
  headers_height_ = 0;
  std::size_t next_row = 0;
  for (std::size_t s = 0; s < store.sources().size(); ++s) {
    const TraceSource& src = store.sources()[s];
    const TagBytes* exp = expected_of(s);
    const float header_top = ImGui::GetCursorPosY();
    ImGui::Separator();
    // The source's name (a remote run's is long: elided), then what it is measured against, beside it where
    // that fits, else under it.
    std::string note = src.memory.empty() ? "no memory samples yet"
                       : !exp             ? "(no analytic expectation)"
                                          : "expected per rank: " + format_bytes(tag_total(*exp));
    // The formula is SYNC's schedule: an ASYNC run's peak is above it by what its prefetch holds, the reference's too.
    if (exp && !src.memory.empty() && !src.sync) note += " (SYNC's formula; ASYNC holds its prefetches too)";
    text_elided(src.label, ImGui::GetContentRegionAvail().x);
    ImGui::SameLine();
    if (ImGui::GetContentRegionAvail().x < ImGui::CalcTextSize(note.c_str()).x) ImGui::NewLine();
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    text_wrapped_at_spaces(note);
    ImGui::PopStyleColor();
    if (const std::string past = ranks_past_device(src); !past.empty()) {
      ImGui::PushStyleColor(ImGuiCol_Text, ImGui::ColorConvertU32ToFloat4(kFailedColor));
      text_wrapped_at_spaces(past);
      ImGui::PopStyleColor();
      past_device_.push_back(past);
    }
    if (reference && static_cast<int>(s) != *reference && *reference >= 0 &&
        *reference < static_cast<int>(store.sources().size())) {
      if (const std::string unlike = peaks_unlike(src, store.sources()[static_cast<std::size_t>(*reference)]);
          !unlike.empty()) {
        ImGui::PushStyleColor(ImGuiCol_Text, ImGui::ColorConvertU32ToFloat4(kFailedColor));
        text_wrapped_at_spaces(unlike);
        ImGui::PopStyleColor();
        unlike_reference_.push_back(unlike);
      }
    }
    headers_height_ += ImGui::GetCursorPosY() - header_top;
    // The device's memory is marked where the scale reaches it (at 4 GB of peaks, an 80 GB line would be off the end).
    const bool device_in_scale = src.device_memory > 0 && src.device_memory <= scale;

    for (std::size_t r = 0; r < src.memory.size(); ++r) {
      RankRow& row = rows_[next_row++];
      const RankMemory& m = src.memory[r];
      const ImVec2 origin = ImGui::GetCursorScreenPos();
      row.min = origin;
      row.max = ImVec2(origin.x + width, origin.y + line_height + chart_height);
      row.bar_min = ImVec2(origin.x + kGutter, origin.y + 2);
      row.bar_max = ImVec2(row.bar_min.x + bar_width, row.bar_min.y + kBarHeight + 2 + kExpectedBarHeight);
      row.chart_min = ImVec2(origin.x + kGutter, origin.y + line_height);
      row.chart_max = ImVec2(origin.x + width, row.max.y);
      ImGui::Dummy(ImVec2(width, row.max.y - row.min.y));
      const bool hovered = ImGui::IsItemHovered();

      // The rank's label, in the gutter.
      char name[32];
      std::snprintf(name, sizeof name, "rank %d", row.rank);
      dl->AddText({origin.x, origin.y + (line_height - ImGui::GetTextLineHeight()) / 2}, kTextColor, name);

      // "now": the live stack, the expected stack under it, the peak and the expected total marked.
      if (ImGui::IsRectVisible(row.bar_min, row.bar_max)) {
        const auto x_of = [&](std::int64_t v) {
          return row.bar_min.x + static_cast<float>(static_cast<double>(v) / chart_scale) * bar_width;
        };
        const float live_bottom = row.bar_min.y + kBarHeight;
        const float exp_top = live_bottom + 2, exp_bottom = exp_top + kExpectedBarHeight;
        dl->AddRectFilled(row.bar_min, {row.bar_max.x, live_bottom}, kTrackColor);
        std::int64_t left = 0;
        for (std::size_t k = 0; k < kMemTagCount; ++k) {
          if (row.now[k] <= 0) continue;
          dl->AddRectFilled({x_of(left), row.bar_min.y}, {x_of(left + row.now[k]), live_bottom},
                            mem_tag_color(kAllMemTags[k]));
          left += row.now[k];
        }
        if (exp) {
          std::int64_t e = 0;
          for (std::size_t k = 0; k < kMemTagCount; ++k) {
            if ((*exp)[k] <= 0) continue;
            dl->AddRectFilled({x_of(e), exp_top}, {x_of(e + (*exp)[k]), exp_bottom}, mem_tag_color(kAllMemTags[k]));
            e += (*exp)[k];
          }
          const float xe = x_of(row.expected_total);
          dl->AddLine({xe, row.bar_min.y - 2}, {xe, exp_bottom + 1}, kExpectedColor, 2);
        }
        if (device_in_scale) {
          const float xd = x_of(src.device_memory);
          dl->AddLine({xd, row.bar_min.y - 2}, {xd, exp_bottom + 1}, kDeviceMemoryColor, 1);
        }
        const float xp = x_of(row.peak);
        dl->AddLine({xp, row.bar_min.y - 2}, {xp, live_bottom + 1}, kPeakColor, 2);

        // Its numbers, right of the bar.
        float x = row.bar_max.x + style.ItemSpacing.x;
        const float y = origin.y + (line_height - ImGui::GetTextLineHeight()) / 2;
        const auto say = [&](ImU32 color, const std::string& text) {
          if (x + ImGui::CalcTextSize(text.c_str()).x > row.max.x) return;
          dl->AddText({x, y}, color, text.c_str());
          x += ImGui::CalcTextSize(text.c_str()).x + style.ItemSpacing.x * 2;
        };
        say(kTextColor, "now " + format_bytes(tag_total(row.now)));
        say(kPeakColor, "peak " + format_bytes(row.peak));
        if (exp) say(kExpectedColor, "expected " + format_bytes(row.expected_total));
      }

      // "over time": the stacked area, the peak line, the expected line, now.
      if (ImGui::IsRectVisible(row.chart_min, row.chart_max)) {
        const ImVec2 a = row.chart_min, b = ImVec2(row.chart_max.x, row.chart_max.y - 2);
        dl->AddRectFilled(a, b, kTrackColor);
        // Time runs between the frame's sides, not under them: a peak in the first or last pixel column shows.
        const float x0 = a.x + kFrameWidth, x1 = b.x - kFrameWidth;
        const auto x_of_time = [&](SimTime t) {
          return x0 +
                 static_cast<float>(static_cast<double>(t - view_begin) / static_cast<double>(view_end - view_begin)) *
                     (x1 - x0);
        };
        stacked_area(dl, m, {x0, a.y}, {x1, b.y}, view_begin, view_end, src.last_time, chart_scale);
        const auto y_of = [&](std::int64_t v) {
          return b.y - static_cast<float>(static_cast<double>(v) / chart_scale) * (b.y - a.y);
        };
        // The lines are not labelled in the chart, where a label would hide the stack under it: the rank's line
        // above says "peak" and "expected" in their colours, the source's header the expected bytes.
        if (row.peak > 0) {
          const float yp = y_of(row.peak);
          dl->AddLine({a.x, yp}, {b.x, yp}, kPeakColor, 1.5f);
          const SimTime pt = m.total.peak_time();
          if (pt >= view_begin && pt <= view_end) {
            const float xt = x_of_time(pt);
            dl->AddTriangleFilled({xt - 4, yp - 6}, {xt + 4, yp - 6}, {xt, yp}, kPeakColor);
          }
        }
        if (exp && row.expected_total > 0) {
          const float ye = y_of(row.expected_total);
          dashed_hline(*dl, a.x, b.x, ye, kExpectedColor, 1.5f);
        }
        if (device_in_scale) {  // the legend says what it is
          const float yd = y_of(src.device_memory);
          dl->AddLine({a.x, yd}, {b.x, yd}, kDeviceMemoryColor, 1);
        }
        if (now >= view_begin && now <= view_end) {
          const float xn = x_of_time(now);
          dl->AddLine({xn, a.y}, {xn, b.y}, kNowColor);
        }
        dl->AddRect(a, b, kBorderColor);
        dl->AddText({origin.x, a.y}, kDimTextColor, format_bytes(scale).c_str());
        dl->AddText({origin.x, b.y - ImGui::GetTextLineHeight()}, kDimTextColor, "0");
      }

      if (hovered && inside(row.bar_min, {row.bar_max.x, row.bar_max.y + 2})) {
        bar_tooltip(row, m, exp, src.label, now);
      } else if (hovered && inside(row.chart_min, row.chart_max)) {
        const double f = (mouse.x - row.chart_min.x) / std::max(1.0f, row.chart_max.x - row.chart_min.x);
        chart_tooltip(m, row.rank, view_begin + static_cast<SimTime>(f * static_cast<double>(view_end - view_begin)));
      }
    }
  }
}

}  // namespace fsdplab::app
