// shell_quote.hpp — a word as a POSIX shell reads it back: how every command fsdplab prints for a person to paste
// (the report's command blocks, the dashboard's hints and replay lines, the grader's "see it") quotes its paths.
#pragma once
#include <string>

namespace fsdplab::app {

// A shell word: as it is where it needs no quoting, else in single quotes.
std::string shell_quote(const std::string& word);

}  // namespace fsdplab::app
