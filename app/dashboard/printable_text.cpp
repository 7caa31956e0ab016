#include "app/dashboard/printable_text.hpp"

#include <imgui.h>

#include <algorithm>
#include <vector>

namespace fsdplab::app {

std::string printable(std::string text) {
  struct Swap {
    ImWchar glyph;
    const char* utf8;
    const char* ascii;
  };
  static constexpr Swap kSwaps[] = {{0x03B7, "\u03B7", "eta"}, {0x2264, "\u2264", "<="}, {0x2013, "\u2013", "-"},
                                    {0x2212, "\u2212", "-"},   {0x2014, "\u2014", "--"}, {0x2190, "\u2190", "<-"},
                                    {0x2192, "\u2192", "->"}};
  ImFont* font = ImGui::GetFont();
  for (const Swap& s : kSwaps) {
    if (font && font->FindGlyphNoFallback(s.glyph)) continue;
    const std::string from = s.utf8;
    for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at))
      text.replace(at, from.size(), s.ascii);
  }
  return text;
}

namespace {

float width_of(std::string_view text) { return ImGui::CalcTextSize(text.data(), text.data() + text.size()).x; }

// A byte that continues a UTF-8 character: no cut goes before it.
bool continues_character(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// One paragraph (no '\n') of lines_at_spaces(), appended to `lines`.
void wrap_paragraph(std::string_view text, float width, std::vector<std::string>& lines) {
  if (text.empty()) lines.emplace_back();  // a blank line keeps its height
  while (!text.empty()) {
    std::size_t line_end = 0;  // the line is text[0, line_end): whole words, at least one
    for (std::size_t space = text.find(' ');; space = text.find(' ', space + 1)) {
      const std::size_t word_end = space == std::string_view::npos ? text.size() : space;
      if (line_end > 0 && width_of(text.substr(0, word_end)) > width) break;
      line_end = word_end;
      if (space == std::string_view::npos) break;
    }
    lines.emplace_back(text.substr(0, line_end));
    text.remove_prefix(line_end);
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);  // the break between two lines
  }
}

}  // namespace

std::string elided(std::string_view text, float width, Elide where) {
  if (width_of(text) <= width) return std::string(text);
  constexpr std::string_view kEllipsis = "...";
  const float room = width - width_of(kEllipsis);
  if (room < 0) return "";
  const auto part = [&](std::size_t bytes) {
    return where == Elide::end ? text.substr(0, bytes) : text.substr(text.size() - bytes);
  };
  // The most bytes that fit (widths grow with length), then back to a character's first byte.
  std::size_t fits = 0, over = text.size();
  while (over - fits > 1) {
    const std::size_t mid = fits + (over - fits) / 2;
    (width_of(part(mid)) <= room ? fits : over) = mid;
  }
  const auto cut = [&] { return where == Elide::end ? text[fits] : text[text.size() - fits]; };
  while (fits > 0 && fits < text.size() && continues_character(cut())) --fits;
  return where == Elide::end ? std::string(part(fits)) + std::string(kEllipsis)
                             : std::string(kEllipsis) + std::string(part(fits));
}

void text_elided(const std::string& text, float width, Elide where) {
  const std::string shown = elided(text, width, where);
  ImGui::TextUnformatted(shown.c_str());
  if (shown != text && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", text.c_str());
}

std::string combo_preview(const std::string& text) {
  const ImGuiStyle& style = ImGui::GetStyle();
  return elided(text, ImGui::CalcItemWidth() - ImGui::GetFrameHeight() - style.FramePadding.x * 2);
}

std::string unbroken(const std::string& text) {
  constexpr std::string_view kNoBreakSpace = "\u00A0";
  std::string out;
  for (const char c : text) {
    if (c == ' ')
      out += kNoBreakSpace;
    else
      out += c;
  }
  return out;
}

std::vector<std::string> lines_at_spaces(std::string_view text, float width) {
  std::vector<std::string> lines;
  for (std::size_t newline = text.find('\n'); newline != std::string_view::npos; newline = text.find('\n')) {
    wrap_paragraph(text.substr(0, newline), width, lines);
    text.remove_prefix(newline + 1);
  }
  wrap_paragraph(text, width, lines);
  return lines;
}

std::vector<std::string> text_wrapped_at_spaces(std::string_view text, float width) {
  if (width <= 0) width = std::max(ImGui::GetContentRegionAvail().x, 1.0f);
  std::vector<std::string> lines = lines_at_spaces(text, width);
  for (const std::string& line : lines) {
    const bool too_wide = width_of(line) > width;  // one word wider than the line
    if (too_wide) ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + width);
    ImGui::TextUnformatted(line.c_str());
    if (too_wide) ImGui::PopTextWrapPos();
  }
  return lines;
}

void text_wrapped_holding_lines(std::string_view text, std::string_view longest, float width) {
  if (width <= 0) width = std::max(ImGui::GetContentRegionAvail().x, 1.0f);
  const std::size_t longest_lines = lines_at_spaces(longest, width).size();
  for (std::size_t shown = text_wrapped_at_spaces(text, width).size(); shown < longest_lines; ++shown)
    ImGui::TextUnformatted("");
}

}  // namespace fsdplab::app
