#include "app/dashboard/step_time_panel.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <map>
#include <utility>

#include "app/axis_step.hpp"
#include "app/dashboard/legend.hpp"
#include "app/dashboard/palette.hpp"
#include "app/dashboard/printable_text.hpp"
#include "engine/train/loss_agreement.hpp"

namespace fsdplab::app {
namespace {

// SYNC warm, ASYNC cool; a second or third source of a kind gets the next shade.
constexpr std::array<ImU32, 3> kSyncColors = {rgb(239, 83, 80), rgb(240, 98, 146), rgb(188, 140, 120)};
constexpr std::array<ImU32, 3> kAsyncColors = {rgb(102, 187, 106), rgb(38, 198, 218), rgb(212, 225, 87)};
constexpr ImU32 kComputeColor = category_color(OpCategory::compute);
constexpr ImU32 kCommColor = category_color(OpCategory::all_gather);
constexpr ImU32 kIdealColor = rgb(240, 240, 240);
constexpr double kReachNoted = 0.8;  // η's reach under which the panel says why η cannot come near 1
constexpr ImU32 kGridColor = IM_COL32(255, 255, 255, 28);
constexpr ImU32 kFrameColor = IM_COL32(90, 90, 95, 255);
constexpr ImU32 kBackColor = IM_COL32(30, 30, 33, 255);
constexpr ImU32 kTextColor = IM_COL32(230, 230, 230, 255);
constexpr ImU32 kDimTextColor = IM_COL32(160, 160, 160, 255);
constexpr ImU32 kLabelBackColor = IM_COL32(20, 20, 22, 210);  // a reference label stays readable on its line
constexpr float kAxisWidth = 64;                              // left of the plot: the milliseconds' labels
constexpr float kPlotRightPad = 8;                            // right of it
constexpr float kLabelInset = 4;                              // a reference label from the plot's side
constexpr float kLabelPad = 2;                                // its backing box around the text
constexpr float kMarkerHalfSize = 3;                          // a step's marker: a square (SYNC) or a dot (ASYNC)
constexpr float kMarkerClearance = kMarkerHalfSize + 1;       // and a pixel: no label covers it
// The table's number columns, and the order they give way in a narrow panel (mean and overlap stay).
// (The second is the last step's time, headed by the panel's unit: "ms", or "s" (step_time_unit).)
constexpr std::array<const char*, 6> kTableNumbers = {"step", "ms", "mean", "compute", "comm", "overlap"};
constexpr std::array<std::size_t, 4> kTableDropOrder = {1, 0, 3, 4};
constexpr const char* kShortestSeriesName = "ASYNC...";  // a series' name is elided no shorter
constexpr const char* kFailedMark = "failed";            // before a failed run's name in the table
constexpr float kTooltipWrapEms = 40;                    // a failed run's error wraps in its row's tooltip

// ---- the series: a run's steps, and their summary ---------------------------------------------------------

// One series: the SYNC or the ASYNC steps of a source.
struct Series {
  int source = 0;
  bool sync = false;
  std::vector<int> steps;     // indices into the source's steps, in step order
  std::vector<int> compared;  // the same without the source's first (warm-up) and last steps
  ImU32 color = 0;
};

std::vector<Series> series_of(const TraceStore& store) {
  std::vector<Series> out;
  int shades[2] = {0, 0};  // series of each kind so far: async, sync
  for (std::size_t s = 0; s < store.sources().size(); ++s) {
    const TraceSource& src = store.sources()[s];
    int first = INT_MAX;
    for (const StepTime& t : src.steps) first = std::min(first, t.step);
    Series kinds[2];
    for (int k = 0; k < 2; ++k) {
      kinds[k].source = static_cast<int>(s);
      kinds[k].sync = k == 1;
    }
    for (std::size_t i = 0; i < src.steps.size(); ++i)
      kinds[src.sync || src.steps[i].sync ? 1 : 0].steps.push_back(static_cast<int>(i));
    for (Series& k : kinds) {
      std::stable_sort(k.steps.begin(), k.steps.end(),
                       [&](int a, int b) { return src.steps[static_cast<std::size_t>(a)].step <
                                                  src.steps[static_cast<std::size_t>(b)].step; });
      for (int i : k.steps) {
        const int step = src.steps[static_cast<std::size_t>(i)].step;
        if (step != first && step != src.last_step) k.compared.push_back(i);
      }
    }
    // A source with no steps yet is the kind it declares; an A/B source is ASYNC until its first SYNC step.
    const bool has_sync = src.sync || !kinds[1].steps.empty();
    const bool has_async = !kinds[0].steps.empty() || (!src.sync && src.steps.empty());
    for (int k : {1, 0}) {
      if (!(k == 1 ? has_sync : has_async)) continue;
      const auto& colors = k == 1 ? kSyncColors : kAsyncColors;
      kinds[k].color = colors[static_cast<std::size_t>(shades[k]++) % colors.size()];
      out.push_back(std::move(kinds[k]));
    }
  }
  return out;
}

const StepTime& step_of(const TraceStore& store, int source, int index) {
  return store.source(source).steps[static_cast<std::size_t>(index)];
}

// The series' run is over: its known last step is stored (a remote run's end is not known).
bool ended(const TraceStore& store, const Series& s) {
  const TraceSource& src = store.source(s.source);
  return src.last_step >= 0 &&
         std::any_of(src.steps.begin(), src.steps.end(), [&](const StepTime& t) { return t.step == src.last_step; });
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// A share in whole percent, where that does not say all or none of something short of all or more than none:
// 99.8 % is "99.8 %", not "100 %"; 0.3 % is "0.3 %", not "0 %".
std::string percent_text(double percent) {
  if (percent < 100 && std::round(percent) >= 100) return fmt("%.1f %%", std::floor(percent * 10) / 10);
  if (percent > 0 && std::round(percent) <= 0) return fmt("%.1f %%", std::max(0.1, std::round(percent * 10) / 10));
  return fmt("%.0f %%", percent);
}

StepTimePanel::Summary summarize(const TraceStore& store, const std::vector<Series>& series, int recent) {
  StepTimePanel::Summary sum;
  const TimeUnit unit = step_time_unit(store);
  const Series* sync = nullptr;
  const Series* async = nullptr;
  for (const Series& s : series) {
    if (s.sync && !sync) sync = &s;
    if (!s.sync && !async) async = &s;
  }
  if (sync) sum.sync_source = sync->source;
  if (async) sum.async_source = async->source;
  if (!sync || !async) {
    sum.why = !sync && !async ? "no runs yet" : !sync ? "no SYNC run to compare with" : "no ASYNC run to compare with";
    return sum;
  }
  const std::size_t pairs = std::min(sync->compared.size(), async->compared.size());
  const std::size_t n = std::min(pairs, static_cast<std::size_t>(std::max(recent, 1)));
  sum.steps_compared = static_cast<int>(n);
  if (n == 0) {
    const auto failed = [&](const Series& s) { return !store.source(s.source).failure.empty(); };
    if (failed(*sync) || failed(*async)) {
      sum.why = "nothing to compare: " + store.source(failed(*sync) ? sync->source : async->source).label +
                " failed (its row in the table below says why)";
      return sum;
    }
    sum.why = ended(store, *sync) && ended(store, *async)
                  ? "nothing to compare: the runs ended with no SYNC and ASYNC step between each run's first "
                    "(warm-up) and last step, which are left out; run 3 steps or more"
                  : "waiting for a SYNC and an ASYNC step after the first (warm-up) step";
    return sum;
  }
  SimTime t_sync = 0, t_async = 0, compute = 0, comm = 0;  // sums over the n pairs
  for (std::size_t k = pairs - n; k < pairs; ++k) {
    const StepTime& s = step_of(store, sync->source, sync->compared[k]);
    const StepTime& a = step_of(store, async->source, async->compared[k]);
    t_sync += s.duration();
    t_async += a.duration();
    compute += a.compute;
    comm += a.comm;
  }
  const SimTime ideal = std::max(compute, comm);
  const double count = static_cast<double>(n);
  sum.t_sync_ms = ns_to_ms(t_sync) / count;
  sum.t_async_ms = ns_to_ms(t_async) / count;
  sum.compute_ms = ns_to_ms(compute) / count;
  sum.comm_ms = ns_to_ms(comm) / count;
  sum.ideal_ms = ns_to_ms(ideal) / count;
  sum.overlappable_ms = ns_to_ms(std::min(compute, comm)) / count;
  if (t_sync <= ideal) {  // the sums compare exactly, and their ratio is the means'
    sum.why = "T_sync \u2264 ideal: nothing to hide";
    return sum;
  }
  sum.eta = static_cast<double>(t_sync - t_async) / static_cast<double>(t_sync - ideal);
  // Where most of the gap is not communication, a low η is not the schedule's doing (Summary::overlappable_ms).
  if (const double reach = static_cast<double>(std::min(compute, comm)) / static_cast<double>(t_sync - ideal);
      reach < kReachNoted)
    sum.eta_reach_note =
        std::string(store.source(sync->source).world == 1
                        ? "One rank: its collectives are copies within the rank, little to overlap. "
                        : "") +
        "Only min(compute, comm) = " + unit.text(sum.overlappable_ms) +
        " of T_sync \u2212 ideal can overlap; the rest of the SYNC step is the compute stream waiting (launches, "
        "host work), which no schedule hides, so \u03B7 stays under about " +
        fmt("%.2f", reach) + " here.";
  return sum;
}

void text(const std::string& s) { text_wrapped_at_spaces(printable(s)); }

// ---- drawing helpers, the table's means, the loss comparison ----------------------------------------------

std::string series_name(const TraceStore& store, const Series& s) {
  const std::string kind = s.sync ? "SYNC" : "ASYNC";
  const std::string& label = store.source(s.source).label;
  return label == kind ? kind : kind + " (" + label + ")";
}

void marker(ImDrawList* dl, ImVec2 p, bool sync, ImU32 color) {
  constexpr float r = kMarkerHalfSize;
  if (sync)
    dl->AddRectFilled({p.x - r, p.y - r}, {p.x + r, p.y + r}, color);
  else
    dl->AddCircleFilled(p, r + 0.5f, color, 8);
}

// Mean duration, compute and comm (ms) of the last `recent` of `indices`, and their overlap %: the share of their
// communication that compute covered, over the steps together (none where they communicated nothing).
struct Means {
  double duration = 0, compute = 0, comm = 0;
  std::optional<double> overlap_percent;
  int count = 0;
};
Means means_of(const TraceSource& src, const std::vector<int>& indices, int recent) {
  Means m;
  const std::size_t n = std::min(indices.size(), static_cast<std::size_t>(recent));
  if (n == 0) return m;
  SimTime d = 0, c = 0, k = 0, hidden = 0, span = 0;
  for (std::size_t i = indices.size() - n; i < indices.size(); ++i) {
    const StepTime& t = src.steps[static_cast<std::size_t>(indices[i])];
    d += t.duration();
    c += t.compute;
    k += t.comm;
    hidden += t.comm_hidden;
    span += t.comm_span;
  }
  if (span > 0) m.overlap_percent = 100.0 * static_cast<double>(hidden) / static_cast<double>(span);
  const double count = static_cast<double>(n);
  m.duration = ns_to_ms(d) / count;
  m.compute = ns_to_ms(c) / count;
  m.comm = ns_to_ms(k) / count;
  m.count = static_cast<int>(n);
  return m;
}

// Whether the losses of `other` are `reference`'s step by step (StepTimePanel::losses); none before both have a step.
std::optional<StepTimePanel::LossComparison> losses_beside(const TraceStore& store, int reference, int other) {
  std::map<int, double> reference_loss;
  for (const StepTime& s : store.source(reference).steps) reference_loss[s.step] = s.loss;
  int through = -1;
  for (const StepTime& s : store.source(other).steps) {
    const auto it = reference_loss.find(s.step);
    if (it == reference_loss.end()) continue;
    const double want = it->second;
    if (!agrees(s.loss, want)) {  // as the grader's trainings compare (loss_agreement.hpp)
      // Printed to the digits that tell them apart: a difference under 5e-5 looks equal at four.
      const int digits = std::abs(s.loss - want) < 5e-5 ? 6 : 4;
      char text[128];
      std::snprintf(text, sizeof text, "losses differ from step %d: %.*f, the reference's %.*f", s.step + 1, digits,
                    s.loss, digits, want);
      return StepTimePanel::LossComparison{text, true};
    }
    through = std::max(through, s.step);
  }
  if (through < 0) return std::nullopt;
  return StepTimePanel::LossComparison{"losses as the reference's to step " + std::to_string(through + 1), false};
}

}  // namespace

// ---- the panel --------------------------------------------------------------------------------------------

TimeUnit step_time_unit(const TraceStore& store) {
  SimTime longest = 0;
  for (const TraceSource& src : store.sources())
    for (const StepTime& t : src.steps) longest = std::max(longest, t.duration());
  return time_unit_for(ns_to_ms(longest));
}

StepTimePanel::Summary summarize_steps(const TraceStore& store, int recent) {
  return summarize(store, series_of(store), recent);
}

std::optional<StepTimePanel::Point> StepTimePanel::hovered() const {
  if (hovered_ < 0) return std::nullopt;
  return points_[static_cast<std::size_t>(hovered_)];
}

void StepTimePanel::draw(const TraceStore& store, std::optional<int> reference) {
  const TimeUnit unit = step_time_unit(store);
  std::vector<Series> series = series_of(store);
  summary_ = summarize(store, series, kRecentSteps);
  points_.clear();
  hovered_ = -1;
  const Summary& sum = summary_;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImGuiStyle& style = ImGui::GetStyle();
  const float text_h = ImGui::GetTextLineHeight();

  // Legend: each series' marker and name, then the reference lines.
  legend_.clear();
  // A line across the swatch's box, through its middle; a series' marker at its centre.
  const auto item = [&](const std::string& name, ImU32 color, float thickness,
                        const std::function<void(ImVec2)>& mark) {
    legend_.push_back(name);
    legend_item(name, [&](ImDrawList& list, ImVec2 a, ImVec2 b) {
      const ImVec2 c((a.x + b.x) / 2, (a.y + b.y) / 2);
      if (color != 0) list.AddLine({a.x, c.y}, {b.x, c.y}, color, thickness);
      if (mark) mark(c);
    });
  };
  for (const Series& s : series)
    item(series_name(store, s), s.color, 1.5f, [&](ImVec2 c) { marker(dl, c, s.sync, s.color); });
  // The reference lines are drawn only where a SYNC and an ASYNC step are compared: so is their legend.
  if (sum.steps_compared > 0) {
    item("compute", kComputeColor, 2, nullptr);
    item("comm", kCommColor, 2, nullptr);
    item("ideal = max(compute, comm)", 0, 0,
         [&](ImVec2 c) { dashed_hline(*dl, c.x - kSwatchWidth / 2, c.x + kSwatchWidth / 2, c.y, kIdealColor, 2); });
  }
  ImGui::NewLine();

  // The plot's frame and scales: steps across, times up (ms, or s: step_time_unit). As wide as the panel, however
  // narrow: wider, its right side would be cut off by the panel's edge.
  const float width = std::max(ImGui::GetContentRegionAvail().x, kAxisWidth + kPlotRightPad + 1);
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  plot_min_ = ImVec2(origin.x + kAxisWidth, origin.y + 4);
  plot_max_ = ImVec2(origin.x + width - kPlotRightPad, origin.y + kPlotHeight - text_h - 6);
  ImGui::Dummy(ImVec2(width, kPlotHeight));
  const bool plot_hovered = ImGui::IsItemHovered();
  const ImVec2 a = plot_min_, b = plot_max_;
  dl->AddRectFilled(a, b, kBackColor);

  int first_step = INT_MAX, last_step = INT_MIN;
  SimTime longest = 0;
  for (const Series& s : series)
    for (int i : s.steps) {
      const StepTime& t = step_of(store, s.source, i);
      first_step = std::min(first_step, t.step);
      last_step = std::max(last_step, t.step);
      longest = std::max(longest, t.duration());
    }
  if (first_step > last_step) {
    first_step = 0;
    last_step = 0;
  }
  const double top_ms = std::max({ns_to_ms(longest), sum.compute_ms, sum.comm_ms}) * 1.08;
  const double tick_ms = nice_ceil(top_ms / 4);
  const double y_top = std::max(tick_ms, std::ceil(top_ms / tick_ms) * tick_ms);
  // Step numbers are whatever a run or a peer sent (up to INT_MAX): spans and tick positions are
  // computed in 64 bits and doubles, never in int, so nothing here can overflow.
  const double columns = static_cast<double>(std::int64_t{last_step} - first_step + 1);
  const auto x_of = [&](std::int64_t step) {
    return a.x + static_cast<float>((static_cast<double>(step - first_step) + 0.5) / columns) * (b.x - a.x);
  };
  const auto y_of = [&](double ms) { return b.y - static_cast<float>(ms / y_top) * (b.y - a.y); };

  dl->PushClipRect(ImVec2(origin.x, origin.y), ImVec2(origin.x + width, origin.y + kPlotHeight), true);
  for (double v = 0; v <= y_top * (1 + 1e-9); v += tick_ms) {
    const float y = y_of(v);
    dl->AddLine({a.x, y}, {b.x, y}, kGridColor);
    const double tick = tick_ms / unit.ms;
    const std::string l = unit.text(v, tick < 0.01 ? 4 : tick < 1 ? 2 : 0);
    dl->AddText({a.x - 6 - ImGui::CalcTextSize(l.c_str()).x, y - text_h / 2}, kDimTextColor, l.c_str());
  }
  const float px_per_step = (b.x - a.x) / static_cast<float>(columns);
  // A label every 48 px or more: at most a plot's width / 48 of them, however far apart the steps are.
  const double every_steps = nice_ceil(std::ceil(48.0 / std::max(static_cast<double>(px_per_step), 1e-12)));
  const auto every = static_cast<std::int64_t>(std::min(every_steps, 1e18));
  // Steps are shown numbered from 1, as `fsdplab run` counts them ("step 1/3"); the store's are indices from 0.
  const std::int64_t first_tick = (std::int64_t{first_step} + 1 + every - 1) / every * every;
  for (std::int64_t n = first_tick; n <= std::int64_t{last_step} + 1; n += every) {
    const std::string l = std::to_string(n);
    const float x = x_of(n - 1);
    dl->AddLine({x, b.y}, {x, b.y + 3}, kFrameColor);
    dl->AddText({x - ImGui::CalcTextSize(l.c_str()).x / 2, b.y + 3}, kDimTextColor, l.c_str());
  }
  if (series.empty() || longest == 0)
    dl->AddText({a.x + 8, a.y + 6}, kDimTextColor, "no steps yet");

  // The reference lines, from the compared pairs' averages. ideal = max(compute, comm) lies on one of the
  // other two lines, so lines of one value share one label ("comm = ideal 0.683 ms"), placed once the markers
  // are drawn (below).
  struct Reference {
    double ms;
    ImU32 color;
    std::string name;
  };
  std::vector<Reference> references;
  if (sum.steps_compared > 0) {
    for (const Reference& line :
         {Reference{sum.comm_ms, kCommColor, "comm"}, Reference{sum.compute_ms, kComputeColor, "compute"},
          Reference{sum.ideal_ms, kIdealColor, "ideal"}}) {
      const float y = y_of(line.ms);
      if (line.name == "ideal")
        dashed_hline(*dl, a.x, b.x, y, line.color, 2);
      else
        dl->AddLine({a.x, y}, {b.x, y}, line.color, 1.5f);
      const auto same =
          std::find_if(references.begin(), references.end(), [&](const Reference& r) { return r.ms == line.ms; });
      if (same == references.end())
        references.push_back(line);
      else
        same->name += " = " + line.name;
    }
    // The highest first: it is the ideal, the line η measures against, and gets the first choice of place.
    std::sort(references.begin(), references.end(), [](const Reference& x, const Reference& y) { return x.ms > y.ms; });
  }

  // The series: a line through their points, a marker per step while they are at least 4 px apart;
  // denser series draw each pixel column's lowest and highest point only.
  std::vector<ImVec2> path;
  std::vector<ImVec2> markers;  // what the reference labels must not cover
  for (const Series& s : series) {
    path.clear();
    const bool dense = static_cast<float>(s.steps.size()) * 4 > (b.x - a.x);
    for (int i : s.steps) {
      const StepTime& t = step_of(store, s.source, i);
      Point p;
      p.source = s.source;
      p.index = i;
      p.step = t.step;
      p.sync = s.sync;
      p.pos = ImVec2(x_of(t.step), y_of(ns_to_ms(t.duration())));
      points_.push_back(p);
      if (!dense) {
        path.push_back(p.pos);
      } else if (path.size() >= 2 && std::floor(path[path.size() - 2].x) == std::floor(p.pos.x)) {
        ImVec2& low = path[path.size() - 2];  // (x, lowest y) then (x, highest y) of the column
        ImVec2& high = path.back();
        low.y = std::max(low.y, p.pos.y);
        high.y = std::min(high.y, p.pos.y);
      } else {
        path.push_back(p.pos);
        path.push_back(p.pos);
      }
    }
    if (path.size() >= 2) dl->AddPolyline(path.data(), static_cast<int>(path.size()), s.color, ImDrawFlags_None, 1.5f);
    if (!dense) {
      for (const ImVec2& p : path) marker(dl, p, s.sync, s.color);
      markers.insert(markers.end(), path.begin(), path.end());
    }
  }
  dl->AddRect(a, b, kFrameColor);

  // Each reference line's label beside it, above or else below, at the plot's right end, left end or middle,
  // touching the line or else a marker's half size off it (the ASYNC markers sit on the ideal line): the first
  // of those places inside the plot that covers neither a label placed before it nor a marker. A label with
  // no such place is left out; its value is printed under the plot, in its colour.
  reference_labels_.clear();
  for (const Reference& r : references) {
    const std::string l = r.name + " " + unit.text(r.ms);
    const ImVec2 size = ImGui::CalcTextSize(l.c_str());
    const float y = y_of(r.ms);
    const auto is_free = [&](ImVec2 min, ImVec2 max) {
      if (min.x < a.x || max.x > b.x || min.y < a.y || max.y > b.y) return false;
      for (const Label& placed : reference_labels_)
        if (min.x < placed.max.x && placed.min.x < max.x && min.y < placed.max.y && placed.min.y < max.y) return false;
      return std::none_of(markers.begin(), markers.end(), [&](ImVec2 m) {
        return m.x + kMarkerClearance > min.x && m.x - kMarkerClearance < max.x && m.y + kMarkerClearance > min.y &&
               m.y - kMarkerClearance < max.y;
      });
    };
    for (const float top : {y - size.y - 1, y + 2, y - size.y - kMarkerClearance - 1, y + kMarkerClearance + 1}) {
      const auto placed = [&] {
        for (const float left : {b.x - size.x - kLabelInset, a.x + kLabelInset, (a.x + b.x - size.x) / 2}) {
          const ImVec2 min(left - kLabelPad, top), max(left + size.x + kLabelPad, top + size.y);
          if (!is_free(min, max)) continue;
          dl->AddRectFilled(min, max, kLabelBackColor);
          dl->AddText({left, top}, r.color, l.c_str());
          reference_labels_.push_back({l, min, max});
          return true;
        }
        return false;
      };
      if (placed()) break;
    }
  }

  // The point under the mouse: ringed, with its numbers.
  if (plot_hovered) {
    const ImVec2 mouse = ImGui::GetIO().MousePos;
    float best = 8 * 8;
    for (std::size_t i = 0; i < points_.size(); ++i) {
      const float dx = points_[i].pos.x - mouse.x, dy = points_[i].pos.y - mouse.y;
      if (dx * dx + dy * dy <= best) {
        best = dx * dx + dy * dy;
        hovered_ = static_cast<int>(i);
      }
    }
  }
  dl->PopClipRect();
  if (hovered_ >= 0) {
    const Point& p = points_[static_cast<std::size_t>(hovered_)];
    const StepTime& t = step_of(store, p.source, p.index);
    dl->AddCircle(p.pos, 6, kTextColor, 12, 1.5f);
    ImGui::BeginTooltip();
    const std::string kind = p.sync ? "SYNC" : "ASYNC";
    const std::string& label = store.source(p.source).label;
    ImGui::Text("%s%s step %lld", kind.c_str(), label == kind ? "" : (" (" + label + ")").c_str(),
                static_cast<long long>(t.step) + 1);
    ImGui::Text("duration  %10s %s", unit.number(ns_to_ms(t.duration())).c_str(), unit.name);
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(kComputeColor), "compute   %10s %s",
                       unit.number(ns_to_ms(t.compute)).c_str(), unit.name);
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(kCommColor), "comm      %10s %s",
                       unit.number(ns_to_ms(t.comm)).c_str(), unit.name);
    ImGui::Text("loss      %10.4f", t.loss);
    if (!std::isnan(t.grad_norm)) ImGui::Text("grad norm %10.4f (before clipping)", t.grad_norm);
    ImGui::EndTooltip();
  }

  // The comparison in numbers, then the table; what they average is said under the table, where a short panel
  // cuts it off rather than the numbers.
  std::string footnote;
  if (sum.steps_compared > 0) {
    const std::string compared =
        sum.sync_source == sum.async_source
            ? "the SYNC and ASYNC steps of " + store.source(sum.sync_source).label
            : store.source(sum.sync_source).label + " against " + store.source(sum.async_source).label;
    const std::string pairs = sum.steps_compared == 1
                                  ? "the last pair of steps"
                                  : "the last " + std::to_string(sum.steps_compared) + " pairs of steps";
    footnote = "T_sync, T_async, compute, comm, ideal: averages of " + pairs + " of " + compared +
               " (each run's first step left out, warm-up, and its last where known: no next step to prefetch for). ";
    const std::pair<ImU32, std::string> times[] = {{kSyncColors[0], "T_sync " + unit.text(sum.t_sync_ms)},
                                                   {kAsyncColors[0], "T_async " + unit.text(sum.t_async_ms)},
                                                   {kComputeColor, "compute " + unit.text(sum.compute_ms)},
                                                   {kCommColor, "comm " + unit.text(sum.comm_ms)},
                                                   {kIdealColor, "ideal " + unit.text(sum.ideal_ms)}};
    for (std::size_t i = 0; i < std::size(times); ++i) {
      const float w = ImGui::CalcTextSize(times[i].second.c_str()).x;
      if (i > 0) {
        ImGui::SameLine(0, style.ItemSpacing.x * 3);
        if (ImGui::GetContentRegionAvail().x < w) ImGui::NewLine();
      }
      ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(times[i].first), "%s", times[i].second.c_str());
    }
  } else {
    text(sum.why);
  }
  losses_.reset();
  if (reference && *reference >= 0 && *reference < static_cast<int>(store.sources().size())) {
    for (int other = 0; other < static_cast<int>(store.sources().size()) && !losses_; ++other)
      if (other != *reference) losses_ = losses_beside(store, *reference, other);
    ImGui::PushStyleColor(ImGuiCol_Text, losses_ && losses_->differ ? ImGui::ColorConvertU32ToFloat4(kFailedColor)
                                                                    : ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    text(losses_ ? losses_->text : "losses: against the reference's, once both runs have a step");
    ImGui::PopStyleColor();
  }
  if (sum.eta) {
    const std::string percent = percent_text(*sum.eta * 100);
    text("\u03B7 = (T_sync \u2212 T_async) / (T_sync \u2212 ideal) = " + fmt("%.3f", *sum.eta) + ": overlap hides " +
         unbroken(percent) + " of what perfect overlap would (" + unit.number(sum.t_sync_ms - sum.t_async_ms) + " of " +
         unbroken(unit.text(sum.t_sync_ms - sum.ideal_ms) + ")"));
    if (!sum.eta_reach_note.empty()) {
      ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
      text(sum.eta_reach_note);
      ImGui::PopStyleColor();
    }
  } else if (sum.steps_compared > 0) {
    text("\u03B7 = \u2013  (" + sum.why + ")");
  }

  // Each series: its last step and its time, and the means of its recent steps. The numbers keep their width
  // and the series' name takes what is left, elided; a panel too narrow even for the numbers leaves out the
  // columns least needed first, and says which: every number is still in the name's tooltip. A failed run's
  // name follows a red "failed", and its tooltip gives the error: without them its row, with no step or its
  // last step long past, reads like a slow run's.
  table_rows_.clear();
  row_tooltip_.clear();
  if (series.empty()) return;  // and nothing compared: no footnote
  struct Row {
    std::string name;
    ImU32 color;
    std::array<std::string, kTableNumbers.size()> numbers;  // "" where the series has none yet
    std::string failure;                                    // TraceSource::failure
  };
  std::vector<Row> rows;
  for (const Series& s : series) {
    const TraceSource& src = store.source(s.source);
    Row row{series_name(store, s), s.color, {}, src.failure};
    if (!s.steps.empty()) {
      const StepTime& last = src.steps[static_cast<std::size_t>(s.steps.back())];
      row.numbers[0] = std::to_string(std::int64_t{last.step} + 1);  // numbered from 1, as the runs count
      row.numbers[1] = unit.number(ns_to_ms(last.duration()));
    }
    if (const Means m = means_of(src, s.compared, kRecentSteps); m.count > 0) {
      row.numbers[2] = unit.number(m.duration);
      row.numbers[3] = unit.number(m.compute);
      row.numbers[4] = unit.number(m.comm);
      if (m.overlap_percent) row.numbers[5] = percent_text(*m.overlap_percent);
    }
    rows.push_back(std::move(row));
  }
  std::array<const char*, kTableNumbers.size()> headers = kTableNumbers;
  headers[1] = unit.name;
  const float cell_extra = style.CellPadding.x * 2 + 1;  // a column's padding and its border
  std::array<float, kTableNumbers.size()> widths{};
  for (std::size_t i = 0; i < kTableNumbers.size(); ++i) {
    widths[i] = ImGui::CalcTextSize(headers[i]).x;
    for (const Row& row : rows) widths[i] = std::max(widths[i], ImGui::CalcTextSize(row.numbers[i].c_str()).x);
  }
  table_columns_.assign(1, "series");
  table_fits_ = true;
  std::array<bool, kTableNumbers.size()> shown{};
  shown.fill(true);
  const float avail = ImGui::GetContentRegionAvail().x;
  // The name column's least: an elided name, after the "failed" mark where a run failed (it took "ASYNC..." to "A...").
  const bool any_failed = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return !r.failure.empty(); });
  const float min_name = ImGui::CalcTextSize(kShortestSeriesName).x + cell_extra +
                         (any_failed ? ImGui::CalcTextSize(kFailedMark).x + style.ItemInnerSpacing.x : 0);
  std::string left_out;
  for (std::size_t i : kTableDropOrder) {
    float need = min_name;
    for (std::size_t k = 0; k < kTableNumbers.size(); ++k) need += shown[k] ? widths[k] + cell_extra : 0;
    if (need <= avail) break;
    shown[i] = false;
    left_out += (left_out.empty() ? "" : ", ") + std::string(headers[i]);
  }
  for (std::size_t i = 0; i < kTableNumbers.size(); ++i)
    if (shown[i]) table_columns_.push_back(headers[i]);
  if (ImGui::BeginTable("##step_times", static_cast<int>(table_columns_.size()),
                        ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV)) {
    ImGui::TableSetupColumn("series", ImGuiTableColumnFlags_WidthStretch);
    for (std::size_t i = 0; i < kTableNumbers.size(); ++i)
      if (shown[i]) ImGui::TableSetupColumn(headers[i], ImGuiTableColumnFlags_WidthFixed, widths[i]);
    ImGui::TableHeadersRow();
    for (const Row& row : rows) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      const bool failed = !row.failure.empty();
      TableRow drawn{row.name, failed, ImGui::GetCursorScreenPos(), {}, {}};
      for (std::size_t i = 0; i < kTableNumbers.size(); ++i) drawn.numbers[headers[i]] = row.numbers[i];
      bool hovered = false;
      if (failed) {  // first, so that an elided name keeps it
        ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(kFailedColor), "%s", kFailedMark);
        hovered = ImGui::IsItemHovered();
        ImGui::SameLine(0, style.ItemInnerSpacing.x);
      }
      const std::string name = elided(printable(row.name), ImGui::GetContentRegionAvail().x);
      ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(row.color), "%s", name.c_str());
      hovered = hovered || ImGui::IsItemHovered();
      drawn.max = ImGui::GetItemRectMax();
      table_rows_.push_back(std::move(drawn));
      if (hovered && (name != printable(row.name) || !left_out.empty() || failed)) {
        ImGui::BeginTooltip();
        row_tooltip_ = printable(row.name);
        ImGui::TextUnformatted(row_tooltip_.c_str());
        if (failed) {
          const std::string error = "failed: " + printable(row.failure);
          ImGui::PushStyleColor(ImGuiCol_Text, kFailedColor);
          text_wrapped_at_spaces(error, ImGui::GetFontSize() * kTooltipWrapEms);  // never inside a path
          ImGui::PopStyleColor();
          row_tooltip_ += "\n" + error;
        }
        for (std::size_t i = 0; i < kTableNumbers.size(); ++i) {
          if (row.numbers[i].empty()) continue;
          ImGui::Text("%-8s %s", headers[i], row.numbers[i].c_str());
          row_tooltip_ += "\n" + std::string(headers[i]) + " " + row.numbers[i];
        }
        ImGui::EndTooltip();
      }
      for (std::size_t i = 0; i < kTableNumbers.size(); ++i) {
        if (!shown[i]) continue;
        ImGui::TableNextColumn();
        table_fits_ = table_fits_ && ImGui::CalcTextSize(row.numbers[i].c_str()).x <= ImGui::GetContentRegionAvail().x;
        ImGui::TextUnformatted(row.numbers[i].c_str());
      }
    }
    ImGui::EndTable();
  }
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  text(footnote + "In the table: step, " + unit.name +
       ": each series' last step and its time; mean, compute, comm: of its last " + std::to_string(kRecentSteps) +
       " steps, its run's first and known last left out (" + unit.name +
       "); overlap: the share of those steps' communication that compute hid" +
       (left_out.empty() ? "" : "; too narrow for " + left_out + ": hover a series"));
  ImGui::PopStyleColor();
}

}  // namespace fsdplab::app
