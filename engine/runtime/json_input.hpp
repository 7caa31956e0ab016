// json_input.hpp — parsing JSON a user's file holds (a grading case, a checkpoint's manifest, a model's config, a
// preset file, a trace, a safetensors header), one way everywhere.
//
// nlohmann::json's own errors are written for its programmers: "[json.exception.parse_error.101] parse error at
// line 26, column 1: ... last read: '<the raw byte>'". A user reads "parse error at line 26, column 1: ...", a byte
// that is not printable as \xNN. And a document nested a hundred thousand levels deep parses, then overflows the
// stack of whatever walks it (a destructor, a dump() into an error message): nesting is bounded at parse time.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace fsdplab {

// Deeper than any file fsdplab writes or reads (a trace's event args: 4 levels).
inline constexpr int kMaxJsonNesting = 64;

struct JsonInputOptions {
  bool comments = false;     // accept // and /* */ comments (the preset files)
  bool unique_keys = false;  // refuse a key given twice in one object (nlohmann::json would keep the last silently)
};

// `text` parsed; an Error (engine/runtime/error.hpp) saying what is wrong and where, in json_error_text's words:
// invalid JSON, arrays or objects nested deeper than kMaxJsonNesting, a key twice where unique_keys asks.
nlohmann::json parse_json_input(std::string_view text, JsonInputOptions options = {});

// A value a file holds, as a message quotes it: as the file has it, cut short past 60 characters; a nested array
// or an object is only named ("a nested array", "an object"), so a hostile file's structure is never printed.
std::string json_shown(const nlohmann::json& value);

// nlohmann::json's message of `e` without its "[json.exception.<kind>.<id>] " tag, each byte outside printable
// ASCII written as \xNN: "parse error at line 3, column 5: syntax error while parsing value - invalid literal; last
// read: '\xdf'", "type must be number, but is string".
std::string json_error_text(const nlohmann::json::exception& e);

}  // namespace fsdplab
