#include "app/dashboard/printable_text.hpp"

#include <imgui.h>

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

}  // namespace fsdplab::app
