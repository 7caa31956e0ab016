// parse_json_input: the one way fsdplab parses a user's JSON — errors in a user's words, nesting bounded.
#include <gtest/gtest.h>

#include <string>

#include "engine/runtime/error.hpp"
#include "engine/runtime/json_input.hpp"

namespace fsdplab {
namespace {

std::string error_of(const std::string& text, JsonInputOptions options = {}) {
  try {
    parse_json_input(text, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string nested(int levels) { return std::string(levels, '[') + std::string(levels, ']'); }

TEST(JsonInput, ParsesWhatNlohmannParses) {
  const nlohmann::json j = parse_json_input(R"({"a": [1, 2.5, "x", null, {"b": true}]})");
  EXPECT_EQ(j.at("a").at(4).at("b"), true);
  EXPECT_EQ(parse_json_input(nested(kMaxJsonNesting)).dump(), nested(kMaxJsonNesting));
}

// A hundred thousand levels parse in nlohmann::json, and then overflow the stack of what walks them (a dump into an
// error message did, in a grading case): refused at the first level too deep, before the structure is built.
TEST(JsonInput, NestingDeeperThanTheBoundIsRefused) {
  EXPECT_EQ(error_of(nested(kMaxJsonNesting + 1)), "it nests arrays and objects 65 deep; expected at most 64");
  EXPECT_EQ(error_of(R"({"seq": )" + nested(100000) + "}"), "it nests arrays and objects 65 deep; expected at most 64");
  std::string objects;
  for (int i = 0; i < 200000; ++i) objects += R"({"a":)";
  EXPECT_EQ(error_of(objects), "it nests arrays and objects 65 deep; expected at most 64");
}

TEST(JsonInput, ErrorsAreWrittenForAUser) {
  const std::string cut = error_of("{\n  \"a\": [1,\n");
  EXPECT_EQ(cut.rfind("parse error at line 3, column 1: ", 0), 0u) << cut;
  EXPECT_EQ(cut.find("json.exception"), std::string::npos) << cut;
  // A byte that is not printable, quoted as nlohmann's "last read", is escaped.
  const std::string flipped = error_of("{\"a\": \xdf}");
  EXPECT_NE(flipped.find("\\xdf'"), std::string::npos) << flipped;
  EXPECT_EQ(flipped.find('\xdf'), std::string::npos) << flipped;
  EXPECT_NE(error_of("[1e400]").find("number overflow parsing '1e400'"), std::string::npos);
  try {
    (void)nlohmann::json("x").get<int>();
    FAIL() << "a string read as an int";
  } catch (const nlohmann::json::exception& e) {
    EXPECT_EQ(json_error_text(e), "type must be number, but is string");
  }
}

TEST(JsonInput, CommentsAndRepeatedKeysOnlyWhereAsked) {
  const std::string with_comment = "{\"a\": 1 // why\n}";
  EXPECT_NE(error_of(with_comment), "");
  EXPECT_EQ(parse_json_input(with_comment, {.comments = true}).at("a"), 1);
  const std::string twice = R"({"a": 1, "b": {"a": 2, "a": 3}})";
  EXPECT_EQ(parse_json_input(twice).at("b").at("a"), 3);
  EXPECT_EQ(error_of(twice, {.unique_keys = true}), "it has the key \"a\" twice in one object; keys must be unique");
}

TEST(JsonInput, AValueIsQuotedShortAndFlat) {
  EXPECT_EQ(json_shown(nlohmann::json(3)), "3");
  EXPECT_EQ(json_shown(nlohmann::json::parse("[1,2]")), "[1,2]");
  EXPECT_EQ(json_shown(nlohmann::json::parse("[[1]]")), "a nested array");
  EXPECT_EQ(json_shown(nlohmann::json::parse("{\"a\":1}")), "an object");
  EXPECT_EQ(json_shown(nlohmann::json(std::string(100, 'x'))), "\"" + std::string(56, 'x') + "...");
}

}  // namespace
}  // namespace fsdplab
