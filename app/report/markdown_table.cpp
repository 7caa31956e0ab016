#include "app/report/markdown_table.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <utility>

#include "engine/runtime/error.hpp"

namespace fsdplab::app {
namespace {

std::string escape_cell(const std::string& cell) {
  std::string out;
  for (char c : cell) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n') {
      out += "<br>";
    } else {
      out += c;
    }
  }
  return out;
}

// Display width: UTF-8 continuation bytes take no column.
std::size_t width(const std::string& s) {
  return static_cast<std::size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

}  // namespace

std::string format(const char* pattern, ...) {
  va_list args;
  va_start(args, pattern);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, pattern, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, pattern, args);
  va_end(args);
  return out;
}

MarkdownTable::MarkdownTable(std::vector<std::string> header) : header_(std::move(header)) {
  align_.assign(header_.size(), Align::right);
  if (!align_.empty()) align_.front() = Align::left;
}

MarkdownTable::MarkdownTable(std::vector<std::string> header, std::vector<Align> align)
    : header_(std::move(header)), align_(std::move(align)) {
  check(align_.size() == header_.size(), "MarkdownTable: ", header_.size(), " columns but ", align_.size(),
        " alignments");
}

void MarkdownTable::add_row(std::vector<std::string> cells) {
  check(cells.size() == header_.size(), "MarkdownTable: a row of ", cells.size(), " cells in a table of ",
        header_.size(), " columns");
  for (std::string& c : cells) c = escape_cell(c);
  rows_.push_back(std::move(cells));
}

std::string MarkdownTable::str() const {
  std::vector<std::size_t> widths;
  for (const std::string& h : header_) widths.push_back(std::max<std::size_t>(3, width(escape_cell(h))));
  for (const auto& row : rows_)
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], width(row[i]));
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string out = "|";
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const std::string pad(widths[i] - width(cells[i]), ' ');
      out += " " + (align_[i] == Align::right ? pad + cells[i] : cells[i] + pad) + " |";
    }
    return out + "\n";
  };
  std::vector<std::string> header;
  for (const std::string& h : header_) header.push_back(escape_cell(h));
  std::string out = line(header);
  out += "|";
  for (std::size_t i = 0; i < widths.size(); ++i)
    out += align_[i] == Align::right ? " " + std::string(widths[i] - 1, '-') + ": |"
                                     : " " + std::string(widths[i], '-') + " |";
  out += "\n";
  for (const auto& row : rows_) out += line(row);
  return out;
}

std::string command_block(const std::vector<std::string>& commands) {
  std::string out = "```bash\n";
  for (const std::string& c : commands) out += c + "\n";
  return out + "```\n";
}

}  // namespace fsdplab::app
