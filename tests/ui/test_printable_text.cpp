// The text helpers the dashboard's panels fit their text with, headless: elided() at either end, whole
// characters kept, and lines_at_spaces(), which never breaks a number as ImGui's own wrap does.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "app/dashboard/headless_imgui.hpp"
#include "app/dashboard/printable_text.hpp"

namespace fsdplab::app {
namespace {

TEST(FittedText, ElidesAtEitherEndToFitAndKeepsWholeCharacters) {
  HeadlessImGui ui;
  ui.new_frame();
  const std::string name = "model.layers.0.self_attn.q_proj";
  const float whole = ImGui::CalcTextSize(name.c_str()).x;
  EXPECT_EQ(elided(name, whole), name);
  const std::string front = elided(name, whole / 2, Elide::front);
  EXPECT_LE(ImGui::CalcTextSize(front.c_str()).x, whole / 2);
  EXPECT_EQ(front.substr(0, 3), "...");
  EXPECT_EQ(name.substr(name.size() - (front.size() - 3)), front.substr(3));
  const std::string end = elided(name, whole / 2);
  EXPECT_LE(ImGui::CalcTextSize(end.c_str()).x, whole / 2);
  EXPECT_EQ(end.substr(end.size() - 3), "...");
  EXPECT_EQ(name.substr(0, end.size() - 3), end.substr(0, end.size() - 3));
  EXPECT_EQ(elided(name, 1), "");  // not even "..." fits
  // A value and its unit stay together: the no-break space is in the font, as wide as a space.
  ASSERT_NE(ImGui::GetFont()->FindGlyphNoFallback(0x00A0), nullptr);
  EXPECT_EQ(ImGui::CalcTextSize(unbroken("22.6 MB").c_str()).x, ImGui::CalcTextSize("22.6 MB").x);
  EXPECT_EQ(lines_at_spaces("scale: " + unbroken("22.6 MB"), ImGui::CalcTextSize("scale: 22.6").x).size(), 2u);
  // Two-byte characters are kept or dropped whole, never halved.
  const std::string accented = "\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9";  // 8 x e-acute
  for (float w = 0; w < ImGui::CalcTextSize(accented.c_str()).x; w += 1)
    for (Elide where : {Elide::end, Elide::front}) {
      const std::string e = elided(accented, w, where);
      const std::string kept = e.empty() ? "" : where == Elide::end ? e.substr(0, e.size() - 3) : e.substr(3);
      EXPECT_EQ(kept.size() % 2, 0u) << "a character cut in two at " << w << " px";
    }
  ui.render();
}

TEST(FittedText, WrapsAtSpacesOnlyNeverInsideANumber) {
  HeadlessImGui ui;
  const std::string text =
      "eta = (T_sync - T_async) / (T_sync - ideal) = 0.941: overlap hides 94 % of what perfect "
      "overlap would (0.224 of 0.238 ms)";
  // ImGui's own wrap breaks after a '.', splitting 0.941; this one only between words, at every width.
  for (float width = 60; width < 500; width += 7) {
    ui.new_frame();
    ImGui::SetNextWindowPos(ImVec2(0, 0));
    ImGui::SetNextWindowSize(ImVec2(width + 16, 400));
    ImGui::Begin("text", nullptr, ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoSavedSettings);
    const std::vector<std::string> lines = lines_at_spaces(text, width);
    std::string joined;
    for (const std::string& line : lines) {
      EXPECT_TRUE(ImGui::CalcTextSize(line.c_str()).x <= width || line.find(' ') == std::string::npos)
          << "'" << line << "' is wider than " << width << " px";
      EXPECT_NE(line.back(), '.') << "a line broken after a dot at " << width << " px: " << line;
      joined += (joined.empty() ? "" : " ") + line;
    }
    EXPECT_EQ(joined, text) << "at " << width << " px";
    ImGui::End();
    ui.render();
  }
}

}  // namespace
}  // namespace fsdplab::app
