// markdown_table.hpp — how `fsdplab report` writes Markdown: tables with aligned columns, numbers
// formatted printf-style, and the command a table comes from as a fenced block above it.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace fsdplab::app {

// printf into a std::string.
[[gnu::format(printf, 1, 2)]] std::string format(const char* pattern, ...);

class MarkdownTable {
 public:
  enum class Align { left, right };
  // One header cell per column; numbers read best right-aligned, so every column but the first is by default.
  explicit MarkdownTable(std::vector<std::string> header);
  MarkdownTable(std::vector<std::string> header, std::vector<Align> align);

  // A row of exactly as many cells as the header has; '|' and line breaks inside a cell are escaped.
  void add_row(std::vector<std::string> cells);
  std::size_t rows() const { return rows_.size(); }

  // The table, each column padded to its widest cell, ending with a newline.
  std::string str() const;

 private:
  std::vector<std::string> header_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;
};

// A fenced ```bash block of `commands`, one a line: the commands that regenerate what follows it.
std::string command_block(const std::vector<std::string>& commands);

}  // namespace fsdplab::app
