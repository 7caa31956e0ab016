// cli_checks.hpp — CLI11 validators for what CLI11's own let through: a number that is not finite (CLI::Range
// compares, and every comparison with NaN is false).
// CLI11 puts the option's name before the message: "--time-limit: nan is not seconds from 0.1 to 3600".
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace fsdplab::app {

// A finite number within [low, high]; `what` says what the number is ("seconds").
CLI::Validator finite_range(double low, double high, const std::string& what);

}  // namespace fsdplab::app
