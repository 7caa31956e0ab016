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

CLI::Validator non_empty(const std::string& expected) {
  // No description: it would add a word to the help of every path option, and the help says what each takes.
  return CLI::Validator(
      [=](std::string& text) -> std::string { return text.empty() ? "an empty value; expected " + expected : ""; }, "");
}

}  // namespace fsdplab::app
