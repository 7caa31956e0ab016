// printable_text.hpp — text for the dashboard's font and its panels' widths. The default ImGui font has
// Latin-1 only, and the engine's messages use a few characters beyond it (an em dash in the lab skeletons'
// TODO message, the arrow of step-through, eta in the step-time summary): where the current font lacks a
// glyph, its ASCII stand-in is drawn instead of '?'.
//
// Text that may not fit is fitted on purpose, never cut at the panel's edge: elided() shortens one line with
// "..." (the panels show the whole text in a tooltip), text_wrapped_at_spaces() breaks only between words.
// ImGui's own TextWrapped also breaks after '.' and ',', which splits a number such as 0.941 over two lines.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace fsdplab::app {

std::string printable(std::string text);

// Which end of a text elided() drops: the end (a label read from its start) or the front (a dotted module
// path such as "model.layers.0.self_attn.q_proj", whose tail tells its rows apart).
enum class Elide { end, front };

// `text` where it fits in `width` pixels of the current font; else as much of it as fits beside "...", cut
// between UTF-8 characters, at the end or the front; "" where not even "..." fits.
std::string elided(std::string_view text, float width, Elide where = Elide::end);

// ImGui::TextUnformatted of elided(text, width), with the whole text as a tooltip when it was shortened.
void text_elided(const std::string& text, float width, Elide where = Elide::end);

// elided(text) to fit the preview of a combo box as wide as the next item (ImGui::CalcItemWidth()), beside its
// arrow button: ImGui would cut it at the arrow, mid-word.
std::string combo_preview(const std::string& text);

// `text` with its spaces made no-break spaces (U+00A0, in the default font's Latin-1 range): a value and its
// unit ("22.6 MB") that lines_at_spaces keeps on one line.
std::string unbroken(const std::string& text);

// `text` in lines of at most `width` pixels of the current font, broken at spaces (and at '\n') only: a
// word wider than a line is a line of its own.
std::vector<std::string> lines_at_spaces(std::string_view text, float width);

// lines_at_spaces(text, width) drawn in the current text colour, `width` 0 meaning the content region's
// (a tooltip, which sizes itself to its text, needs a width); a word wider than a line alone is wrapped by
// ImGui, mid-word. Returns the lines drawn.
std::vector<std::string> text_wrapped_at_spaces(std::string_view text, float width = 0);

// text_wrapped_at_spaces(text, width), then empty lines up to as many as `longest` takes at that width: a text
// that changes as the runs go (a run's state and step, the keys' hint) keeps what is below it in its place, so
// that a click aimed at a widget from the frame before lands on it. `longest` is the longest the text can be.
void text_wrapped_holding_lines(std::string_view text, std::string_view longest, float width = 0);

}  // namespace fsdplab::app
