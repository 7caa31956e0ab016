// printable_text.hpp — text for the dashboard's font. The default ImGui font has Latin-1 only, and the
// engine's messages use a few characters beyond it (an em dash in the lab skeletons' TODO message, the
// arrow of step-through, eta in the step-time summary): where the current font lacks a glyph, its ASCII
// stand-in is drawn instead of '?'.
#pragma once
#include <string>

namespace fsdplab::app {

std::string printable(std::string text);

}  // namespace fsdplab::app
