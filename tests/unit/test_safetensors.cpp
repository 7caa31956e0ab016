// The safetensors reader and writer: against Hugging Face's own serializer (the fixtures in
// tests/data/, written by tests/reference/make_safetensors_fixture.py), the round trip, the writer's
// layout, determinism and atomicity, and the reader's errors on truncated, corrupt, hostile and
// fuzzed files.
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/nn/safetensors.hpp"
#include "test_support.hpp"
#include "engine/runtime/error.hpp"
#include "engine/tensor/bf16.hpp"

namespace fsdplab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Dims = std::vector<std::int64_t>;

const fs::path kDataDir = fs::path(__FILE__).parent_path().parent_path() / "data";

template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

template <class T>
std::vector<T> values_of(std::span<const std::byte> bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));  // an empty span may be null
  return v;
}

std::vector<unsigned> byte_values(std::span<const std::byte> bytes) {
  std::vector<unsigned> v;
  for (const std::byte b : bytes) v.push_back(std::to_integer<unsigned>(b));
  return v;
}

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

// The fixtures' tensors of our dtypes, by the formulas of make_safetensors_fixture.py.
struct Sample {
  std::vector<float> weight, scale, empty;
  std::vector<std::uint16_t> bias;
  std::vector<std::int32_t> tokens;

  Sample() {
    for (int i = 0; i < 6; ++i) weight.push_back(static_cast<float>((i - 2.5) / 3));
    for (int i = 0; i < 4; ++i) bias.push_back(float_to_bf16(static_cast<float>((i + 1) / 7.0)));
    bias.push_back(float_to_bf16(1.f + 0x1p-8f));      // halfway between two bf16s: ties to even,
    bias.push_back(float_to_bf16(1.f + 3 * 0x1p-8f));  // once down and once up
    for (int i = 0; i < 6; ++i) tokens.push_back(1000 * i - 2500);
    scale = {0.125f};
  }

  // In an order of our own, which the writer must not keep.
  std::vector<SafetensorsEntry> entries() const {
    return {{"tokens", DType::i32, {3, 2}, bytes_of(tokens)},
            {"h.0.ln_1.bias", DType::bf16, {6}, bytes_of(bias)},
            {"scale", DType::f32, {}, bytes_of(scale)},
            {"h.0.attn.c_attn.weight", DType::f32, {2, 3}, bytes_of(weight)},
            {"empty", DType::f32, {2, 0}, bytes_of(empty)}};
  }
};

class SafetensorsTest : public testing::TempDirTest {
 protected:
  // A file of `header` with its length in front, then `data`.
  static std::string file_bytes(const std::string& header, const std::string& data = "") {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(static_cast<std::uint64_t>(header.size()) >> (8 * i));
    return bytes + header + data;
  }
  fs::path make(const std::string& header, const std::string& data = "") const {
    spit(path("t.safetensors"), file_bytes(header, data));
    return path("t.safetensors");
  }

  // The Error message reading `p` gives; fails the test if it reads fine (other exceptions escape
  // and fail it too).
  static std::string read_error(const fs::path& p) {
    try {
      SafetensorsFile::read(p);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "reading " << p << " succeeded";
    return "";
  }

};

class SafetensorsInterop : public SafetensorsTest {};
class SafetensorsWrite : public SafetensorsTest {};
class SafetensorsRead : public SafetensorsTest {};
class SafetensorsFuzz : public SafetensorsTest {};

// ---- against Hugging Face's serializer ---------------------------------------------------------

TEST_F(SafetensorsInterop, ReadsEveryTensorOfAHuggingFaceFile) {
  const auto file = SafetensorsFile::read(kDataDir / "safetensors_hf_mixed.safetensors");
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_EQ(file.entries().size(), 10u);

  const Sample s;
  EXPECT_EQ(values_of<float>(file.expect("h.0.attn.c_attn.weight", DType::f32, {2, 3})), s.weight);
  EXPECT_EQ(values_of<std::uint16_t>(file.expect("h.0.ln_1.bias", DType::bf16, {6})), s.bias);
  EXPECT_EQ(s.bias[4], 0x3F80);  // Python's rounding and ours agree on the ties, and both are to even
  EXPECT_EQ(s.bias[5], 0x3F82);
  EXPECT_EQ(values_of<std::int32_t>(file.expect("tokens", DType::i32, {3, 2})), s.tokens);
  EXPECT_EQ(values_of<float>(file.expect("scale", DType::f32, {})), s.scale);
  EXPECT_TRUE(file.expect("empty", DType::f32, {2, 0}).empty());

  // Dtypes we do not compute in keep their name, shape and bytes.
  const auto& half = file.at("half");
  EXPECT_EQ(half.dtype, "F16");
  EXPECT_EQ(half.shape, (Dims{3}));
  EXPECT_EQ(byte_values(half.bytes), (std::vector<unsigned>{0x00, 0x38, 0x00, 0xC0, 0xFF, 0x7B}));  // 0.5 -2 65504
  EXPECT_EQ(file.at("double").dtype, "F64");
  EXPECT_EQ(values_of<double>(file.at("double").bytes), (std::vector<double>{1.0 / 3, -1e300}));
  EXPECT_EQ(values_of<std::int64_t>(file.at("steps").bytes), (std::vector<std::int64_t>{std::int64_t{1} << 40, -1}));
  EXPECT_EQ(file.at("pixels").dtype, "U8");
  EXPECT_EQ(byte_values(file.at("pixels").bytes), (std::vector<unsigned>{0, 128, 255}));
  EXPECT_EQ(file.at("mask").dtype, "BOOL");
  EXPECT_EQ(file.at("mask").shape, (Dims{2, 2}));
  EXPECT_EQ(byte_values(file.at("mask").bytes), (std::vector<unsigned>{1, 0, 0, 1}));

  // ...and `expect` with one of ours says what it found.
  try {
    file.expect("half", DType::f32, {3});
    ADD_FAILURE() << "an F16 tensor was taken for F32";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "half: expected [3] F32, file has [3] F16"));
  }
}

TEST_F(SafetensorsInterop, WritesTheSameBytesAsHuggingFace) {
  const Sample s;
  const std::vector<SafetensorsEntry> entries = s.entries();
  write_safetensors(path("ours.safetensors"), entries, {{"format", "pt"}});
  const std::string theirs = slurp(kDataDir / "safetensors_hf_ours.safetensors");
  ASSERT_FALSE(theirs.empty());
  EXPECT_EQ(slurp(path("ours.safetensors")), theirs);
}

// The reference serializer's bytes for no tensors: "{}" padded to 8 bytes.
TEST_F(SafetensorsInterop, NoTensorsIsAnEmptyObjectPaddedToEightBytes) {
  write_safetensors(path("empty.safetensors"), {});
  EXPECT_EQ(slurp(path("empty.safetensors")), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  const auto file = SafetensorsFile::read(path("empty.safetensors"));
  EXPECT_TRUE(file.entries().empty());
  EXPECT_TRUE(file.metadata().empty());
}

// ---- writing ------------------------------------------------------------------------------------

TEST_F(SafetensorsWrite, RoundTripKeepsBytesShapesDtypesAndMetadata) {
  const Sample s;
  std::vector<SafetensorsEntry> entries = s.entries();
  const std::vector<float> odd = {1.f, -0.f, INFINITY, NAN, 1e-45f, -3.4e38f};  // bytes, not values, travel
  entries.push_back({"blocks.0/\xC3\xA4 \"q\"\n\\", DType::f32, {1, 6}, bytes_of(odd)});
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"step", "1200"}, {"note", "\xE2\x9C\x93 \"quoted\"\n"}, {"", ""}};
  write_safetensors(path("rt.safetensors"), entries, metadata);

  const auto file = SafetensorsFile::read(path("rt.safetensors"));
  EXPECT_EQ(file.metadata(), metadata);
  ASSERT_EQ(file.entries().size(), entries.size());
  for (const SafetensorsEntry& e : entries) {
    SCOPED_TRACE(e.name);
    ASSERT_TRUE(file.contains(e.name));
    const auto& got = file.at(e.name);
    EXPECT_EQ(got.dtype, safetensors_dtype_name(e.dtype));
    EXPECT_EQ(got.shape, e.shape);
    EXPECT_TRUE(std::ranges::equal(got.bytes, e.bytes));
  }
  // Data order: F32, then I32, then BF16, each by name.
  EXPECT_EQ(file.names(), (std::vector<std::string>{"blocks.0/\xC3\xA4 \"q\"\n\\", "empty", "h.0.attn.c_attn.weight",
                                                    "scale", "tokens", "h.0.ln_1.bias"}));
}

TEST_F(SafetensorsWrite, SameTensorsInAnyOrderGiveTheSameBytes) {
  const Sample s;
  std::vector<SafetensorsEntry> entries = s.entries();
  write_safetensors(path("a.safetensors"), entries, {{"b", "2"}, {"a", "1"}});
  std::reverse(entries.begin(), entries.end());
  write_safetensors(path("b.safetensors"), entries, {{"a", "1"}, {"b", "2"}});
  write_safetensors(path("c.safetensors"), entries, {{"a", "1"}, {"b", "2"}});
  const std::string a = slurp(path("a.safetensors"));
  EXPECT_EQ(a, slurp(path("b.safetensors")));
  EXPECT_EQ(a, slurp(path("c.safetensors")));
}

// What lets a reader use the bytes in place: the data starts 8-aligned and each tensor at a multiple
// of its element size. The header is compact JSON, metadata first, padded with spaces.
TEST_F(SafetensorsWrite, LaysTheFileOutAsHuggingFaceDoes) {
  const std::vector<std::uint16_t> three_bf16 = {1, 2, 3};
  const std::vector<std::int32_t> one_i32 = {7};
  const std::vector<float> two_f32 = {1.f, 2.f};
  const std::vector<SafetensorsEntry> entries = {{"a", DType::bf16, {3}, bytes_of(three_bf16)},
                                                 {"b", DType::i32, {1}, bytes_of(one_i32)},
                                                 {"c", DType::f32, {2}, bytes_of(two_f32)}};
  write_safetensors(path("l.safetensors"), entries, {{"format", "pt"}});
  const std::string bytes = slurp(path("l.safetensors"));
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = bytes.substr(8, n);
  const std::string expected = R"({"__metadata__":{"format":"pt"},)"
                               R"("c":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"I32","shape":[1],"data_offsets":[8,12]},)"
                               R"("a":{"dtype":"BF16","shape":[3],"data_offsets":[12,18]}})";
  EXPECT_EQ(header, expected + std::string((8 - expected.size() % 8) % 8, ' '));
  EXPECT_EQ(bytes.size(), 8 + n + 18);
}

TEST_F(SafetensorsWrite, RejectsBadEntriesAndKeepsTheOldFile) {
  const Sample s;
  write_safetensors(path("keep.safetensors"), s.entries());
  const std::string before = slurp(path("keep.safetensors"));
  const std::vector<float> four = {1, 2, 3, 4};
  const std::string file = path("keep.safetensors").string();

  struct Case {
    std::vector<SafetensorsEntry> entries;
    std::map<std::string, std::string> metadata;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{"w", DType::f32, {4}, bytes_of(four)}, {"w", DType::f32, {2, 2}, bytes_of(four)}}, {}, "'w' is given twice"},
      {{{"w", DType::f32, {5}, bytes_of(four)}}, {}, "'w' is [5] F32 = 20 bytes, but 16 bytes were given"},
      {{{"w", DType::bf16, {4}, bytes_of(four)}}, {}, "'w' is [4] BF16 = 8 bytes, but 16 bytes were given"},
      {{{"w", DType::f32, {-4, -1}, bytes_of(four)}}, {}, "'w' has shape [-4, -1]; expected non-negative"},
      {{{"w", DType::f32, {1ll << 40, 1ll << 40}, bytes_of(four)}}, {}, "overflows 64 bits"},
      {{{"__metadata__", DType::f32, {4}, bytes_of(four)}}, {}, "reserved for the metadata"},
      {{{"bad\xFF", DType::f32, {4}, bytes_of(four)}}, {}, "not valid UTF-8"},
      {{{"w", DType::f32, {4}, bytes_of(four)}}, {{"k", "\xC3"}}, "not valid UTF-8"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    try {
      write_safetensors(path("keep.safetensors"), c.entries, c.metadata);
      ADD_FAILURE() << "written";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), "cannot write '" + file + "'"));
      EXPECT_TRUE(contains(e.what(), c.message));
    }
    EXPECT_EQ(slurp(path("keep.safetensors")), before);
    EXPECT_FALSE(fs::exists(path("keep.safetensors.tmp")));
  }
}

TEST_F(SafetensorsWrite, FailedWriteNamesThePathAndLeavesNoTemporary) {
  const fs::path missing = path("no/such/dir/x.safetensors");
  try {
    write_safetensors(missing, {});
    ADD_FAILURE() << "written into a missing directory";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "cannot write '" + missing.string() + "'"));
    EXPECT_TRUE(contains(e.what(), "No such file or directory"));
  }
  // A directory at the path is refused before anything is written: no temporary stays behind.
  fs::create_directory(path("taken.safetensors"));
  try {
    write_safetensors(path("taken.safetensors"), {});
    ADD_FAILURE() << "renamed over a directory";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "is a folder; expected a file"));
  }
  EXPECT_TRUE(fs::is_directory(path("taken.safetensors")));
  EXPECT_FALSE(fs::exists(path("taken.safetensors.tmp")));
}

// ---- reading ------------------------------------------------------------------------------------

TEST_F(SafetensorsRead, ExpectNamesTheTensorAndWhatDiffers) {
  const Sample s;
  write_safetensors(path("ckpt.safetensors"), s.entries());
  const auto file = SafetensorsFile::read(path("ckpt.safetensors"));
  const std::string p = path("ckpt.safetensors").string();
  const auto error_of = [&](auto&& call) -> std::string {
    try {
      call();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(error_of([&] { file.expect("lm_head.weight", DType::f32, {2}); }),
            p + " has no tensor 'lm_head.weight' (it has 5 tensors)");
  EXPECT_EQ(error_of([&] { file.at("lm_head.weight"); }), p + " has no tensor 'lm_head.weight' (it has 5 tensors)");
  EXPECT_EQ(error_of([&] { file.expect("h.0.attn.c_attn.weight", DType::bf16, {2, 3}); }),
            p + ": h.0.attn.c_attn.weight: expected [2, 3] BF16, file has [2, 3] F32");
  EXPECT_EQ(error_of([&] { file.expect("h.0.attn.c_attn.weight", DType::f32, {3, 2}); }),
            p + ": h.0.attn.c_attn.weight: expected [3, 2] F32, file has [2, 3] F32");
  EXPECT_EQ(error_of([&] { file.expect("scale", DType::f32, {1}); }), p + ": scale: expected [1] F32, file has [] F32");
  EXPECT_FALSE(file.contains("lm_head.weight"));
}

// What the format allows and other writers do: header order unlike data order, whitespace padding,
// fields we do not know, empty tensors sharing an offset, sub-byte dtypes that fill whole bytes.
TEST_F(SafetensorsRead, AcceptsWhatTheFormatAllows) {
  const std::string header =
      R"({"z":{"data_offsets":[0,4],"shape":[1],"dtype":"F32","extra":{"x":[1]}},)"
      R"("e2":{"dtype":"BF16","shape":[0,5],"data_offsets":[4,4]},)"
      R"("e1":{"dtype":"I32","shape":[7,0],"data_offsets":[4,4]},)"
      R"("f4":{"dtype":"F4","shape":[2,3],"data_offsets":[4,7]},)"
      R"("__metadata__":{"format":"pt"},)"
      R"("a":{"dtype":"U8","shape":[1],"data_offsets":[7,8]}})"
      " \t\r\n  ";
  const auto file = SafetensorsFile::read(make(header, std::string("\0\0\x80?xyzA", 8)));
  EXPECT_EQ(file.names(), (std::vector<std::string>{"z", "e1", "e2", "f4", "a"}));
  EXPECT_EQ(values_of<float>(file.expect("z", DType::f32, {1})), (std::vector<float>{1.f}));
  EXPECT_TRUE(file.expect("e1", DType::i32, {7, 0}).empty());
  EXPECT_EQ(file.at("f4").bytes.size(), 3u);
  EXPECT_EQ(byte_values(file.at("a").bytes), (std::vector<unsigned>{'A'}));
  EXPECT_EQ(file.metadata().at("format"), "pt");
}

// Each broken header is an Error that names the file and says what was expected and what came.
TEST_F(SafetensorsRead, RejectsBrokenHeadersNamingTheProblem) {
  const std::string f32_1 = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  struct Case {
    std::string header, data, message;
  };
  const std::vector<Case> cases = {
      {"", "", "the header is empty; expected a JSON object"},
      {"[]", "", "does not start with '{' (byte 0x5b)"},
      {"  {}", "", "does not start with '{' (byte 0x20)"},
      {R"({"a":)", "", "the header is not valid JSON"},
      {"{}x", "", "the header is not valid JSON"},
      {"{\"\xFF\":1}", "", "the header is not valid JSON"},
      {R"({"a":)" + f32_1 + R"(,"a":)" + f32_1 + "}", "1234", "the key \"a\" twice"},
      {R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "1234", "the key \"dtype\" twice"},
      {R"({"__metadata__":{"k":"1","k":"2"}})", "", "the key \"k\" twice"},
      {R"({"a":3})", "", "tensor 'a' is 3; expected an object with dtype, shape and data_offsets"},
      {R"({"a":[[1]]})", "", "tensor 'a' is a nested array; expected an object"},
      {R"({"a":{"shape":[1],"data_offsets":[0,4]}})", "1234", "tensor 'a' has no 'dtype'"},
      {R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", "1234", "tensor 'a' has no 'shape'"},
      {R"({"a":{"dtype":"F32","shape":[1]}})", "1234", "tensor 'a' has no 'data_offsets'"},
      {R"({"a":{"dtype":3,"shape":[1],"data_offsets":[0,4]}})", "1234", "has dtype 3; expected a string"},
      {R"({"a":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,4]}})", "1234",
       "has dtype \"Q4_K\"; expected one of BOOL"},
      {R"({"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", "1234", "has dtype \"f32\"; expected one of"},
      {R"({"a":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", "1234", "has shape \"1\"; expected an array"},
      {R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "1234",
       "has shape [-1]; expected an array of non-negative integers"},
      {R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", "1234", "has shape [1.0]; expected"},
      {R"({"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", "1234", "has shape a nested array; expected"},
      {R"({"a":{"dtype":"F32","shape":[9223372036854775808,0],"data_offsets":[0,0]}})", "",
       "has shape [9223372036854775808,0]"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "1234",
       "has data_offsets [0]; expected [begin, end] with 0 <= begin <= end"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", "1234",
       "has data_offsets [4,0]; expected [begin, end]"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "1234", "has data_offsets [-4,0]; expected"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":{"0":4}}})", "1234", "has data_offsets an object; expected"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "1234",
       "tensor 'a' is [2] F32 = 8 bytes, but its data_offsets [0, 4] hold 4"},
      {R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", "1234",
       "whose size overflows 64 bits"},
      {R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}})", "1",
       "is [3] F4 = 12 bits; expected a whole number of bytes"},
      {R"({"a":)" + f32_1 + "}", "", "the tensors need 4 bytes of data, but the file has 0 after the header"},
      {R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[18446744073709551612,18446744073709551615]}})", "123",
       "tensor 'a' starts at byte 18446744073709551612 of the data, but the data starts at byte 0"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       "123456789012", "tensor 'b' at bytes [4, 12) of the data overlaps 'a' at [0, 8)"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
       "12345678", "tensor 'e' at bytes [4, 4) of the data overlaps 'a'"},
      {R"({"a":)" + f32_1 + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", "123456789012",
       "tensor 'b' starts at byte 8 of the data, but 'a' ends at byte 4: a gap of 4 bytes"},
      {R"({"a":)" + f32_1 + "}", "12345678",
       "the tensors end at byte 4 of the data, but the file has 8 bytes after the header: 4 bytes belong to no tensor"},
      {R"({"__metadata__":[1]})", "", "__metadata__ is [1]; expected an object of strings"},
      {R"({"__metadata__":{"step":1}})", "", "__metadata__ has 'step' = 1; expected a string"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    const std::string message = read_error(make(c.header, c.data));
    EXPECT_TRUE(contains(message, path("t.safetensors").string() + ": "));
    EXPECT_TRUE(contains(message, c.message));
  }
}

// The header length is checked against the file's size, and the format's limit, before anything is
// allocated or read: a hostile length costs nothing.
TEST_F(SafetensorsRead, HeaderLengthIsCheckedBeforeAnythingIsAllocated) {
  spit(path("huge.safetensors"), std::string(8, '\xFF') + "{}");
  EXPECT_TRUE(contains(read_error(path("huge.safetensors")),
                       "the header length is 18446744073709551615 bytes, but only 2 bytes follow it"));

  // A sparse file as long as its header claims, one byte over the 100 MB limit.
  std::string length(8, '\0');
  const std::uint64_t n = 100'000'001;
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>(n >> (8 * i));
  spit(path("big.safetensors"), length + "{");
  fs::resize_file(path("big.safetensors"), 8 + n);
  EXPECT_TRUE(contains(read_error(path("big.safetensors")),
                       "the header length is 100000001 bytes; expected at most 100000000"));

  spit(path("short.safetensors"), std::string("\x02\0\0", 3));
  EXPECT_TRUE(contains(read_error(path("short.safetensors")), "the file has 3 bytes; expected at least 8"));
  EXPECT_TRUE(contains(read_error(path("absent.safetensors")), "cannot read '" + path("absent.safetensors").string()));
}

TEST_F(SafetensorsRead, TruncatedAtEveryByteFailsCleanly) {
  const std::string whole = slurp(kDataDir / "safetensors_hf_mixed.safetensors");
  ASSERT_GT(whole.size(), 100u);
  for (std::size_t size = 0; size < whole.size(); ++size) {
    spit(path("cut.safetensors"), whole.substr(0, size));
    const std::string message = read_error(path("cut.safetensors"));
    if (!contains(message, path("cut.safetensors").string())) {
      ADD_FAILURE() << "cut at " << size << ": " << message;
      break;
    }
  }
}

// ---- fuzzing ------------------------------------------------------------------------------------

// Whatever the bytes, the reader returns a file or throws fsdplab::Error: never another exception,
// never a crash (the sanitizer presets run this too). Two kinds of damage: random bytes anywhere,
// which mostly test the length and the JSON parser, and random values put into the header's
// fields with the length kept right, which reach every field and layout check.
TEST_F(SafetensorsFuzz, MutatedFilesReadOrFailCleanly) {
  const std::string valid = slurp(kDataDir / "safetensors_hf_mixed.safetensors");
  ASSERT_GT(valid.size(), 8u);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(valid[static_cast<std::size_t>(i)]);
  const json header = json::parse(valid.substr(8, n));
  const std::string data = valid.substr(8 + n);

  std::mt19937 rng(20240611);
  const auto pick = [&](std::size_t k) { return static_cast<std::size_t>(rng() % k); };
  const std::vector<json> values = {nullptr, true, -1, 0, 1, 4, 8, 1e300, 0.5, "", "F32", "BF16", "F4", "BOOL",
                                    json::array(), json::object(), json::array({0, 4}), json::array({4, 0}),
                                    json::array({1, 2, 3}), 18446744073709551615ULL, json::array({-1})};
  int read_ok = 0, read_failed = 0;
  const auto attempt = [&](const std::string& bytes) {
    spit(path("fuzz.safetensors"), bytes);
    try {
      const auto file = SafetensorsFile::read(path("fuzz.safetensors"));
      for (const auto& e : file.entries()) EXPECT_LE(e.bytes.size(), bytes.size());
      ++read_ok;
    } catch (const Error&) {
      ++read_failed;
    }
  };

  for (int iteration = 0; iteration < 250; ++iteration) {
    std::string bytes = valid;
    const std::size_t edits = 1 + pick(4);
    for (std::size_t k = 0; k < edits; ++k) {
      // Mostly in the header, where the checks are; sometimes in the length or the data.
      const std::size_t at = pick(3) ? 8 + pick(n) : pick(bytes.size());
      switch (pick(4)) {
        case 0: bytes[at] = static_cast<char>(rng()); break;
        case 1: bytes[at] = "{}[],:\"0123456789-. "[pick(20)]; break;
        case 2: bytes[at] = static_cast<char>(bytes[at] ^ (1 << pick(8))); break;
        default: bytes.erase(at, 1 + pick(8)); break;
      }
    }
    attempt(bytes);
  }
  for (int iteration = 0; iteration < 250; ++iteration) {
    json doc = header;
    std::vector<std::string> names;
    for (const auto& item : doc.items()) names.push_back(item.key());
    json& tensor = doc[names[pick(names.size())]];
    std::vector<std::string> keys;
    for (const auto& item : tensor.items()) keys.push_back(item.key());
    const std::string key = keys[pick(keys.size())];
    if (pick(5) == 0) tensor.erase(key);
    else if (pick(2) == 0 && tensor[key].is_array() && !tensor[key].empty())
      tensor[key][pick(tensor[key].size())] = values[pick(values.size())];
    else tensor[key] = values[pick(values.size())];
    attempt(file_bytes(doc.dump(), data));
  }
  // Both outcomes happen: damage in the data, or to a value that stays valid, reads fine.
  EXPECT_GT(read_ok, 0);
  EXPECT_GT(read_failed, 0);
}

}  // namespace
}  // namespace fsdplab
