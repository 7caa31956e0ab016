// Philox4x32-10 against Random123's known answers, FNV-1a stream keys, the uniform and normal
// distributions (slices equal the whole, statistics, agreement with the Python twin), init helpers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/nn/counter_rng.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using fsdplab::testing::contains;
using fsdplab::testing::error_of;

struct Kat {
  PhiloxCounter counter;
  PhiloxKey key;
  PhiloxCounter expected;
};

// Philox4x32 with 10 rounds, from the kat_vectors file of the Random123 distribution (D. E. Shaw
// Research): the first three as pasted into DEShawResearch/Random123-Boost,
// libs/random/test/test_philox.cpp; the others from examples/kat_vectors (one bit set in the counter
// or the key, so each word's path through the rounds and the key schedule is checked).
const Kat kKats[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    {{0x00000001, 0x00000000, 0x00000000, 0x00000000},
     {0x00000001, 0x00000000},
     {0xac08141b, 0xdfc5ccbe, 0x79c07a47, 0xa7f66093}},
    {{0x00000000, 0x00000000, 0x00000000, 0x80000000},
     {0x00000000, 0x80000000},
     {0xf7a0b371, 0xe51dc93d, 0x56ce135d, 0x1d4b5580}},
    {{0x452821e6, 0x38d01377, 0xbe5466cf, 0x34e90c6c},
     {0x00000000, 0xffffffff},
     {0x72ce44b3, 0xb44f9b78, 0x49af0267, 0x726813ac}},
};

TEST(CounterRngPhilox, MatchesRandom123KnownAnswers) {
  for (const Kat& kat : kKats) EXPECT_EQ(philox4x32_10(kat.counter, kat.key), kat.expected);
}

// Key = seed, counter = (index, stream key), each 64-bit value low word first.
TEST(CounterRngPhilox, AddressesSeedStreamAndIndex) {
  const PhiloxCounter direct =
      philox4x32_10({0x55667788, 0x11223344, 0x76543210, 0xfedcba98}, {0x89abcdef, 0x01234567});
  EXPECT_EQ(philox_at(0x0123456789abcdefull, 0xfedcba9876543210ull, 0x1122334455667788ull), direct);
  // The same words from counter_rng.py.
  EXPECT_EQ(direct, (PhiloxCounter{2141679936u, 3110149825u, 3641496608u, 295006444u}));
}

TEST(CounterRngStreamKey, IsFnv1a64OfUtf8Bytes) {
  EXPECT_EQ(stream_key(""), 0xcbf29ce484222325ull);  // the offset basis
  EXPECT_EQ(stream_key("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(stream_key("foobar"), 0x85944171f73967e8ull);
  EXPECT_EQ(stream_key("\xc3\xa9"), 0x0ac21707b7181e01ull);  // "é": bytes, not code points
  EXPECT_EQ(stream_key("h.0.attn.c_attn.weight"), 0x7d7dc66305e9207dull);
}

const std::uint64_t kSeed = 1234;
const std::uint64_t kKey = stream_key("h.0.attn.c_attn.weight");
const std::uint64_t kIndices[] = {0, 1, 2, 3, (std::uint64_t{1} << 32) + 7};

// What `python3 tests/reference/counter_rng.py` prints. Uniforms must agree exactly: both sides do
// the same integer work and the same three correctly rounded float operations.
TEST(CounterRngUniform, MatchesPythonReferenceExactly) {
  const float expected[] = {0.155683011f, -0.0972948596f, -0.00791607797f, 3.439188e-05f, 0.030092001f};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(uniform_at(kSeed, kKey, kIndices[i], -0.125f, 0.25f), expected[i]) << i;
}

// Normals go through log and cos, which IEEE 754 does not require to be correctly rounded: Python's
// math module and <cmath> can use different libms (on one Linux machine both call glibc and agree
// exactly). A 1-ulp difference in double moves the final float by at most one float ulp, and only
// rarely; 2^-23 relative covers one float ulp everywhere in a binade.
TEST(CounterRngNormal, MatchesPythonReferenceWithinOneUlp) {
  const float expected[] = {0.00581677165f, -0.0256509744f, -0.0298112538f, -0.0192655772f, -0.0245811567f};
  for (int i = 0; i < 5; ++i) {
    const float got = normal_at(kSeed, kKey, kIndices[i], 0.f, 0.02f);
    EXPECT_NEAR(got, expected[i], std::abs(expected[i]) * 0x1p-23) << i;
  }
  EXPECT_NEAR(normal_at(kSeed, kKey, 1000003, 1.5f, 3.f), 4.97261333f, 4.97261333 * 0x1p-23);
}

// A rank fills [begin, end) of a parameter on its own: it must equal that slice of the whole,
// for slices at odd offsets, and across the 2^32 boundary where the index's high word starts.
template <class Fill>
void expect_slices_equal_whole(Fill fill, std::uint64_t origin) {
  std::vector<float> whole(1001);
  fill(std::span<float>(whole), origin);
  const std::pair<std::size_t, std::size_t> slices[] = {{0, 1}, {1, 2}, {3, 500}, {333, 334}, {777, 1001}};
  for (const auto& [begin, end] : slices) {
    std::vector<float> part(end - begin);
    fill(std::span<float>(part), origin + begin);
    for (std::size_t j = 0; j < part.size(); ++j)
      ASSERT_EQ(part[j], whole[begin + j])
          << "slice [" << begin << ", " << end << ") from " << origin << ", element " << j;
  }
}

TEST(CounterRngUniform, SliceEqualsWhole) {
  const auto fill = [](std::span<float> out, std::uint64_t first) { fill_uniform(out, 7, kKey, first, -0.3f, 0.3f); };
  expect_slices_equal_whole(fill, 0);
  expect_slices_equal_whole(fill, (std::uint64_t{1} << 32) - 501);
}

TEST(CounterRngNormal, SliceEqualsWhole) {
  const auto fill = [](std::span<float> out, std::uint64_t first) { fill_normal(out, 7, kKey, first, 0.f, 0.02f); };
  expect_slices_equal_whole(fill, 0);
  expect_slices_equal_whole(fill, (std::uint64_t{1} << 32) - 501);
}

TEST(CounterRngNormal, FillEqualsNormalAt) {
  std::vector<float> out(9);
  fill_normal(out, 5, kKey, 11, 0.5f, 2.f);
  for (std::size_t j = 0; j < out.size(); ++j) EXPECT_EQ(out[j], normal_at(5, kKey, 11 + j, 0.5f, 2.f));
}

// Parameters, seeds and neighbouring layers must not share streams: a collision would start two
// weights equal, which no other check would notice.
TEST(CounterRng, DifferentNamesAndSeedsGiveDifferentStreams) {
  const auto draw = [](std::uint64_t seed, const char* name) {
    std::vector<float> out(1000);
    fill_normal(out, seed, stream_key(name), 0, 0.f, 1.f);
    return out;
  };
  const auto equal_count = [](const std::vector<float>& a, const std::vector<float>& b) {
    int same = 0;
    for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
    return same;
  };
  const auto base = draw(1, "h.0.mlp.c_fc.weight");
  EXPECT_EQ(equal_count(base, draw(1, "h.0.mlp.c_fc.weight")), 1000);
  EXPECT_LE(equal_count(base, draw(1, "h.1.mlp.c_fc.weight")), 1);
  EXPECT_LE(equal_count(base, draw(1, "h.0.mlp.c_fc.bias")), 1);
  EXPECT_LE(equal_count(base, draw(2, "h.0.mlp.c_fc.weight")), 1);
  // A stream is not its neighbour shifted: element i+1 of one name is not element i of another.
  const auto other = draw(1, "h.0.mlp.c_proj.weight");
  EXPECT_LE(
      equal_count(std::vector<float>(base.begin() + 1, base.end()), std::vector<float>(other.begin(), other.end() - 1)),
      1);
}

// 1e5 samples: the standard error of the mean is 1/sqrt(1e5) = 0.0032 and of the std about
// 1/sqrt(2e5) = 0.0022, so the bounds below are 4 to 5 standard errors: a correct generator fails
// them about once in 10^5 seeds, a wrong Box-Muller (say, a missing factor 2) fails always.
TEST(CounterRngNormal, HasTheRequestedMeanAndStd) {
  std::vector<float> out(100000);
  fill_normal(out, 42, stream_key("stats"), 0, 3.f, 2.f);
  double sum = 0, sum_sq = 0;
  for (const float v : out) sum += v;
  const double mean = sum / out.size();
  for (const float v : out) sum_sq += (v - mean) * (v - mean);
  const double stddev = std::sqrt(sum_sq / out.size());
  EXPECT_NEAR(mean, 3.0, 2.0 * 0.015);
  EXPECT_NEAR(stddev, 2.0, 2.0 * 0.01);
  // The tails: within one std holds 68.27%, its standard error 0.0015.
  int within = 0;
  for (const float v : out) within += std::abs(v - 3.f) < 2.f;
  EXPECT_NEAR(within / 1e5, 0.6827, 0.007);
}

TEST(CounterRngUniform, StaysInRangeWithUniformMoments) {
  std::vector<float> out(100000);
  fill_uniform(out, 42, stream_key("stats"), 0, -1.f, 3.f);
  double sum = 0, sum_sq = 0;
  for (const float v : out) {
    ASSERT_GE(v, -1.f);
    ASSERT_LT(v, 3.f);
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const double mean = sum / out.size();
  // U(-1, 3): mean 1 (standard error 4/sqrt(12e5) = 0.0037), variance 16/12.
  EXPECT_NEAR(mean, 1.0, 0.018);
  EXPECT_NEAR(sum_sq / out.size() - mean * mean, 16.0 / 12, 0.02);
}

// Between 2^24 and 2^24 + 2 floats are 2 apart: lo + d*u rounds to hi for about half of all u.
// Those must come back as the float below hi (here lo itself), never as hi.
TEST(CounterRngUniform, NeverReturnsHi) {
  std::vector<float> out(1000);
  fill_uniform(out, 1, 2, 0, 16777216.f, 16777218.f);
  for (const float v : out) ASSERT_EQ(v, 16777216.f);
}

TEST(CounterRng, RejectsBadArguments) {
  std::vector<float> out(4);
  EXPECT_TRUE(
      contains(error_of([&] { fill_uniform(out, 1, 2, 0, 1.f, 1.f); }), "expected finite lo < hi, got lo 1, hi 1"));
  EXPECT_TRUE(contains(error_of([&] { uniform_at(1, 2, 0, 2.f, -2.f); }), "lo < hi"));
  EXPECT_TRUE(
      contains(error_of([&] { uniform_at(1, 2, 0, 0.f, std::numeric_limits<float>::quiet_NaN()); }), "lo < hi"));
  EXPECT_TRUE(contains(error_of([&] { fill_normal(out, 1, 2, 0, 0.f, -0.02f); }), "std >= 0, got mean 0, std -0.02"));
  EXPECT_TRUE(contains(error_of([&] { linear_default_bound(0); }), "fan_in > 0, got 0"));
  EXPECT_TRUE(contains(error_of([&] { gpt2_residual_std(0); }), "n_layer > 0, got 0"));
}

TEST(CounterRngInit, HelpersGiveTheDocumentedNumbers) {
  EXPECT_FLOAT_EQ(linear_default_bound(10), 0.316227766f);    // toy: nn.Linear(10, ...)
  EXPECT_FLOAT_EQ(linear_default_bound(768), 0.0360843918f);  // 1/sqrt(768)
  EXPECT_FLOAT_EQ(gpt2_residual_std(12), 0.00408248290f);     // 0.02/sqrt(24), GPT-2 small
  EXPECT_EQ(kGpt2InitStd, 0.02f);
}

}  // namespace
}  // namespace fsdplab
