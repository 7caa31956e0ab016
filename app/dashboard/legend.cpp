#include "app/dashboard/legend.hpp"

#include <algorithm>

#include "app/dashboard/printable_text.hpp"

namespace fsdplab::app {

void legend_item(const std::string& name, const std::function<void(ImDrawList& dl, ImVec2 min, ImVec2 max)>& swatch) {
  const ImGuiStyle& style = ImGui::GetStyle();
  const float line = ImGui::GetTextLineHeight();
  const float swatch_space = kSwatchWidth + style.ItemInnerSpacing.x + style.ItemSpacing.x;
  const std::string whole = printable(name);
  const float width = ImGui::GetWindowContentRegionMax().x - ImGui::GetWindowContentRegionMin().x;
  const std::string shown = elided(whole, width - swatch_space);
  if (ImGui::GetContentRegionAvail().x < swatch_space + ImGui::CalcTextSize(shown.c_str()).x) ImGui::NewLine();
  const ImVec2 at = ImGui::GetCursorScreenPos();
  swatch(*ImGui::GetWindowDrawList(), at, ImVec2(at.x + kSwatchWidth, at.y + line));
  ImGui::Dummy(ImVec2(kSwatchWidth, line));
  ImGui::SameLine(0, style.ItemInnerSpacing.x);
  ImGui::TextUnformatted(shown.c_str());
  if (shown != whole && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", whole.c_str());
  ImGui::SameLine();
}

void dashed_hline(ImDrawList& dl, float x0, float x1, float y, ImU32 color, float thickness) {
  constexpr float kDash = 6, kGap = 4;
  for (float x = x0; x < x1; x += kDash + kGap) dl.AddLine({x, y}, {std::min(x + kDash, x1), y}, color, thickness);
}

}  // namespace fsdplab::app
