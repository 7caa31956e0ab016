#include "app/report/report_figures.hpp"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "app/axis_step.hpp"
#include "app/dashboard/frame_capture.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab::app {
namespace {

// Frames drawn before the one read back: the panels settle (the timeline fits its view from its
// second frame on, text sizes are known after the first).
constexpr int kFrames = 4;

// Between a capture's new_frame and render (no mouse over a figure: no cursor line, no tooltip).
void draw_frame(const Figure& figure) {
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(ImGui::GetIO().DisplaySize);
  constexpr ImGuiWindowFlags kFlags = ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove |
                                      ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoBringToFrontOnFocus;
  ImGui::Begin("figure", nullptr, kFlags);
  ImGui::TextUnformatted(figure.title.c_str());
  ImGui::Separator();
  figure.draw();
  ImGui::End();
}

// ---- line charts -------------------------------------------------------------------------------------

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double map(double v) const {  // to [0, 1]
    const double a = log ? std::log(lo) : lo, b = log ? std::log(hi) : hi;
    const double x = log ? std::log(v) : v;
    return b > a ? (x - a) / (b - a) : 0.5;
  }
};

// Ticks of a linear axis at 1, 2 or 5 times a power of ten, about `want` of them.
std::vector<double> linear_ticks(double lo, double hi, int want) {
  const double step = nice_ceil((hi - lo) / want);
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  return ticks;
}

// Ticks of a log axis at powers of `base`, thinned to at most `most`.
std::vector<double> log_ticks(double lo, double hi, double base, std::size_t most) {
  std::vector<double> ticks;
  for (double t = std::pow(base, std::ceil(std::log(lo) / std::log(base) - 1e-9)); t <= hi * (1 + 1e-9); t *= base)
    ticks.push_back(t);
  if (ticks.size() > most) {
    const std::size_t every = (ticks.size() + most - 1) / most;
    std::vector<double> thinned;
    for (std::size_t i = 0; i < ticks.size(); i += every) thinned.push_back(ticks[i]);
    ticks = std::move(thinned);
  }
  return ticks;
}

std::string plain_number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

}  // namespace

void draw_line_chart(const LineChart& chart, ImVec2 size) {
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  if (size.x <= 0) size.x = avail.x;
  if (size.y <= 0) size.y = avail.y;
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  ImGui::Dummy(size);
  ImDrawList& dl = *ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();
  const ImVec2 p0(origin.x + 90, origin.y + 12), p1(origin.x + size.x - 20, origin.y + size.y - 2.5f * font - 8);
  if (p1.x - p0.x < 50 || p1.y - p0.y < 50) return;

  Axis x{std::numeric_limits<double>::max(), std::numeric_limits<double>::lowest(), chart.log_x};
  Axis y{std::numeric_limits<double>::max(), std::numeric_limits<double>::lowest(), false};  // always linear
  for (const ChartSeries& s : chart.series)
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      if (x.log && s.x[i] <= 0) continue;
      x.lo = std::min(x.lo, s.x[i]), x.hi = std::max(x.hi, s.x[i]);
      y.lo = std::min(y.lo, s.y[i]), y.hi = std::max(y.hi, s.y[i]);
    }
  if (x.lo > x.hi || y.lo > y.hi) {
    dl.AddText(p0, IM_COL32(200, 200, 200, 255), "no data");
    return;
  }
  if (x.hi == x.lo) x.hi = x.lo + 1;
  const double pad = y.hi > y.lo ? (y.hi - y.lo) * 0.06 : std::max(std::abs(y.hi) * 0.1, 1e-9);
  y.lo = y.lo >= 0 && y.lo - pad < 0 ? 0 : y.lo - pad;
  y.hi += pad;
  const auto px = [&](double v) { return p0.x + static_cast<float>(x.map(v)) * (p1.x - p0.x); };
  const auto py = [&](double v) { return p1.y - static_cast<float>(y.map(v)) * (p1.y - p0.y); };

  const ImU32 grid = IM_COL32(255, 255, 255, 28), axis = IM_COL32(200, 200, 200, 255),
              text = IM_COL32(220, 220, 220, 255);
  dl.AddRectFilled(p0, p1, IM_COL32(0, 0, 0, 60));
  const std::vector<double> xt = x.log ? log_ticks(x.lo, x.hi, 2, 12) : linear_ticks(x.lo, x.hi, 8);
  for (double t : xt) {
    const float X = px(t);
    dl.AddLine(ImVec2(X, p0.y), ImVec2(X, p1.y), grid);
    const std::string label = chart.x_tick ? chart.x_tick(t) : plain_number(t);
    const float w = ImGui::CalcTextSize(label.c_str()).x;
    dl.AddText(ImVec2(X - w / 2, p1.y + 4), text, label.c_str());
  }
  const std::vector<double> yt = linear_ticks(y.lo, y.hi, 6);
  for (double t : yt) {
    const float Y = py(t);
    dl.AddLine(ImVec2(p0.x, Y), ImVec2(p1.x, Y), grid);
    const std::string label = plain_number(t);
    const float w = ImGui::CalcTextSize(label.c_str()).x;
    dl.AddText(ImVec2(p0.x - w - 6, Y - font / 2), text, label.c_str());
  }
  dl.AddRect(p0, p1, axis);
  const float xw = ImGui::CalcTextSize(chart.x_label.c_str()).x;
  dl.AddText(ImVec2((p0.x + p1.x - xw) / 2, p1.y + font + 10), text, chart.x_label.c_str());
  dl.AddText(ImVec2(origin.x, p0.y - font - 2 < origin.y ? origin.y : p0.y - font - 2), text, chart.y_label.c_str());

  dl.PushClipRect(p0, p1, true);
  for (const ChartSeries& s : chart.series) {
    std::vector<ImVec2> points;
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || (x.log && s.x[i] <= 0)) continue;
      points.emplace_back(px(s.x[i]), py(s.y[i]));
    }
    for (std::size_t i = 1; i < points.size(); ++i) {
      if (!s.dashed) {
        dl.AddLine(points[i - 1], points[i], s.color, 2);
        continue;
      }
      const ImVec2 a = points[i - 1], b = points[i];
      const float length = std::hypot(b.x - a.x, b.y - a.y);
      for (float d = 0; d < length; d += 12) {
        const float e = std::min(d + 7, length);
        dl.AddLine(ImVec2(a.x + (b.x - a.x) * d / length, a.y + (b.y - a.y) * d / length),
                   ImVec2(a.x + (b.x - a.x) * e / length, a.y + (b.y - a.y) * e / length), s.color, 2);
      }
    }
    if (s.markers)
      for (const ImVec2& p : points) dl.AddCircleFilled(p, 3.5f, s.color);
  }
  dl.PopClipRect();

  // The legend, in a corner inside the plot.
  float legend_width = 0;
  for (const ChartSeries& s : chart.series)
    legend_width = std::max(legend_width, ImGui::CalcTextSize(s.label.c_str()).x);
  const float legend_height = 8 + (font + 4) * static_cast<float>(chart.series.size());
  const ImVec2 l0(p1.x - legend_width - 44,
                  chart.legend == LegendCorner::top_right ? p0.y + 8 : p1.y - 8 - legend_height);
  dl.AddRectFilled(l0, ImVec2(p1.x - 8, l0.y + legend_height), IM_COL32(20, 20, 24, 220));
  float ly = l0.y + 4;
  for (const ChartSeries& s : chart.series) {
    dl.AddLine(ImVec2(l0.x + 6, ly + font / 2), ImVec2(l0.x + 28, ly + font / 2), s.color, 2);
    dl.AddText(ImVec2(l0.x + 34, ly), text, s.label.c_str());
    ly += font + 4;
  }
}

std::vector<FigureResult> render_figures(const std::vector<Figure>& figures, const std::filesystem::path& dir) {
  std::vector<FigureResult> results;
  for (const Figure& f : figures) results.push_back({f.file, f.title, false, ""});
  if (figures.empty()) return results;
  const auto not_drawn = [&](const std::string& why) {
    for (FigureResult& r : results)
      if (!r.drawn && r.why.empty()) r.why = why;
  };
  std::optional<FrameCapture> capture;
  try {
    capture.emplace(kFigureWidth, kFigureHeight);
  } catch (const Error& e) {
    not_drawn(e.what());
    return results;
  }
  for (std::size_t i = 0; i < figures.size(); ++i) {
    try {
      for (int frame = 0; frame < kFrames; ++frame) {
        capture->new_frame();
        draw_frame(figures[i]);
        capture->render();
      }
      capture->write_png(dir / figures[i].file, "figure");
      results[i].drawn = true;
    } catch (const std::exception& e) {
      // A figure that failed between NewFrame and Render leaves ImGui mid-frame: the rest are not drawn.
      results[i].why = e.what();
      not_drawn("not drawn after the failure of " + figures[i].file + ": " + e.what());
      break;
    }
  }
  return results;
}

}  // namespace fsdplab::app
