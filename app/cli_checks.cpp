#include "app/cli_checks.hpp"

#include <cmath>
#include <cstdlib>

namespace fsdplab::app {

CLI::Validator finite_range(double low, double high, const std::string& what) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0' || !std::isfinite(value) || value < low || value > high)
          return text + " is not " + what + " from " + CLI::detail::to_string(low) + " to " +
                 CLI::detail::to_string(high);
        return "";
      },
      "FINITE in [" + CLI::detail::to_string(low) + ", " + CLI::detail::to_string(high) + "]");
}

namespace {
constexpr const char* kNonEmpty = "non_empty";
}  // namespace

CLI::Validator non_empty(const std::string& expected) {
  // No description: it would add a word to the help of every path option, and the help says what each takes.
  CLI::Validator check(
      [=](std::string& text) -> std::string { return text.empty() ? "an empty value; expected " + expected : ""; }, "");
  check.name(kNonEmpty);
  return check;
}

namespace {

enum class ValueKind { whole, non_negative_whole, number, other };

ValueKind kind_of(const CLI::Option& option) {
  const std::string type = option.get_type_name();  // "INT", "UINT:INT in [1 - 9]", "FLOAT", "TEXT", ...
  if (type.starts_with("UINT")) return ValueKind::non_negative_whole;
  if (type.starts_with("INT")) return ValueKind::whole;
  if (type.starts_with("FLOAT")) return ValueKind::number;
  return ValueKind::other;
}

// "" when `text` reads as a value of `kind`, else what is wrong with it.
std::string unreadable(const std::string& text, ValueKind kind) {
  switch (kind) {
    case ValueKind::whole:
    case ValueKind::non_negative_whole: {
      const std::string signs = kind == ValueKind::whole ? "+-" : "+";
      const std::size_t digits = !text.empty() && signs.find(text[0]) != std::string::npos ? 1 : 0;
      if (text.size() > digits && text.find_first_not_of("0123456789", digits) == std::string::npos) return "";
      return text + " is not a whole number" + (kind == ValueKind::whole ? "" : " >= 0");
    }
    case ValueKind::number: {
      char* end = nullptr;
      const double value = std::strtod(text.c_str(), &end);
      return end != text.c_str() && *end == '\0' && std::isfinite(value) ? "" : text + " is not a finite number";
    }
    case ValueKind::other:
      return "";
  }
  return "";
}

}  // namespace

void refuse_unreadable_values(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_type_size_min() <= 0) continue;  // a flag
    bool own_words = false;                          // its own non_empty says what to give
    try {
      (void)option->get_validator(kNonEmpty);
      own_words = true;
    } catch (const CLI::OptionNotFound&) {
    }
    const ValueKind kind = kind_of(*option);
    const std::string expected = kind == ValueKind::number  ? "a number"
                                 : kind == ValueKind::other ? "a value"
                                                            : "a whole number";
    // transform: first, before a range check or the conversion reads the text.
    option->transform(CLI::Validator(
        [=](std::string& text) -> std::string {
          if (text.empty()) return own_words ? "" : "an empty value; expected " + expected;
          return unreadable(text, kind);
        },
        ""));
  }
  for (CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) refuse_unreadable_values(*command);
}

}  // namespace fsdplab::app
