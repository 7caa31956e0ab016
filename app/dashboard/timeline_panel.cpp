#include "app/dashboard/timeline_panel.hpp"

#include <imgui_internal.h>  // SetItemUsingMouseWheel: the wheel zooms here, it must not scroll a parent

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdio>

#include "app/dashboard/legend.hpp"
#include "app/dashboard/palette.hpp"
#include "app/dashboard/timeline_format.hpp"
#include "engine/runtime/byte_text.hpp"

namespace fsdplab::app {
namespace {

// Calls draw(t) for t = first, first + step, ... below `end`, at most one tick per 2 px of `width`.
// Counted, not stepped: far from time 0 (a peer may send times up to 2^61 ns) a step can be below a
// double's resolution, and `t += step` would stand still — the frame would never end.
template <class Draw>
void for_each_tick(double first, double step, double end, float width, const Draw& draw) {
  const auto max_ticks = static_cast<int>(width / 2) + 2;
  for (int i = 0; i < max_ticks; ++i) {
    const double t = first + i * step;
    if (t >= end) break;
    draw(t);
  }
}

constexpr float kLabelWidth = 150;        // the fixed column of lane labels
constexpr float kAxisHeight = 22;
constexpr float kSourceHeaderHeight = 20;
constexpr float kRankHeaderHeight = 17;
constexpr float kGroupGap = 4;            // between two sources
constexpr double kMinItemPixels = 1.0;    // narrower than this: folded
constexpr float kLabelMinPixels = 24;     // an item at least this wide gets its name inside
constexpr double kWheelZoom = 1.25;       // the span's factor per wheel notch
constexpr float kClickSlop = 3;           // a press that moves less than this is a click
constexpr double kMaxSpanMargin = 1.2;    // the farthest zoom: the whole trace and 20 %
constexpr double kRaceMarkMinPixels = 6;  // a race's access is marked at least this wide, at any zoom
constexpr SimTime kRaceViewMargin = 1'000;  // show_race's least margin either side, ns

constexpr ImU32 kBackground = IM_COL32(24, 24, 28, 255);
constexpr ImU32 kLaneShade = IM_COL32(34, 34, 40, 255);
constexpr ImU32 kLabelColumn = IM_COL32(30, 30, 36, 255);
constexpr ImU32 kSourceHeader = IM_COL32(52, 56, 70, 255);
constexpr ImU32 kRankHeader = IM_COL32(40, 42, 50, 255);
constexpr ImU32 kAxisBackground = IM_COL32(44, 44, 52, 255);
constexpr ImU32 kGrid = IM_COL32(255, 255, 255, 18);
constexpr ImU32 kTick = IM_COL32(200, 200, 210, 255);
constexpr ImU32 kText = IM_COL32(225, 225, 230, 255);
constexpr ImU32 kDimText = IM_COL32(160, 160, 170, 255);
constexpr ImU32 kCursor = IM_COL32(255, 255, 255, 90);
constexpr ImU32 kSelectionEdge = IM_COL32(255, 255, 255, 150);
constexpr ImU32 kRaceFill = IM_COL32(255, 89, 89, 110);  // kFailedColor, see-through: the op that never ran
constexpr ImU32 kRaceFrame = IM_COL32(255, 255, 255, 255);  // no op's colour: it shows on every lane
// The hovered op's dependencies ([Note: what an op waited for]): the program's waits, and the allocator's, dimmer.
constexpr ImU32 kEventWait = IM_COL32(255, 230, 120, 255);
constexpr ImU32 kFreedBlockWait = IM_COL32(170, 170, 185, 200);
constexpr float kArrowHead = 6;  // pixels

// Dark text on light colours (all-gather orange), light text on dark ones (compute blue).
ImU32 text_on(ImU32 background) {
  const unsigned r = (background >> IM_COL32_R_SHIFT) & 0xFF, g = (background >> IM_COL32_G_SHIFT) & 0xFF,
                 b = (background >> IM_COL32_B_SHIFT) & 0xFF;
  return 299 * r + 587 * g + 114 * b > 150'000 ? IM_COL32(0, 0, 0, 255) : IM_COL32(255, 255, 255, 255);
}

float clamp_pixels(double x, double width) { return static_cast<float>(std::clamp(x, -2.0, width + 2.0)); }

// "matmul u3 forward" into `buffer`; returns its length.
int item_label(const TraceStore& store, const TimelineItem& item, char* buffer, int size) {
  const std::string_view name = store.text(item.name), phase = store.text(item.phase);
  int n = std::snprintf(buffer, static_cast<std::size_t>(size), "%.*s", static_cast<int>(name.size()), name.data());
  n = std::min(n, size - 1);
  if (item.unit >= 0 && n < size - 1)
    n = std::min(size - 1, n + std::snprintf(buffer + n, static_cast<std::size_t>(size - n), " u%d", item.unit));
  if (!phase.empty() && n < size - 1)
    n = std::min(size - 1, n + std::snprintf(buffer + n, static_cast<std::size_t>(size - n), " %.*s",
                                             static_cast<int>(phase.size()), phase.data()));
  return n;
}

// The first source, in store order, whose run a race stopped; null where none.
const TraceSource* first_race(const TraceStore& store) {
  for (const TraceSource& source : store.sources())
    if (source.race) return &source;
  return nullptr;
}

// Whether lane `l` holds one of its source's race's accesses: it is laid out even while it has no op.
bool holds_race_access(const TraceStore& store, const TimelineLane& l) {
  const std::optional<RaceReport>& race = store.source(l.source).race;
  return race && race->rank == l.rank && (race->earlier.lane == l.lane || race->later.lane == l.lane);
}

// The tooltip of a race's marks: the buffer, each access and what was missing between them.
std::vector<std::string> race_lines(const RaceReport& race) {
  const auto who = [](const Accessor& a) {
    if (a.op == 0) return "the host, at " + format_instant(a.begin);
    return "op #" + std::to_string(a.op) + " '" + a.name + "' on the " + std::string(lane_name(a.lane)) + " stream, " +
           format_instant(a.begin) + " to " + format_instant(a.end);
  };
  std::vector<std::string> lines;
  lines.push_back("stream race on rank " + std::to_string(race.rank) + ", buffer #" + std::to_string(race.block) +
                  " (tag " + std::string(mem_tag_name(race.later_tag)) + ")");
  lines.push_back("first: " + who(race.earlier) + (race.earlier_wrote ? ", wrote it" : ", read it") +
                  (race.reused ? " in an earlier allocation (tag " + std::string(mem_tag_name(race.earlier_tag)) + ")"
                               : std::string()));
  lines.push_back("then: " + who(race.later) + (race.later_writes ? ", writes it" : ", reads it") +
                  (race.later.op == 0 ? ": the run stopped here" : ": the run stopped here, before it ran"));
  if (race.later.lane == Lane::host && race.later.op == 0) {
    lines.push_back("nothing made the host wait for the first (a missing synchronize?)");
  } else if (race.reused) {
    lines.push_back("the buffer was freed and handed out again before the first finished, and no event orders the");
    lines.push_back("two (a missing stream wait before the free, or before this access?)");
  } else {
    lines.push_back("no event orders the two (a missing stream wait: Device::wait on an event recorded after the");
    lines.push_back("first, on the first's stream?)");
  }
  return lines;
}

}  // namespace

SimTime TimelinePanel::view_begin() const { return static_cast<SimTime>(std::llround(begin_)); }
SimTime TimelinePanel::view_end() const { return static_cast<SimTime>(std::llround(end_)); }

// ---- the view: span, follow, layout, input ----------------------------------------------------------------

void TimelinePanel::set_view(SimTime begin, SimTime end) {
  double b = static_cast<double>(begin), e = static_cast<double>(end);
  if (e - b < kMinSpan) {
    const double mid = (b + e) / 2;
    b = mid - kMinSpan / 2;
    e = b + kMinSpan;
  }
  begin_ = b;
  end_ = e;
  following_ = false;
  fit_ = false;
}

void TimelinePanel::fit() {
  fit_ = true;
  following_ = true;
}

bool TimelinePanel::show_race(const TraceStore& store) {
  if (!first_race(store)) return false;
  SimTime begin = std::numeric_limits<SimTime>::max(), end = 0;
  for (const TraceSource& source : store.sources()) {
    if (!source.race) continue;
    begin = std::min({begin, source.race->earlier.begin, source.race->later.begin});
    end = std::max({end, source.race->earlier.end, source.race->later.end});
  }
  const SimTime margin = std::max(end - begin, kRaceViewMargin);
  set_view(std::max(SimTime{0}, begin - margin), end + margin);
  race_view_ = {begin_, end_};
  return true;
}

double TimelinePanel::time_at(float x, const Area& area) const {
  return begin_ + static_cast<double>(x - area.x0) / area.width() * (end_ - begin_);
}

double TimelinePanel::max_span(const TraceStore& store) const {
  if (store.event_count() == 0) return 1e12;
  const double trace = static_cast<double>(store.last_time() - store.first_time());
  return std::max(trace * kMaxSpanMargin, 10 * kMinSpan);
}

void TimelinePanel::update_follow(const TraceStore& store) {
  if (!following_ || store.event_count() == 0) return;
  const double first = static_cast<double>(store.first_time()), last = static_cast<double>(store.last_time());
  if (fit_) {
    begin_ = first;
    end_ = std::max(last, first + kMinSpan);
  } else {
    const double span = end_ - begin_;
    end_ = last;
    begin_ = last - span;
  }
}

// Where the rows would overflow `height`, lanes get shorter, a pixel at a time down to kMinLaneHeight, and rank headers
// with them (at most a lane and 2 pixels), so that both runs of a side-by-side session at W = 4 (lab 08's hybrid
// shard) show without scrolling; past that, the lanes scroll (ctrl + wheel, or a drag). Lanes only get shorter while
// a run adds lanes (a stream's first op, a rank's backward): rows that grew back would move under a click aimed at
// them the frame before. They grow back where every row fits at full height, and after a fold (a click already made).
void TimelinePanel::layout(const TraceStore& store, float height) {
  const auto rows_at = [&](float lane_height) {
    const float rank_header_height = std::min(kRankHeaderHeight, lane_height + 2);
    rows_.clear();
    float y = 0;
    int source = INT_MIN, rank = INT_MIN;
    const auto& lanes = store.lanes();
    for (std::size_t i = 0; i < lanes.size(); ++i) {
      const TimelineLane& l = lanes[i];
      if (l.items.empty() && !holds_race_access(store, l)) continue;
      if (l.source != source) {
        if (source != INT_MIN) y += kGroupGap;
        rows_.push_back(Row{.kind = Row::source_header, .lane_index = i, .y = y, .height = kSourceHeaderHeight});
        y += kSourceHeaderHeight;
        source = l.source;
        rank = INT_MIN;
      }
      if (folded_sources_.count(source)) continue;
      if (l.rank != rank) {
        rows_.push_back(Row{.kind = Row::rank_header, .lane_index = i, .y = y, .height = rank_header_height});
        y += rank_header_height;
        rank = l.rank;
      }
      if (folded_ranks_.count({source, rank})) continue;
      rows_.push_back(Row{.kind = Row::lane, .lane_index = i, .y = y, .height = lane_height});
      y += lane_height;
    }
    content_height_ = y;
  };
  rows_at(kLaneHeight);
  if (content_height_ <= height) {
    lane_height_ = kLaneHeight;
    return;
  }
  // Full height does not fit (laid out just above): from the height the lanes have now, a pixel shorter at a time.
  for (float lane_height = std::min(lane_height_, kLaneHeight - 1); lane_height > kMinLaneHeight; --lane_height) {
    rows_at(lane_height);
    if (content_height_ <= height) {
      lane_height_ = lane_height;
      return;
    }
  }
  lane_height_ = kMinLaneHeight;
  rows_at(kMinLaneHeight);
}

void TimelinePanel::zoom_at(double factor, double x, const Area& area, const TraceStore& store) {
  x = std::clamp(x, static_cast<double>(area.x0), static_cast<double>(area.x1));
  const double frac = (x - area.x0) / area.width();
  const double t = begin_ + frac * (end_ - begin_);
  const double span = std::clamp((end_ - begin_) * factor, kMinSpan, std::max(kMinSpan, max_span(store)));
  begin_ = t - frac * span;
  end_ = begin_ + span;
  following_ = false;
  fit_ = false;
  if (drag_.active) {  // a pan goes on from here
    drag_.x = static_cast<float>(x);
    drag_.begin = begin_;
  }
}

void TimelinePanel::handle_input(const TraceStore& store, const Area& area, bool hovered) {
  ImGuiIO& io = ImGui::GetIO();
  const ImVec2 mouse = io.MousePos;

  if (hovered) {
    if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_End), false)) following_ = true;
    if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Home), false)) fit();
    if (io.MouseWheel != 0) {
      if (io.KeyCtrl) {  // ctrl + wheel scrolls the lanes
        ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseWheel * 3 * kLaneHeight);
      } else {
        zoom_at(std::pow(kWheelZoom, -static_cast<double>(io.MouseWheel)), mouse.x, area, store);
      }
    }
    if (io.MouseWheelH != 0) {  // a horizontal wheel pans a tenth of the view a notch
      const double shift = -static_cast<double>(io.MouseWheelH) * 0.1 * (end_ - begin_);
      begin_ += shift;
      end_ += shift;
      following_ = fit_ = false;
    }
  }

  if (ImGui::IsItemActivated()) {
    drag_ = Drag{.active = true,
                 .select = ImGui::IsMouseClicked(ImGuiMouseButton_Right) || io.KeyShift,
                 .moved = false,
                 .x = mouse.x,
                 .y = mouse.y,
                 .begin = begin_,
                 .scroll = ImGui::GetScrollY(),
                 .time = time_at(std::clamp(mouse.x, area.x0, area.x1), area)};
  }
  if (drag_.active && ImGui::IsItemActive()) {
    const float dx = mouse.x - drag_.x, dy = mouse.y - drag_.y;
    if (std::abs(dx) > kClickSlop || std::abs(dy) > kClickSlop) drag_.moved = true;
    if (drag_.select) {
      if (drag_.moved) {
        const double t = time_at(std::clamp(mouse.x, area.x0, area.x1), area);
        selection_ = std::pair(static_cast<SimTime>(std::llround(std::min(t, drag_.time))),
                               static_cast<SimTime>(std::llround(std::max(t, drag_.time))));
      }
    } else {
      if (dx != 0) {
        const double span = end_ - begin_;
        begin_ = drag_.begin - static_cast<double>(dx) / area.width() * span;
        end_ = begin_ + span;
        following_ = fit_ = false;
      }
      if (dy != 0) ImGui::SetScrollY(drag_.scroll - dy);
    }
  }
  if (drag_.active && ImGui::IsItemDeactivated()) {
    if (drag_.select && !drag_.moved) selection_.reset();  // a right click clears the measurement
    drag_.active = false;  // a left click's header folding is draw()'s: it knows the rows
  }
}

// ---- drawing: lanes, folded blocks, races -----------------------------------------------------------------

void TimelinePanel::draw(const TraceStore& store, ImVec2 size) {
  stats_ = TimelineStats{};
  lanes_drawn_.clear();
  dependencies_drawn_.clear();
  race_marks_.clear();
  hovered_race_.reset();
  const auto previous_fold = hovered_fold_;
  hovered_.reset();
  hovered_fold_.reset();
  tooltip_.clear();
  mouse_x_ = -1;

  if (!ImGui::BeginChild("##timeline", size, false,
                         ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse)) {
    ImGui::EndChild();
    return;
  }
  // The toolbar.
  bool follow = following_;
  if (ImGui::Checkbox("Follow", &follow)) following_ = follow;
  ImGui::SameLine();
  if (ImGui::Button("Fit")) fit();
  // See [Note: the race on the timeline]: a race that comes while the view follows the run, or still shows the races
  // that came before it, is zoomed to.
  if (const int races = static_cast<int>(std::count_if(store.sources().begin(), store.sources().end(),
                                                       [](const TraceSource& s) { return s.race.has_value(); }));
      races > 0) {
    ImGui::SameLine();
    if (ImGui::Button(races > 1 ? "Show the races" : "Show the race")) show_race(store);
    if (races > races_seen_ && (following_ || std::pair{begin_, end_} == race_view_)) show_race(store);
    races_seen_ = races;
  } else {
    races_seen_ = 0;
  }
  update_follow(store);
  ImGui::SameLine();
  ImGui::TextDisabled("view %s of %s, %s ops", format_duration(static_cast<SimTime>(end_ - begin_)).c_str(),
                      format_duration(store.last_time() - store.first_time()).c_str(),
                      format_count(store.event_count()).c_str());
  if (selection_) {
    ImGui::SameLine();
    ImGui::Text("selection %s", format_duration(selection_->second - selection_->first).c_str());
  }
  // What the colours mean: an op's category (which stream it ran on is its lane), and a block of folded ops.
  legend_.clear();
  const auto item = [&](const std::string& name, ImU32 color) {
    legend_.push_back(name);
    legend_item(name, [&](ImDrawList& dl, ImVec2 a, ImVec2 b) {
      const float pad = (b.y - a.y) * 0.2f;
      dl.AddRectFilled({a.x, a.y + pad}, {b.x, b.y - pad}, color);
    });
  };
  for (std::size_t c = 0; c < kOpCategoryCount; ++c)
    item(std::string(category_name(static_cast<OpCategory>(c))), category_color(static_cast<OpCategory>(c)));
  item("folded (ops under a pixel: zoom in)", kFoldedColor);
  ImGui::NewLine();

  layout(store, ImGui::GetContentRegionAvail().y - kAxisHeight);
  ImGui::PushStyleColor(ImGuiCol_ChildBg, kBackground);
  const bool open = ImGui::BeginChild("##lanes", ImVec2(0, 0), false, ImGuiWindowFlags_NoScrollWithMouse);
  ImGui::PopStyleColor();
  if (open) {
    ImDrawList& dl = *ImGui::GetWindowDrawList();
    const ImVec2 window = ImGui::GetWindowPos(), window_size = ImGui::GetWindowSize();
    const float left = window.x + ImGui::GetWindowContentRegionMin().x;
    const float right = window.x + ImGui::GetWindowContentRegionMax().x;
    const ImVec2 origin = ImGui::GetCursorScreenPos();  // the content's top left, scrolled
    Area area;
    area.x0 = left + kLabelWidth;
    area.x1 = std::max(area.x0 + 1, right);
    area.top = window.y + kAxisHeight;
    area.bottom = std::max(area.top + 1, window.y + window_size.y);

    ImGui::InvisibleButton("##canvas",
                           ImVec2(std::max(1.0f, right - left), std::max(kAxisHeight + content_height_, window_size.y)),
                           ImGuiButtonFlags_MouseButtonLeft | ImGuiButtonFlags_MouseButtonRight);
    const bool hovered = ImGui::IsItemHovered();
    ImGui::SetItemUsingMouseWheel();
    const ImGuiIO& io = ImGui::GetIO();
    const ImVec2 mouse = io.MousePos;
    const float rows_top = origin.y + kAxisHeight;

    // Clicks on headers fold their group (decided before the drag state forgets the press).
    const bool released_click = drag_.active && !drag_.select && !drag_.moved && ImGui::IsItemDeactivated();
    handle_input(store, area, hovered);
    if (released_click && mouse.y >= area.top) {
      for (const Row& row : rows_) {
        const float y0 = rows_top + row.y;
        if (mouse.y < y0 || mouse.y >= y0 + row.height) continue;
        const TimelineLane& l = store.lanes()[row.lane_index];
        if (row.kind == Row::source_header) {
          if (!folded_sources_.erase(l.source)) folded_sources_.insert(l.source);
          lane_height_ = kLaneHeight;  // the rows are laid out anew next frame, as tall as they then fit
        } else if (row.kind == Row::rank_header) {
          if (!folded_ranks_.erase({l.source, l.rank})) folded_ranks_.insert({l.source, l.rank});
          lane_height_ = kLaneHeight;
        }
      }
    }
    if (hovered && previous_fold && ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) {
      const double margin = 0.05 * static_cast<double>(previous_fold->end - previous_fold->begin) + kMinSpan / 2;
      set_view(static_cast<SimTime>(static_cast<double>(previous_fold->begin) - margin),
               static_cast<SimTime>(static_cast<double>(previous_fold->end) + margin));
    }

    const bool pointing = hovered && !(drag_.active && drag_.moved) && mouse.x >= area.x0 && mouse.x < area.x1 &&
                          mouse.y >= area.top && mouse.y < area.bottom;
    if (hovered && mouse.x >= area.x0 && mouse.x < area.x1 && mouse.y >= area.top) mouse_x_ = mouse.x;

    const double span = end_ - begin_;
    const double step = tick_step(span / area.width());
    const double first_tick = std::ceil(begin_ / step) * step;

    // Backgrounds, headers and labels, clipped to the lanes' region below the axis.
    dl.PushClipRect(ImVec2(left, area.top), ImVec2(area.x1, area.bottom), true);
    dl.AddRectFilled(ImVec2(left, area.top), ImVec2(area.x0, area.bottom), kLabelColumn);
    for_each_tick(first_tick, step, end_, area.width(), [&](double t) {
      const float x = area.x0 + static_cast<float>((t - begin_) / span * area.width());
      dl.AddLine(ImVec2(x, area.top), ImVec2(x, area.bottom), kGrid);
    });
    const float font_size = ImGui::GetFontSize();
    bool shade = false;
    for (const Row& row : rows_) {
      const float y0 = rows_top + row.y, y1 = y0 + row.height;
      const bool shaded = shade;  // every other lane of a source, counted whether in sight or not
      shade = row.kind == Row::lane ? !shade : row.kind == Row::source_header ? false : shade;
      if (y1 <= area.top || y0 >= area.bottom) continue;
      const TimelineLane& l = store.lanes()[row.lane_index];
      const float text_y = y0 + (row.height - font_size) / 2;
      char text[160];
      if (row.kind == Row::source_header) {
        const TraceSource& src = store.source(l.source);
        std::snprintf(text, sizeof text, "%s %s   %d rank%s", folded_sources_.count(l.source) ? "+" : "-",
                      src.label.c_str(), src.world, src.world == 1 ? "" : "s");
        dl.AddRectFilled(ImVec2(left, y0), ImVec2(area.x1, y1), kSourceHeader);
        dl.AddText(ImVec2(left + 4, text_y), kText, text);
      } else if (row.kind == Row::rank_header) {
        std::snprintf(text, sizeof text, "%s rank %d", folded_ranks_.count({l.source, l.rank}) ? "+" : "-", l.rank);
        dl.AddRectFilled(ImVec2(left, y0), ImVec2(area.x1, y1), kRankHeader);
        dl.AddText(ImVec2(left + 14, text_y), kText, text);
      } else {
        if (shaded) dl.AddRectFilled(ImVec2(area.x0, y0), ImVec2(area.x1, y1), kLaneShade);
        const std::string_view name = lane_name(l.lane);
        const ImVec4 clip(left, y0, area.x0 - 4, y1);
        dl.AddText(nullptr, 0.0f, ImVec2(left + 28, text_y), kDimText, name.data(), name.data() + name.size(), 0.0f,
                   &clip);
        lanes_drawn_.push_back(LaneRect{.source = l.source, .rank = l.rank, .lane = l.lane,
                                        .min = ImVec2(area.x0, y0), .max = ImVec2(area.x1, y1)});
      }
    }
    dl.PopClipRect();

    // The ops, clipped to the time area.
    dl.PushClipRect(ImVec2(area.x0, area.top), ImVec2(area.x1, area.bottom), true);
    for (const Row& row : rows_) {
      if (row.kind != Row::lane) continue;
      const float y0 = rows_top + row.y, y1 = y0 + row.height;
      if (y1 <= area.top || y0 >= area.bottom) continue;
      draw_lane(store, row.lane_index, area, y0, y1, dl, pointing && mouse.y >= y0 && mouse.y < y1);
    }
    stats_.lanes = static_cast<int>(lanes_drawn_.size());
    draw_dependencies(store, area, rows_top, dl);
    draw_races(store, area, rows_top, dl, pointing);
    draw_selection(area, dl);
    if (mouse_x_ >= 0) dl.AddLine(ImVec2(mouse_x_, area.top), ImVec2(mouse_x_, area.bottom), kCursor);
    dl.PopClipRect();

    draw_axis(area, left, window.y, dl);
    if (pointing) show_tooltip(store);
  }
  ImGui::EndChild();
  ImGui::EndChild();
}

void TimelinePanel::draw_lane(const TraceStore& store, std::size_t lane_index, const Area& area, float y0, float y1,
                              ImDrawList& dl, bool mouse_in_row) {
  const TimelineLane& lane = store.lanes()[lane_index];
  const std::vector<TimelineItem>& items = lane.items;
  const std::size_t n = items.size();
  const double width = area.width();
  const double scale = width / (end_ - begin_);  // pixels per ns
  const auto px = [&](SimTime t) { return (static_cast<double>(t) - begin_) * scale; };
  const auto narrow = [&](const TimelineItem& it) { return px(it.end) - px(it.begin) < kMinItemPixels; };
  const double mouse = mouse_in_row ? static_cast<double>(ImGui::GetIO().MousePos.x - area.x0) : -1e30;
  const float top = y0 + 2, bottom = y1 - 2;
  ImFont* font = ImGui::GetFont();
  const float font_size = ImGui::GetFontSize();
  const float text_y = y0 + (y1 - y0 - font_size) / 2;

  std::size_t i = lane.first_visible(static_cast<SimTime>(std::floor(begin_)));
  std::size_t per_pixel = 1;  // ops a folded pixel held last: the guess for the next jump
  while (i < n) {
    const TimelineItem& item = items[i];
    if (static_cast<double>(item.begin) >= end_) break;
    if (static_cast<double>(item.end) <= begin_) {  // over before the view (only where items overlap)
      ++i;
      continue;
    }
    const double x0 = px(item.begin), x1 = px(item.end);
    if (x1 - x0 >= kMinItemPixels) {  // wide enough to be itself
      const float l = area.x0 + clamp_pixels(x0, width), r = area.x0 + clamp_pixels(x1, width);
      const float shown = r - l >= 3 ? r - 1 : r;  // a pixel's gap to the next op
      const ImU32 color = category_color(item.category);
      dl.AddRectFilled(ImVec2(l, top), ImVec2(shown, bottom), color);
      if (shown - std::max(l, area.x0) >= kLabelMinPixels) {
        char text[256];
        const int len = item_label(store, item, text, sizeof text);
        const float tl = std::max(l, area.x0);
        const ImVec4 clip(tl + 1, top, std::min(shown, area.x1) - 1, bottom);
        dl.AddText(font, font_size, ImVec2(tl + 3, text_y), text_on(color), text, text + len, 0.0f, &clip);
      }
      if (mouse >= x0 && mouse < x1) hovered_ = std::pair(lane_index, i);
      ++stats_.items_drawn;
      ++i;
      continue;
    }
    // Narrower than a pixel: a block of every op that begins in its pixel, grown a pixel at a time while
    // the next op is narrow too and begins in the very next pixel. Its ops are skipped, not visited.
    double cell_end = std::floor(x0) + 1;
    std::size_t j = i + 1;
    for (;;) {
      const double edge = std::min(begin_ + cell_end / scale, end_);  // no further than the view
      // The next pixel likely holds as many ops as the last one: search from there (an exact search).
      const std::size_t found = lane.first_beginning_at(static_cast<SimTime>(std::ceil(edge)), j + per_pixel);
      if (found > j) per_pixel = found - j;
      j = std::max(j, found);
      if (j - 1 > i && !narrow(items[j - 1])) {  // the block's last op is wide: it is drawn as itself
        --j;
        break;
      }
      if (j >= n || static_cast<double>(items[j].begin) >= end_) break;
      const TimelineItem& next = items[j];
      const double nx0 = px(next.begin);
      if (nx0 >= cell_end + 1 || !narrow(next)) break;
      cell_end = std::max(cell_end + 1, std::floor(nx0) + 1);
    }
    const std::size_t count = j - i;
    const double bx1 = std::max(px(items[j - 1].end), x0 + 1);
    const float l = area.x0 + clamp_pixels(x0, width), r = area.x0 + clamp_pixels(bx1, width);
    if (count == 1) {
      dl.AddRectFilled(ImVec2(l, top), ImVec2(r, bottom), category_color(item.category));
      ++stats_.items_drawn;
      if (mouse >= x0 && mouse < bx1) hovered_ = std::pair(lane_index, i);
    } else {
      dl.AddRectFilled(ImVec2(l, top), ImVec2(r, bottom), kFoldedColor);
      ++stats_.folded_blocks;
      stats_.items_folded += count;
      if (mouse >= x0 && mouse < bx1)
        hovered_fold_ = FoldedBlock{.lane = lane_index, .first = i, .count = count, .begin = item.begin,
                                    .end = items[j - 1].end};
    }
    i = j;
  }
}

// [Note: what an op waited for]
// An op that started late on its stream often waited for another: a stream waited for an event (a compute op for
// the gather of its parameters, a reduce-scatter for the gradient it reduces), or the caching allocator handed its
// stream a block freed on another stream and made it wait for that free (WaitReason). The trace lists these as the
// op's dependencies, and the tooltip names them. While an op is hovered, each one is also drawn: the op waited for
// framed, and an arrow from its end to the hovered op's begin. The program's own waits are drawn bright and the
// allocator's dim, since only the first are the student's to make or remove. A dependency on a lane out of sight
// (scrolled away or folded) or not yet in the trace is named in the tooltip only.
void TimelinePanel::draw_dependencies(const TraceStore& store, const Area& area, float rows_top, ImDrawList& dl) {
  if (!hovered_) return;
  // The middle of a lane's row, where its row is in sight.
  const auto row_of = [&](std::size_t lane_index) -> std::optional<std::pair<float, float>> {
    for (const Row& row : rows_) {
      if (row.kind != Row::lane || row.lane_index != lane_index) continue;
      const float y0 = rows_top + row.y, y1 = y0 + row.height;
      if (y1 <= area.top || y0 >= area.bottom) return std::nullopt;
      return std::pair(y0, y1);
    }
    return std::nullopt;  // folded away
  };
  const double scale = area.width() / (end_ - begin_);
  const auto x_at = [&](SimTime t) {
    return area.x0 + clamp_pixels((static_cast<double>(t) - begin_) * scale, area.width());
  };
  describe_hovered(store);
  const auto [lane_index, item_index] = *hovered_;
  const TimelineItem& item = store.lanes()[lane_index].items[item_index];
  const auto to_row = row_of(lane_index);
  if (!to_row) return;
  const ImVec2 to(x_at(item.begin), (to_row->first + to_row->second) / 2);
  for (const HoveredDependency& dep : hover_dependencies_) {
    const auto from_row = row_of(dep.lane);
    if (!from_row) continue;
    const TimelineItem& waited = store.lanes()[dep.lane].items[dep.item];
    const ImU32 color = dep.reason == WaitReason::event ? kEventWait : kFreedBlockWait;
    const ImVec2 from(x_at(waited.end), (from_row->first + from_row->second) / 2);
    dl.AddRect(ImVec2(x_at(waited.begin) - 1, from_row->first + 1), ImVec2(from.x + 1, from_row->second - 1), color,
               0.0f, 0, 1.5f);
    dl.AddLine(from, to, color, 1.5f);
    // The head, pointing along the line at the hovered op's begin.
    const float dx = to.x - from.x, dy = to.y - from.y, length = std::sqrt(dx * dx + dy * dy);
    if (length >= kArrowHead) {
      const float ux = dx / length, uy = dy / length;
      const ImVec2 base(to.x - ux * kArrowHead, to.y - uy * kArrowHead);
      dl.AddTriangleFilled(to, ImVec2(base.x - uy * kArrowHead / 2, base.y + ux * kArrowHead / 2),
                           ImVec2(base.x + uy * kArrowHead / 2, base.y - ux * kArrowHead / 2), color);
    }
    dependencies_drawn_.push_back(DependencyLine{.reason = dep.reason, .from = from, .to = to});
  }
}

// [Note: the race on the timeline]
// The sim device's race detector checks an op's accesses before the op runs, so a run it stops ends with two
// accesses to one buffer that no event orders: one made (by an op, or the host) and one that was about to be,
// whose op never ran. The run's ops end there, and a timeline that only drew what ran would just stop, leaving
// the Run panel's message to say what happened. So each access is drawn where it was, or would have been, on
// its rank's lane: the first framed in white over its op (a colour no op has: a red frame vanished on a red
// reduce-scatter), the second a see-through red box of its own, framed too, on a lane laid out for it even when
// none of that lane's ops came (a backward's first reduce-scatter), and a white line joins them. Both are at least
// kRaceMarkMinPixels wide, so a race stays in sight when its ops are folded into a pixel. Hovering either names the
// buffer, both accesses and the wait that is missing. The view jumps to the race when it comes, if it was following the
// run or still shows the races before it (a view the user placed stays); "Show the race" jumps again, to every run's.
void TimelinePanel::draw_races(const TraceStore& store, const Area& area, float rows_top, ImDrawList& dl,
                               bool pointing) {
  const double scale = area.width() / (end_ - begin_);
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  for (int s = 0; s < static_cast<int>(store.sources().size()); ++s) {
    const std::optional<RaceReport>& race = store.source(s).race;
    if (!race) continue;
    std::array<std::optional<RaceMarkRect>, 2> marks;  // earlier, later: where their lanes' rows are laid out
    for (const Row& row : rows_) {
      const TimelineLane& l = store.lanes()[row.lane_index];
      if (row.kind != Row::lane || l.source != s || l.rank != race->rank) continue;
      const float y0 = rows_top + row.y, y1 = y0 + row.height;
      if (y1 <= area.top || y0 >= area.bottom) continue;
      for (const bool later : {false, true}) {
        const Accessor& access = later ? race->later : race->earlier;
        if (access.lane != l.lane) continue;
        double x0 = (static_cast<double>(access.begin) - begin_) * scale;
        double x1 = (static_cast<double>(access.end) - begin_) * scale;
        if (x1 - x0 < kRaceMarkMinPixels) {
          const double mid = (x0 + x1) / 2;
          x0 = mid - kRaceMarkMinPixels / 2;
          x1 = mid + kRaceMarkMinPixels / 2;
        }
        if (x1 < 0 || x0 > area.width()) continue;  // outside the view
        marks[later ? 1 : 0] = RaceMarkRect{.source = s,
                                            .later = later,
                                            .min = ImVec2(area.x0 + clamp_pixels(x0, area.width()), y0 + 1),
                                            .max = ImVec2(area.x0 + clamp_pixels(x1, area.width()), y1 - 1)};
      }
    }
    const auto center = [](const RaceMarkRect& m) { return ImVec2((m.min.x + m.max.x) / 2, (m.min.y + m.max.y) / 2); };
    if (marks[0] && marks[1]) dl.AddLine(center(*marks[0]), center(*marks[1]), kRaceFrame, 1.5f);
    for (const auto& mark : marks) {
      if (!mark) continue;
      if (mark->later) {
        dl.AddRectFilled(mark->min, mark->max, kRaceFill);
        const std::string label = race->later.op == 0 ? "the host: stopped here" : "never ran: " + race->later.name;
        // Inside the box where it fits, else right of it on a dark backing: the op that never ran is often a short
        // one (an embedding of 2 us), and its name is what the student looks for.
        const float text_w = ImGui::CalcTextSize(label.c_str()).x;
        const float inside = std::min(mark->max.x, area.x1) - std::max(mark->min.x, area.x0) - 6;
        const float x = inside >= text_w ? std::max(mark->min.x, area.x0) + 3 : mark->max.x + 4;
        if (inside < text_w)
          dl.AddRectFilled(ImVec2(x - 2, mark->min.y), ImVec2(x + text_w + 2, mark->max.y), IM_COL32(20, 20, 24, 230));
        const ImVec4 clip(std::max(mark->min.x, area.x0), mark->min.y, area.x1, mark->max.y);
        dl.AddText(nullptr, 0.0f, ImVec2(x, mark->min.y + 1), kText, label.c_str(), label.c_str() + label.size(), 0.0f,
                   &clip);
      }
      dl.AddRect(mark->min, mark->max, kRaceFrame, 0.0f, 0, 2.0f);
      if (pointing && mouse.x >= mark->min.x - 2 && mouse.x < mark->max.x + 2 && mouse.y >= mark->min.y &&
          mouse.y < mark->max.y)
        hovered_race_ = s;
      race_marks_.push_back(*mark);
    }
  }
}

// ---- axis, selection, tooltips ----------------------------------------------------------------------------

void TimelinePanel::draw_axis(const Area& area, float left, float top, ImDrawList& dl) const {
  const float bottom = top + kAxisHeight;
  dl.PushClipRect(ImVec2(left, top), ImVec2(area.x1, bottom), true);
  dl.AddRectFilled(ImVec2(left, top), ImVec2(area.x1, bottom), kAxisBackground);
  const double span = end_ - begin_;
  const std::string label = "view " + format_duration(static_cast<SimTime>(std::llround(span)));
  dl.AddText(ImVec2(left + 4, top + 4), kDimText, label.c_str());
  dl.PopClipRect();

  dl.PushClipRect(ImVec2(area.x0, top), ImVec2(area.x1, bottom), true);
  const double step = tick_step(span / area.width());
  const double magnitude = std::max(std::abs(begin_), std::abs(end_));
  const double minor = step / 5;
  for_each_tick(std::ceil(begin_ / minor) * minor, minor, end_, area.width(), [&](double t) {
    const float x = area.x0 + static_cast<float>((t - begin_) / span * area.width());
    const bool major = std::abs(std::remainder(t, step)) < minor / 2;
    dl.AddLine(ImVec2(x, bottom - (major ? 8.0f : 3.0f)), ImVec2(x, bottom), kTick);
    if (major) dl.AddText(ImVec2(x + 3, top + 2), kText, format_tick(t, step, magnitude).c_str());
  });
  if (mouse_x_ >= 0) {  // the time under the cursor, to the nanosecond
    const double t = begin_ + static_cast<double>(mouse_x_ - area.x0) / area.width() * span;
    const std::string text = format_instant(static_cast<SimTime>(std::llround(t)));
    const ImVec2 size = ImGui::CalcTextSize(text.c_str());
    const float x = std::min(mouse_x_ + 2, area.x1 - size.x - 4);
    dl.AddRectFilled(ImVec2(x - 2, top + 1), ImVec2(x + size.x + 2, bottom - 1), IM_COL32(20, 20, 24, 255));
    dl.AddText(ImVec2(x, top + 3), kText, text.c_str());
  }
  dl.AddLine(ImVec2(area.x0, bottom - 1), ImVec2(area.x1, bottom - 1), kTick);
  dl.PopClipRect();
}

void TimelinePanel::draw_selection(const Area& area, ImDrawList& dl) const {
  if (!selection_) return;
  const double span = end_ - begin_;
  const auto x_of = [&](SimTime t) {
    return area.x0 + clamp_pixels((static_cast<double>(t) - begin_) / span * area.width(), area.width());
  };
  const float x0 = x_of(selection_->first), x1 = std::max(x_of(selection_->second), x0 + 1);
  dl.AddRectFilled(ImVec2(x0, area.top), ImVec2(x1, area.bottom), kSelectionColor);
  dl.AddLine(ImVec2(x0, area.top), ImVec2(x0, area.bottom), kSelectionEdge);
  dl.AddLine(ImVec2(x1, area.top), ImVec2(x1, area.bottom), kSelectionEdge);
  const std::string text = format_duration(selection_->second - selection_->first);
  const ImVec2 size = ImGui::CalcTextSize(text.c_str());
  const float cx = std::clamp((x0 + x1) / 2, area.x0 + size.x / 2 + 4, area.x1 - size.x / 2 - 4);
  dl.AddRectFilled(ImVec2(cx - size.x / 2 - 3, area.top + 2), ImVec2(cx + size.x / 2 + 3, area.top + size.y + 6),
                   IM_COL32(20, 20, 24, 230));
  dl.AddText(ImVec2(cx - size.x / 2, area.top + 4), kText, text.c_str());
}

// Built once per hovered op (finding a dependency may search a lane item by item), again while one of its
// dependencies has not arrived yet and the store has grown.
void TimelinePanel::describe_hovered(const TraceStore& store) {
  const auto [lane_index, item_index] = *hovered_;
  const TimelineLane& lane = store.lanes()[lane_index];
  const TimelineItem& item = lane.items[item_index];
  const HoverKey key{.lane = lane_index,
                     .item = item_index,
                     .lanes = store.lanes().size(),
                     .op = item.op,
                     .begin = item.begin,
                     .events = hover_unresolved_ ? store.event_count() : 0};
  if (key == hover_key_) return;
  hover_unresolved_ = false;
  hover_lines_.clear();
  hover_dependencies_.clear();
  const std::string phase(store.text(item.phase));
  hover_lines_.push_back(std::string(store.text(item.name)));
  hover_lines_.push_back("category: " + std::string(category_name(item.category)) + " (rank " +
                         std::to_string(lane.rank) + ", " + std::string(lane_name(lane.lane)) + " lane)");
  hover_lines_.push_back("unit: " + (item.unit >= 0 ? std::to_string(item.unit) : std::string("-")));
  hover_lines_.push_back("phase: " + (phase.empty() ? std::string("-") : phase));
  hover_lines_.push_back("step: " + (item.step >= 0 ? std::to_string(item.step) : std::string("-")));
  hover_lines_.push_back("bytes: " + format_bytes(item.bytes));
  if (item.link == RankLink::between_nodes) hover_lines_.push_back("link: between nodes (its group spans them)");
  hover_lines_.push_back("duration: " + format_duration(item.duration()));
  hover_lines_.push_back("begin: " + format_instant(item.begin));
  if (item.op != 0) hover_lines_.push_back("op: " + std::to_string(item.op));
  for (std::uint32_t d = item.deps_begin; d < item.deps_end; ++d) {
    const OpRef& dep = store.deps()[d];
    std::string line = "waited for rank " + std::to_string(dep.rank) + " op " + std::to_string(dep.op);
    const auto found = store.find_op(lane.source, dep.rank, dep.op);
    if (found) {
      line += " '" + std::string(store.text(store.lanes()[found->first].items[found->second].name)) + "'";
      hover_dependencies_.push_back({.reason = dep.reason, .lane = found->first, .item = found->second});
    } else {
      line += " (not in the trace)";
      hover_unresolved_ = true;
    }
    // Not a wait of the program's: see WaitReason.
    if (dep.reason == WaitReason::freed_block) line += " (the allocator's: this stream took a block freed after it)";
    hover_lines_.push_back(std::move(line));
  }
  hover_key_ = key;
  hover_key_.events = hover_unresolved_ ? store.event_count() : 0;
}

void TimelinePanel::show_tooltip(const TraceStore& store) {
  ImU32 color = ImGui::GetColorU32(ImGuiCol_Text);
  if (hovered_race_) {
    color = kFailedColor;
    tooltip_ = race_lines(*store.source(*hovered_race_).race);
  } else if (hovered_) {
    const auto [lane_index, item_index] = *hovered_;
    color = category_color(store.lanes()[lane_index].items[item_index].category);
    describe_hovered(store);
    tooltip_ = hover_lines_;
  } else if (hovered_fold_) {
    tooltip_.push_back(format_count(hovered_fold_->count) + " ops folded, zoom in");
    tooltip_.push_back("from " + format_instant(hovered_fold_->begin) + " for " +
                       format_duration(hovered_fold_->end - hovered_fold_->begin));
    tooltip_.push_back("double-click to zoom to them");
  } else {
    return;
  }
  ImGui::BeginTooltip();
  ImGui::PushStyleColor(ImGuiCol_Text, color);
  ImGui::TextUnformatted(tooltip_.front().c_str());
  ImGui::PopStyleColor();
  for (std::size_t k = 1; k < tooltip_.size(); ++k) ImGui::TextUnformatted(tooltip_[k].c_str());
  ImGui::EndTooltip();
}

}  // namespace fsdplab::app
