#include "app/cli_checks.hpp"

#include <cmath>
#include <cstdlib>
#include <map>

namespace fsdplab::app {

CLI::Validator finite_range(double low, double high, const std::string& what) {
  const bool bounded = std::isfinite(high);
  const std::string range = bounded ? "from " + CLI::detail::to_string(low) + " to " + CLI::detail::to_string(high)
                                    : ">= " + CLI::detail::to_string(low);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0' || !std::isfinite(value) || value < low || value > high)
          return text + " is not " + what + " " + range;
        return "";
      },
      bounded ? "FINITE in [" + CLI::detail::to_string(low) + ", " + CLI::detail::to_string(high) + "]"
              : "FINITE >= " + CLI::detail::to_string(low));
}

namespace {

constexpr const char* kNonEmpty = "non_empty";  // non_empty's validator name, which refuse_unreadable_values finds

enum class ValueKind { whole, number, other };

ValueKind kind_of(const CLI::Option& option) {
  const std::string type = option.get_type_name();  // "INT", "UINT:INT in [1 - 9]", "FLOAT", "TEXT", ...
  if (type.starts_with("INT") || type.starts_with("UINT")) return ValueKind::whole;
  if (type.starts_with("FLOAT")) return ValueKind::number;
  return ValueKind::other;
}

// A sign and digits: whether the number is in range (a sign included) is the option's own range check's to say.
bool whole_number_text(const std::string& text) {
  const std::size_t digits = !text.empty() && (text[0] == '+' || text[0] == '-') ? 1 : 0;
  return text.size() > digits && text.find_first_not_of("0123456789", digits) == std::string::npos;
}

}  // namespace

CLI::Validator non_empty(const std::string& expected) {
  // No description: it would add a word to the help of every path option, and the help says what each takes.
  CLI::Validator check(
      [=](std::string& text) -> std::string { return text.empty() ? "an empty value; expected " + expected : ""; }, "");
  check.name(kNonEmpty);
  return check;
}

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
    // transform: first, before a range check or the conversion reads the text. (A number's nan and inf are each
    // number option's finite_range to refuse, in the words of its range.)
    option->transform(CLI::Validator(
        [=](std::string& text) -> std::string {
          if (text.empty()) return own_words ? "" : "an empty value; expected " + expected;
          if (kind == ValueKind::whole && !whole_number_text(text)) return text + " is not a whole number";
          return "";
        },
        ""));
  }
  for (CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) refuse_unreadable_values(*command);
}

void refuse_empty_list_items(const CLI::App& app, int argc, const char* const* argv) {
  std::map<std::string, char> delimiter_of;  // "--bandwidths" -> ','
  const auto collect = [&](const CLI::App& command) {
    for (const CLI::Option* option : command.get_options())
      if (option->get_delimiter() != '\0')
        for (const std::string& name : option->get_lnames()) delimiter_of["--" + name] = option->get_delimiter();
  };
  collect(app);
  for (const CLI::App* command : app.get_subcommands([](const CLI::App*) { return true; })) collect(*command);
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    const std::size_t equals = word.find('=');
    const std::string name = word.substr(0, equals);
    const auto it = delimiter_of.find(name);
    if (it == delimiter_of.end()) continue;
    if (equals == std::string::npos && i + 1 >= argc) continue;  // no value: CLI11 says so
    const std::string value = equals == std::string::npos ? argv[i + 1] : word.substr(equals + 1);
    const std::string doubled(2, it->second);
    if (!value.empty() &&
        (value.front() == it->second || value.back() == it->second || value.find(doubled) != std::string::npos))
      throw CLI::ValidationError(name, "'" + value + "' has an empty item; expected a value between each '" +
                                           std::string(1, it->second) + "' and the next");
  }
}

}  // namespace fsdplab::app
