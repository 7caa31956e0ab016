#include "grader/reference_use.hpp"

#include <algorithm>
#include <cctype>
#include <regex>

#include "engine/fsdp/fsdp_tasks.hpp"

namespace fsdplab::grading {

std::string code_only(std::string_view source) {
  std::string code(source);
  const std::size_t n = source.size();
  // Blanks [from, to) of the code but its newlines.
  const auto blank = [&](std::size_t from, std::size_t to) {
    for (std::size_t k = from; k < std::min(to, n); ++k)
      if (code[k] != '\n') code[k] = ' ';
  };
  std::size_t i = 0;
  while (i < n) {
    const char c = source[i];
    const char next = i + 1 < n ? source[i + 1] : '\0';
    if (c == '/' && next == '/') {
      const std::size_t end = source.find('\n', i);
      blank(i, end == std::string_view::npos ? n : end);
      i = end == std::string_view::npos ? n : end;
    } else if (c == '/' && next == '*') {
      const std::size_t end = source.find("*/", i + 2);
      const std::size_t stop = end == std::string_view::npos ? n : end + 2;
      blank(i, stop);
      i = stop;
    } else if (c == 'R' && next == '"' &&
               (i == 0 || !(std::isalnum(static_cast<unsigned char>(source[i - 1])) || source[i - 1] == '_'))) {
      // R"delimiter( ... )delimiter"
      const std::size_t open = source.find('(', i + 2);
      const std::string close =
          open == std::string_view::npos ? "" : ")" + std::string(source.substr(i + 2, open - i - 2)) + "\"";
      const std::size_t end = open == std::string_view::npos ? std::string_view::npos : source.find(close, open + 1);
      const std::size_t stop = end == std::string_view::npos ? n : end + close.size();
      blank(i, stop);
      i = stop;
    } else if (c == '"' || c == '\'') {
      std::size_t k = i + 1;
      while (k < n && source[k] != c && source[k] != '\n') k += source[k] == '\\' ? 2 : 1;
      const std::size_t stop = std::min(k + 1, n);
      blank(i, stop);
      i = stop;
    } else {
      ++i;
    }
  }
  return code;
}

std::optional<std::string> names_its_reference(int task, std::string_view source) {
  const std::string code = code_only(source);
  const std::regex reference("\\b(" + std::string(task_info(task).reference) + "|reference_tasks)\\b");
  std::smatch found;
  if (!std::regex_search(code, found, reference)) return std::nullopt;
  const auto line = 1 + std::count(code.begin(), code.begin() + found.position(0), '\n');
  return "line " + std::to_string(line) + " names " + found.str(1) + "()";
}

}  // namespace fsdplab::grading
