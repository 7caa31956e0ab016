// legend.hpp — a legend's entry, as every panel draws one: a swatch a text line high and kSwatchWidth wide, then
// its name, after the entry before it on the line, or on the next line where the panel has no room left. A name
// wider than the panel is elided, whole in its tooltip (a remote run's long name).
#pragma once
#include <imgui.h>

#include <functional>
#include <string>

namespace fsdplab::app {

constexpr float kSwatchWidth = 14;

// Draws the entry at the cursor and leaves the cursor after it on the same line (ImGui::SameLine): the legend's
// last entry is followed by ImGui::NewLine(). `swatch` draws into [min, max], the swatch's box.
void legend_item(const std::string& name, const std::function<void(ImDrawList& dl, ImVec2 min, ImVec2 max)>& swatch);

// A dashed line from x0 to x1 at y: how the panels draw a level the data is held against (the memory panel's
// expected peak, the step-time panel's ideal, compute and comm lines), and its swatch in their legends.
void dashed_hline(ImDrawList& dl, float x0, float x1, float y, ImU32 color, float thickness);

}  // namespace fsdplab::app
