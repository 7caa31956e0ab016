#include "engine/runtime/json_input.hpp"

#include <algorithm>
#include <cstdio>
#include <set>
#include <vector>

#include "engine/runtime/error.hpp"

namespace fsdplab {

std::string json_error_text(const nlohmann::json::exception& e) {
  std::string_view message = e.what();
  if (message.starts_with("[json.exception.")) {
    const std::size_t end = message.find("] ");
    if (end != std::string_view::npos) message.remove_prefix(end + 2);
  }
  std::string text;
  for (const char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      text += c;
    } else {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      text += escaped;
    }
  }
  return text;
}

std::string json_shown(const nlohmann::json& value) {
  const bool flat =
      value.is_primitive() ||
      (value.is_array() && std::all_of(value.begin(), value.end(), [](const auto& x) { return x.is_primitive(); }));
  if (!flat) return value.is_array() ? "a nested array" : "an object";
  const std::string text = value.dump();
  return text.size() <= 60 ? text : text.substr(0, 57) + "...";
}

nlohmann::json parse_json_input(std::string_view text, JsonInputOptions options) {
  using Json = nlohmann::json;
  std::vector<std::set<std::string>> open_objects;  // the keys seen so far in each object being read
  const Json::parser_callback_t bounded = [&](int depth, Json::parse_event_t event, Json& parsed) {
    // depth counts the containers around the event: an object_start or array_start at depth 64 opens the 65th.
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= kMaxJsonNesting)
      fail("it nests arrays and objects ", depth + 1, " deep; expected at most ", kMaxJsonNesting);
    if (!options.unique_keys) return true;
    if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == Json::parse_event_t::object_end) open_objects.pop_back();
    if (event == Json::parse_event_t::key && !open_objects.back().insert(parsed.get<std::string>()).second)
      fail("it has the key ", parsed.dump(), " twice in one object; keys must be unique");
    return true;
  };
  try {
    return Json::parse(text, bounded, /*allow_exceptions=*/true, /*ignore_comments=*/options.comments);
  } catch (const Json::exception& e) {
    fail(json_error_text(e));
  }
}

}  // namespace fsdplab
