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

void refuse_empty_values(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_type_size_min() <= 0) continue;  // a flag
    try {
      (void)option->get_validator(kNonEmpty);
      continue;  // its own words
    } catch (const CLI::OptionNotFound&) {
    }
    const std::string type = option->get_type_name();
    const char* expected = type.starts_with("INT") || type.starts_with("UINT") ? "a whole number"
                           : type.starts_with("FLOAT")                         ? "a number"
                                                                               : "a value";
    option->transform(non_empty(expected));  // transform: first, before a range check reads the empty text
  }
  for (CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) refuse_empty_values(*command);
}

}  // namespace fsdplab::app
