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

namespace {

// [Note: a DOM built by our own SAX handler]
// nlohmann::json's parser callback (the way to bound nesting and see keys as they come) costs O(N^2) in 3.11.2: after
// every object it scans the whole container around it for a discarded value, so a trace of 60,000 events took 13 s to
// read and one of a million would take hours. This handler builds the same document in one pass, refusing what the
// callback refused: a container opened deeper than kMaxJsonNesting, a key twice in one object where asked.
class BoundedDomBuilder {
 public:
  using Json = nlohmann::json;
  BoundedDomBuilder(Json& root, JsonInputOptions options) : root_(root), options_(options) {}

  bool null() { return put(nullptr); }
  bool boolean(bool value) { return put(value); }
  bool number_integer(Json::number_integer_t value) { return put(value); }
  bool number_unsigned(Json::number_unsigned_t value) { return put(value); }
  bool number_float(Json::number_float_t value, const Json::string_t& /*text*/) { return put(value); }
  bool string(Json::string_t& value) { return put(std::move(value)); }
  bool binary(Json::binary_t& value) { return put(Json::binary(std::move(value))); }
  bool start_object(std::size_t /*size*/) {
    open(Json::object());
    keys_.emplace_back();
    return true;
  }
  bool key(Json::string_t& key) {
    if (options_.unique_keys && !keys_.back().insert(key).second)
      fail("it has the key ", Json(key).dump(), " twice in one object; keys must be unique");
    key_ = std::move(key);
    return true;
  }
  bool end_object() {
    open_.pop_back();
    keys_.pop_back();
    return true;
  }
  bool start_array(std::size_t /*size*/) {
    open(Json::array());
    return true;
  }
  bool end_array() {
    open_.pop_back();
    return true;
  }
  template <class Exception>
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/, const Exception& error) {
    throw error;
  }

 private:
  // Places `value` where the document is now (the root, the next element of an array, the last key's value) and
  // returns it. An open container's address holds while it is open: only its own children are added meanwhile.
  Json& place(Json value) {
    if (open_.empty()) return root_ = std::move(value);
    Json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return parent.back();
    }
    return parent[key_] = std::move(value);
  }
  bool put(Json value) {
    place(std::move(value));
    return true;
  }
  void open(Json container) {
    // As the callback counted: the containers around the one being opened.
    if (open_.size() >= static_cast<std::size_t>(kMaxJsonNesting))
      fail("it nests arrays and objects ", open_.size() + 1, " deep; expected at most ", kMaxJsonNesting);
    open_.push_back(&place(std::move(container)));
  }

  Json& root_;
  const JsonInputOptions options_;
  std::vector<Json*> open_;                  // the containers being read, outermost first
  std::vector<std::set<std::string>> keys_;  // the keys seen so far in each object being read
  Json::string_t key_;                       // the key whose value comes next
};

}  // namespace

nlohmann::json parse_json_input(std::string_view text, JsonInputOptions options) {
  using Json = nlohmann::json;
  Json parsed;
  BoundedDomBuilder builder(parsed, options);
  try {
    // See [Note: a DOM built by our own SAX handler].
    Json::sax_parse(text, &builder, Json::input_format_t::json, /*strict=*/true, /*ignore_comments=*/options.comments);
  } catch (const Json::exception& e) {
    fail(json_error_text(e));
  }
  return parsed;
}

}  // namespace fsdplab
