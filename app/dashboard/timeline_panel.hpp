// timeline_panel.hpp — the dashboard's timeline: every rank's streams as lanes of ops against time, in the
// manner of Tracy and Perfetto.
//
// Layout: a toolbar (Follow, Fit, the view's span and the selection), a legend of the ops' colours by category
// (palette.hpp) and the folded blocks', a time axis pinned at the top, then
// per source (SYNC, ASYNC, a file) a header, per rank a header, and one lane per stream that has ops. Lane
// labels sit in a fixed column at the left; only the time area right of it zooms and pans. Clicking a
// source or rank header folds its lanes away. Lanes that would not fit the panel get shorter, to a line of text.
//
// Input: the wheel zooms around the time under the cursor (100 ns visible at the closest, the whole trace
// and a margin at the farthest); a left drag pans (and scrolls the lanes vertically); a right drag, or a
// shift + left drag, measures a span; a right click clears it; a double click on a folded block zooms to
// it. Any zoom or pan stops following; the Follow box, or the End key, resumes it; Fit (or Home) shows the
// whole trace and keeps showing it as it grows.
//
// Level of detail, what keeps a frame O(pixels × log n) per lane: each lane is walked from the first item
// still running at the view's begin (TimelineLane::first_visible). An item at least a pixel wide is drawn
// (and labelled inside when there is room); an item narrower than a pixel starts a folded block, which
// swallows every item that begins in the same pixel and grows a pixel at a time while the next item is
// also narrower than a pixel and begins in the very next pixel. The items a block swallows are never
// visited: the walk jumps to the first item beginning at the block's next pixel boundary
// (TimelineLane::first_beginning_at: a search galloping from where the last pixel's jump landed). A block of one item
// is drawn as that item, in its colour, a pixel wide; a block of several in kFoldedColor, its count in its tooltip.
// Streams run one op at a time, so their lanes never overlap; in a lane whose items do (a replayed file's host
// markers), a long item that begins inside a folded pixel is hidden behind the block unless it is the block's last.
//
// Hovering an op draws what it waited for: an arrow from each op it depends on ([Note: what an op waited for]).
// A run the sim device's race detector stopped has its race marked on its lanes ([Note: the race on the
// timeline] in timeline_panel.cpp); "Show the race" in the toolbar zooms to it.
//
// Everything is drawn with ImDrawList rectangles and clipped text, not one widget per op; the one widget
// is an invisible button over the lanes that takes the mouse.
#pragma once
#include <imgui.h>

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "app/dashboard/trace_store.hpp"

namespace fsdplab::app {

struct TimelineStats {
  int lanes = 0;                   // lanes drawn (laid out and at least partly scrolled into sight)
  std::size_t items_drawn = 0;     // ops drawn as themselves
  std::size_t folded_blocks = 0;   // blocks of several ops narrower than a pixel
  std::size_t items_folded = 0;    // ops inside those blocks
};

// Where a lane was drawn this frame: its time area (right of the label column) × its row, in screen pixels.
struct LaneRect {
  int source = 0;
  int rank = 0;
  Lane lane = Lane::compute;
  ImVec2 min;
  ImVec2 max;
};

// A folded block under the mouse: items [first, first + count) of store.lanes()[lane].
struct FoldedBlock {
  std::size_t lane = 0;
  std::size_t first = 0;
  std::size_t count = 0;
  SimTime begin = 0;
  SimTime end = 0;
};

// A dependency of the hovered op, as drawn this frame: an arrow from the end of the op it waited for to its begin,
// in screen pixels ([Note: what an op waited for] in timeline_panel.cpp).
struct DependencyLine {
  WaitReason reason = WaitReason::event;
  ImVec2 from;
  ImVec2 to;
};

// One access of a race, as marked this frame: in screen pixels.
struct RaceMarkRect {
  int source = 0;
  bool later = false;  // the access the detector stopped (its op never ran), else the one before it
  ImVec2 min;
  ImVec2 max;
};

class TimelinePanel {
 public:
  // The closest zoom: this much time across the time area.
  static constexpr double kMinSpan = 100;  // ns
  // A lane's height, and the least it shrinks to where the rows would not fit the panel (layout).
  static constexpr float kLaneHeight = 20;
  static constexpr float kMinLaneHeight = 11;  // still a line of the default font's glyphs

  // Draws every lane of `store` into a child region filling the rest of the current window (or `size`).
  void draw(const TraceStore& store, ImVec2 size = ImVec2(0, 0));

  // Following: the view keeps its width and slides so that it ends at store.last_time() (or, after Fit,
  // shows the whole trace as it grows). A zoom or pan stops it.
  bool following() const { return following_; }
  void set_following(bool on) { following_ = on; }

  SimTime view_begin() const;
  SimTime view_end() const;
  // Places the view (at least kMinSpan wide) and stops following.
  void set_view(SimTime begin, SimTime end);
  // Shows the whole trace from the next frame on, and keeps showing it while it grows (following).
  void fit();
  // Places the view around every source's race, their accesses and as much again either side; false where no
  // source has one.
  bool show_race(const TraceStore& store);

  // The span measured by a right drag (or shift + left drag), ordered; none after a right click.
  std::optional<std::pair<SimTime, SimTime>> selection() const { return selection_; }

  const TimelineStats& stats() const { return stats_; }
  const std::vector<LaneRect>& lanes_drawn() const { return lanes_drawn_; }
  // The hovered op's dependencies drawn in the last frame (those on lanes in sight).
  const std::vector<DependencyLine>& dependencies_drawn() const { return dependencies_drawn_; }
  // The races' accesses marked in the last frame (those on lanes in sight and not folded away).
  const std::vector<RaceMarkRect>& race_marks() const { return race_marks_; }
  // The op under the mouse in the last frame: (index in store.lanes(), index in its items).
  std::optional<std::pair<std::size_t, std::size_t>> hovered() const { return hovered_; }
  // The folded block under the mouse in the last frame.
  std::optional<FoldedBlock> hovered_fold() const { return hovered_fold_; }
  // The lines of the tooltip shown in the last frame (empty when none).
  const std::vector<std::string>& tooltip() const { return tooltip_; }
  // The legend's names, in the order the last frame drew them.
  const std::vector<std::string>& legend() const { return legend_; }

 private:
  struct Row {
    enum Kind { source_header, rank_header, lane } kind = lane;
    std::size_t lane_index = 0;  // in store.lanes(): the lane, or the first lane of the header's group
    float y = 0;                 // offset from the top of the lanes' content
    float height = 0;
  };
  struct Drag {
    bool active = false;
    bool select = false;
    bool moved = false;
    float x = 0, y = 0;        // where the button went down
    double begin = 0;          // the view's begin then
    float scroll = 0;          // the vertical scroll then
    double time = 0;           // the time under the mouse then
  };
  struct Area {  // the time area of this frame, screen pixels
    float x0 = 0, x1 = 0;      // left and right edges
    float top = 0, bottom = 0; // the lanes' visible extent (below the axis)
    double width() const { return static_cast<double>(x1 - x0); }
  };

  void update_follow(const TraceStore& store);
  void layout(const TraceStore& store, float height);
  void handle_input(const TraceStore& store, const Area& area, bool hovered);
  void zoom_at(double factor, double x, const Area& area, const TraceStore& store);
  void draw_lane(const TraceStore& store, std::size_t lane_index, const Area& area, float y0, float y1,
                 ImDrawList& dl, bool mouse_in_row);
  void draw_axis(const Area& area, float left, float top, ImDrawList& dl) const;
  void draw_selection(const Area& area, ImDrawList& dl) const;
  void draw_dependencies(const TraceStore& store, const Area& area, float rows_top, ImDrawList& dl);
  void draw_races(const TraceStore& store, const Area& area, float rows_top, ImDrawList& dl, bool pointing);
  void show_tooltip(const TraceStore& store);
  double time_at(float x, const Area& area) const;
  double max_span(const TraceStore& store) const;

  double begin_ = 0, end_ = 1e6;  // the view, ns (doubles: zooming needs sub-ns steps)
  bool following_ = true;
  bool fit_ = true;               // while following: show the whole trace rather than slide
  std::optional<std::pair<SimTime, SimTime>> selection_;
  Drag drag_;
  std::set<int> folded_sources_;
  std::set<std::pair<int, int>> folded_ranks_;

  std::vector<Row> rows_;
  float content_height_ = 0;
  float lane_height_ = kLaneHeight;  // layout()'s: it shrinks while a run adds lanes, never grows back by itself
  TimelineStats stats_;
  std::vector<LaneRect> lanes_drawn_;
  std::vector<DependencyLine> dependencies_drawn_;
  std::vector<RaceMarkRect> race_marks_;
  std::optional<int> hovered_race_;  // the source whose race mark is under the mouse
  int races_seen_ = 0;               // the sources with a race last frame: each zoomed to as it came
  std::pair<double, double> race_view_{-1, -1};  // the view show_race last set
  std::optional<std::pair<std::size_t, std::size_t>> hovered_;
  std::optional<FoldedBlock> hovered_fold_;
  std::vector<std::string> tooltip_;
  std::vector<std::string> legend_;
  // The hovered op's tooltip lines and the dependencies found in the store, built once per hovered op (finding a
  // dependency may search a lane): describe_hovered.
  struct HoverKey {
    std::size_t lane = ~std::size_t{0}, item = 0, lanes = 0;
    OpId op = 0;
    SimTime begin = 0;
    std::size_t events = 0;  // the store's size when a dependency was missing, else 0
    bool operator==(const HoverKey&) const = default;
  };
  struct HoveredDependency {
    WaitReason reason = WaitReason::event;
    std::size_t lane = 0, item = 0;  // the op waited for, in store.lanes()
  };
  void describe_hovered(const TraceStore& store);
  HoverKey hover_key_;
  bool hover_unresolved_ = false;
  std::vector<std::string> hover_lines_;
  std::vector<HoveredDependency> hover_dependencies_;
  float mouse_x_ = -1;  // for the cursor line and its time on the axis; < 0 when not over the lanes
};

}  // namespace fsdplab::app
