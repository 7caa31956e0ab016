// cli_checks.hpp — CLI11 validators for what CLI11's own let through: a number that is not finite (CLI::Range
// compares, and every comparison with NaN is false) and an empty value where empty would mean "not given".
// CLI11 puts the option's name before the message: "--time-limit: nan is not seconds from 0.1 to 3600".
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace fsdplab::app {

// A finite number within [low, high]; `what` says what the number is ("seconds"). A high of infinity bounds it below
// only, and then `what` says "finite", which ">= 0" alone does not: "--lr: inf is not a finite learning rate >= 0".
CLI::Validator finite_range(double low, double high, const std::string& what);

// A value that is not empty, for a path or a name whose option, left empty, would be taken as not given (an
// output not written, a default used); `expected` says what to give instead ("a folder", "a preset name").
CLI::Validator non_empty(const std::string& expected);

// Every option of `app` and its subcommands that takes a value refuses, before anything else reads it, an empty
// value and, for a whole number, text that is not one: CLI11 reads "" as 0 (`--lr ''` trained at learning rate 0)
// and says "Could not convert: --hybrid-group = 2.5" or "Value 2.5 not in range 1 to 1024" of a fraction. Now
// "--lr: an empty value; expected a number", "--world: 2.5 is not a whole number"; an option with its own non_empty
// keeps its words. Called once every command is added.
void refuse_unreadable_values(CLI::App& app);

// A comma list given to an option of `app` that takes one (`--bandwidths 1,,2`, `--only memory,`) with an empty
// item is refused, as a CLI11 error naming the option: CLI11 drops an empty item without a word, so the list would
// run short of what was typed. Called on the command line before `app` parses it.
void refuse_empty_list_items(const CLI::App& app, int argc, const char* const* argv);

}  // namespace fsdplab::app
