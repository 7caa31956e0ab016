// The data sources: a step's global batch is the same at every world size and each rank's rows are
// a slice of it; synthetic tokens are learnable; regression targets are a fixed map of the inputs;
// the token-file reader reads the llm.c format, wraps at the end, and names what is wrong.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/train/synthetic_data.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

namespace fs = std::filesystem;
using fsdplab::testing::contains;
using fsdplab::testing::error_of;

TEST(SyntheticDataRows, RankRowsSplitTheBatchContiguously) {
  const RowRange expected[] = {{0, 1}, {1, 3}, {3, 4}, {4, 6}};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(rank_rows(6, r, 4).begin, expected[r].begin) << r;
    EXPECT_EQ(rank_rows(6, r, 4).end, expected[r].end) << r;
  }
  EXPECT_TRUE(contains(error_of([] { rank_rows(6, 2, 2); }), "expected 0 <= rank < world, got rank 2 of world 2"));
}

// The rows each rank of `world` produces with `source(row_begin, row_end)`, concatenated.
template <class T, class Source>
std::vector<T> concatenated(std::int64_t batch, int world, std::int64_t row_width, Source source) {
  std::vector<T> all;
  for (int r = 0; r < world; ++r) {
    const RowRange rows = rank_rows(batch, r, world);
    std::vector<T> part(static_cast<std::size_t>((rows.end - rows.begin) * row_width));
    source(rows.begin, rows.end, std::span<T>(part));
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

// ---- tokens ------------------------------------------------------------------------------------

struct Tokens {
  std::vector<std::int32_t> inputs, targets;
};

Tokens tokens(std::uint64_t seed, std::int64_t step, std::int64_t batch, std::int64_t seq, std::int64_t vocab,
              std::int64_t row_begin, std::int64_t row_end) {
  Tokens t;
  t.inputs.resize(static_cast<std::size_t>((row_end - row_begin) * seq));
  t.targets.resize(t.inputs.size());
  synthetic_tokens(seed, step, batch, seq, vocab, row_begin, row_end, t.inputs, t.targets);
  return t;
}

TEST(SyntheticDataTokens, GlobalBatchIsTheSameForEveryWorldSize) {
  const std::int64_t batch = 6, seq = 16, vocab = 50257;
  for (const std::int64_t step : {0, 5}) {
    const Tokens whole = tokens(9, step, batch, seq, vocab, 0, batch);
    for (int world = 1; world <= 4; ++world) {
      const auto inputs = concatenated<std::int32_t>(batch, world, seq, [&](auto begin, auto end, auto out) {
        const Tokens part = tokens(9, step, batch, seq, vocab, begin, end);
        std::copy(part.inputs.begin(), part.inputs.end(), out.begin());
      });
      const auto targets = concatenated<std::int32_t>(batch, world, seq, [&](auto begin, auto end, auto out) {
        const Tokens part = tokens(9, step, batch, seq, vocab, begin, end);
        std::copy(part.targets.begin(), part.targets.end(), out.begin());
      });
      EXPECT_EQ(inputs, whole.inputs) << "world " << world << ", step " << step;
      EXPECT_EQ(targets, whole.targets) << "world " << world << ", step " << step;
    }
  }
}

TEST(SyntheticDataTokens, TargetsAreInputsShiftedByOne) {
  const std::int64_t batch = 5, seq = 12, vocab = 97;
  const Tokens t = tokens(3, 2, batch, seq, vocab, 0, batch);
  for (std::int64_t r = 0; r < batch; ++r)
    for (std::int64_t i = 0; i + 1 < seq; ++i)
      EXPECT_EQ(t.targets[static_cast<std::size_t>(r * seq + i)], t.inputs[static_cast<std::size_t>(r * seq + i + 1)]);
  for (const std::int32_t v : t.inputs) ASSERT_TRUE(0 <= v && v < vocab) << v;
  for (const std::int32_t v : t.targets) ASSERT_TRUE(0 <= v && v < vocab) << v;
  EXPECT_NE(tokens(3, 3, batch, seq, vocab, 0, batch).inputs, t.inputs) << "steps must differ";
  EXPECT_NE(tokens(4, 2, batch, seq, vocab, 0, batch).inputs, t.inputs) << "seeds must differ";
}

// What `python3 tests/reference/counter_rng.py` prints: the PyTorch reference sees these batches.
TEST(SyntheticDataTokens, MatchesPythonReference) {
  const Tokens t = tokens(1234, 3, 4, 12, 50257, 1, 3);
  const std::vector<std::int32_t> inputs = {42207, 30255, 47730, 40119, 12166, 1855,  47600, 1854,
                                            21140, 30255, 47730, 40119, 28661, 45119, 9672,  46421,
                                            47421, 39212, 20209, 35650, 28661, 45119, 9672,  46421};
  const std::vector<std::int32_t> targets = {30255, 47730, 40119, 12166, 1855,  47600, 1854,  21140,
                                             30255, 47730, 40119, 12166, 45119, 9672,  46421, 47421,
                                             39212, 20209, 35650, 28661, 45119, 9672,  46421, 47421};
  EXPECT_EQ(t.inputs, inputs);
  EXPECT_EQ(t.targets, targets);
}

// Learnable: a token equals the one kTokenPeriod back unless either is noise, probability
// (15/16)^2 = 0.879; with 64 rows of 64 the standard error is 0.005. Neighbours are rarely equal, so
// the rule is the period, not a constant row.
TEST(SyntheticDataTokens, RowsRepeatAMotifWithNoise) {
  const std::int64_t batch = 64, seq = 64;
  const Tokens t = tokens(11, 0, batch, seq, 50257, 0, batch);
  int periodic = 0, neighbours = 0, pairs = 0;
  for (std::int64_t r = 0; r < batch; ++r)
    for (std::int64_t i = kTokenPeriod; i < seq; ++i, ++pairs) {
      const auto at = [&](std::int64_t j) { return t.inputs[static_cast<std::size_t>(r * seq + j)]; };
      periodic += at(i) == at(i - kTokenPeriod);
      neighbours += at(i) == at(i - 1);
    }
  EXPECT_NEAR(static_cast<double>(periodic) / pairs, 0.879, 0.025);
  EXPECT_LT(static_cast<double>(neighbours) / pairs, 0.01);
}

TEST(SyntheticDataTokens, RejectsBadArguments) {
  std::vector<std::int32_t> in(24), out(24);
  EXPECT_TRUE(contains(error_of([&] { synthetic_tokens(1, 0, 4, 12, 100, 1, 3, in, std::span(out).first(23)); }),
                       "targets holds 23 elements, expected 24"));
  EXPECT_TRUE(contains(error_of([&] { synthetic_tokens(1, 0, 4, 12, 100, 3, 5, in, out); }),
                       "expected rows 0 <= begin <= end <= 4, got [3, 5)"));
  EXPECT_TRUE(contains(error_of([&] { synthetic_tokens(1, 0, 4, 12, 0, 1, 3, in, out); }), "0 < vocab"));
}

// ---- regression --------------------------------------------------------------------------------

struct Pairs {
  std::vector<float> x, y;
};

Pairs pairs(std::uint64_t seed, std::int64_t step, std::int64_t batch, std::int64_t in, std::int64_t out,
            std::int64_t row_begin, std::int64_t row_end) {
  Pairs p;
  p.x.resize(static_cast<std::size_t>((row_end - row_begin) * in));
  p.y.resize(static_cast<std::size_t>((row_end - row_begin) * out));
  synthetic_regression(seed, step, batch, in, out, row_begin, row_end, p.x, p.y);
  return p;
}

TEST(SyntheticDataRegression, GlobalBatchIsTheSameForEveryWorldSize) {
  for (const auto& [in, out] : {std::pair<std::int64_t, std::int64_t>{10, 5}, {16, 16}}) {
    const std::int64_t batch = 7;
    const Pairs whole = pairs(5, 3, batch, in, out, 0, batch);
    for (int world = 1; world <= 4; ++world) {
      const auto x = concatenated<float>(batch, world, in, [&](auto begin, auto end, auto dst) {
        const Pairs part = pairs(5, 3, batch, in, out, begin, end);
        std::copy(part.x.begin(), part.x.end(), dst.begin());
      });
      const auto y = concatenated<float>(batch, world, out, [&](auto begin, auto end, auto dst) {
        const Pairs part = pairs(5, 3, batch, in, out, begin, end);
        std::copy(part.y.begin(), part.y.end(), dst.begin());
      });
      EXPECT_EQ(x, whole.x) << "world " << world << ", in " << in;
      EXPECT_EQ(y, whole.y) << "world " << world << ", in " << in;
    }
  }
}

// From `python3 tests/reference/counter_rng.py`; normals within one float ulp (2^-23 relative), for
// the libm reason given in test_counter_rng.cpp.
TEST(SyntheticDataRegression, MatchesPythonReference) {
  const Pairs p = pairs(1234, 2, 6, 10, 5, 4, 5);
  const double x[] = {0.675886333, 0.724347234,  1.42679858,  0.380629718, -0.928581834,
                      0.652141631, -0.762989044, -1.65640998, 1.21546304,  1.39472771};
  const double y[] = {0.105103247, -0.895892739, -0.727874458, -2.44956732, -1.6005826};
  for (int i = 0; i < 10; ++i) EXPECT_NEAR(p.x[i], x[i], std::abs(x[i]) * 0x1p-23) << i;
  for (int o = 0; o < 5; ++o) EXPECT_NEAR(p.y[o], y[o], std::abs(y[o]) * 0x1p-23) << o;
}

// y - A x is the noise: std 0.01 (320 samples: standard error 0.0004), and the same A at every step.
TEST(SyntheticDataRegression, YIsAFixedLinearMapOfXPlusSmallNoise) {
  const std::int64_t in = 10, out = 5, batch = 64;
  std::vector<float> map(in * out);
  synthetic_regression_map(5, in, out, map);
  for (const std::int64_t step : {0, 9}) {
    const Pairs p = pairs(5, step, batch, in, out, 0, batch);
    double sum_sq = 0, y_sq = 0;
    for (std::int64_t r = 0; r < batch; ++r)
      for (std::int64_t o = 0; o < out; ++o) {
        double ax = 0;
        for (std::int64_t i = 0; i < in; ++i) ax += static_cast<double>(map[o * in + i]) * p.x[r * in + i];
        const double residual = p.y[r * out + o] - ax;
        sum_sq += residual * residual;
        y_sq += static_cast<double>(p.y[r * out + o]) * p.y[r * out + o];
      }
    EXPECT_NEAR(std::sqrt(sum_sq / (batch * out)), kRegressionNoiseStd, 0.002) << "step " << step;
    EXPECT_NEAR(std::sqrt(y_sq / (batch * out)), 1.0, 0.25) << "y has about unit scale, step " << step;
  }
}

TEST(SyntheticDataRegression, RejectsBadArguments) {
  std::vector<float> x(20), y(10);
  EXPECT_TRUE(contains(error_of([&] { synthetic_regression(1, 0, 4, 10, 5, 0, 2, x, std::span(y).first(9)); }),
                       "y holds 9 elements, expected 10"));
  EXPECT_TRUE(
      contains(error_of([&] { synthetic_regression(1, -1, 4, 10, 5, 0, 2, x, y); }), "expected step >= 0, got -1"));
}

// ---- token files -------------------------------------------------------------------------------

class SyntheticDataTokenFile : public ::testing::Test {
 protected:
  static constexpr std::int64_t kBatch = 4, kSeq = 8, kVocab = 50257;

  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fsdplab_tokens_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A file of `count` tokens, token k = (k * 37 + 11) % 50000, written little-endian byte by byte.
  std::string write_tokens(const std::string& name, std::int64_t count) {
    std::vector<std::uint16_t> values(static_cast<std::size_t>(count));
    for (std::int64_t k = 0; k < count; ++k) values[k] = static_cast<std::uint16_t>((k * 37 + 11) % 50000);
    return write_values(name, values);
  }
  std::string write_values(const std::string& name, const std::vector<std::uint16_t>& values) {
    std::string bytes;
    for (const std::uint16_t v : values) {
      bytes += static_cast<char>(v & 0xff);
      bytes += static_cast<char>(v >> 8);
    }
    return write_bytes(name, bytes);
  }
  std::string write_bytes(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }

  static Tokens read(const TokenFile& file, std::int64_t step, std::int64_t row_begin, std::int64_t row_end) {
    Tokens t;
    t.inputs.resize(static_cast<std::size_t>((row_end - row_begin) * kSeq));
    t.targets.resize(t.inputs.size());
    file.read(step, row_begin, row_end, t.inputs, t.targets);
    return t;
  }

  // Tokens of the file written by write_tokens, at positions start, start+1, ... modulo its size.
  static std::vector<std::int32_t> expected(std::int64_t start, std::int64_t count, std::int64_t file_tokens) {
    std::vector<std::int32_t> out;
    for (std::int64_t k = 0; k < count; ++k)
      out.push_back(static_cast<std::int32_t>(((start + k) % file_tokens * 37 + 11) % 50000));
    return out;
  }

  fs::path dir_;
};

TEST_F(SyntheticDataTokenFile, StepsReadConsecutiveWindowsAndRanksTheirRows) {
  const std::int64_t n = 1000;
  TokenFile file(write_tokens("train.bin", n), kBatch, kSeq, kVocab);
  EXPECT_EQ(file.tokens(), n);
  for (const std::int64_t step : {0, 3}) {
    const Tokens whole = read(file, step, 0, kBatch);
    EXPECT_EQ(whole.inputs, expected(step * kBatch * kSeq, kBatch * kSeq, n)) << "step " << step;
    EXPECT_EQ(whole.targets, expected(step * kBatch * kSeq + 1, kBatch * kSeq, n)) << "step " << step;
    for (int world = 1; world <= 4; ++world) {
      const auto inputs = concatenated<std::int32_t>(kBatch, world, kSeq, [&](auto begin, auto end, auto out) {
        const Tokens part = read(file, step, begin, end);
        std::copy(part.inputs.begin(), part.inputs.end(), out.begin());
      });
      const auto targets = concatenated<std::int32_t>(kBatch, world, kSeq, [&](auto begin, auto end, auto out) {
        const Tokens part = read(file, step, begin, end);
        std::copy(part.targets.begin(), part.targets.end(), out.begin());
      });
      EXPECT_EQ(inputs, whole.inputs) << "world " << world;
      EXPECT_EQ(targets, whole.targets) << "world " << world;
    }
  }
}

// 2*B*T + 5 = 69 tokens: step 2 starts at 64 and wraps after 5 tokens; step 3 starts at 96 % 69 = 27;
// rank 1 of 2 at step 2 starts at 80 % 69 = 11, past the wrap.
TEST_F(SyntheticDataTokenFile, WrapsAroundAtTheEndOfTheFile) {
  const std::int64_t n = 2 * kBatch * kSeq + 5;
  TokenFile file(write_tokens("short.bin", n), kBatch, kSeq, kVocab);
  Tokens t = read(file, 2, 0, kBatch);
  EXPECT_EQ(t.inputs, expected(64, kBatch * kSeq, n));
  EXPECT_EQ(t.targets, expected(65, kBatch * kSeq, n));
  EXPECT_EQ(t.inputs[5], expected(0, 1, n)[0]) << "token 5 of the window is token 0 of the file";
  EXPECT_EQ(read(file, 3, 0, kBatch).inputs, expected(27, kBatch * kSeq, n));
  t = read(file, 2, 2, 4);
  EXPECT_EQ(t.inputs, expected(11, 2 * kSeq, n));
  EXPECT_EQ(t.targets, expected(12, 2 * kSeq, n));
  // Exactly B*T+1 tokens: every step reads the whole file, rotated by step*B*T.
  const std::int64_t tight = kBatch * kSeq + 1;
  TokenFile exact(write_tokens("exact.bin", tight), kBatch, kSeq, kVocab);
  EXPECT_EQ(read(exact, 7, 0, kBatch).targets, expected((7 * kBatch * kSeq + 1) % tight, kBatch * kSeq, tight));
}

TEST_F(SyntheticDataTokenFile, ErrorsNameTheFileAndWhatWasExpected) {
  const std::string missing = (dir_ / "missing.bin").string();
  std::string message = error_of([&] { TokenFile(missing, kBatch, kSeq, kVocab); });
  EXPECT_TRUE(contains(message, "'" + missing + "'")) << message;
  EXPECT_TRUE(contains(message, "cannot read token file '" + missing + "': cannot open it")) << message;
  message = error_of([&] { TokenFile(dir_.string(), kBatch, kSeq, kVocab); });
  EXPECT_TRUE(contains(message, "it is a directory; expected a regular file (little-endian uint16 tokens")) << message;

  const std::string odd = write_bytes("odd.bin", std::string(71, '\0'));
  message = error_of([&] { TokenFile(odd, kBatch, kSeq, kVocab); });
  EXPECT_TRUE(contains(message, "'" + odd + "' holds 71 bytes, an odd count; expected little-endian uint16"))
      << message;

  const std::string small = write_tokens("small.bin", kBatch * kSeq);
  message = error_of([&] { TokenFile(small, kBatch, kSeq, kVocab); });
  EXPECT_TRUE(contains(message, "'" + small + "' holds 32 tokens; expected at least B*T+1 = 33 for batch 4 and seq 8"))
      << message;

  // Token 45 (row 1 of step 1) is out of the vocabulary: rank 0 of 4 never reads it, rank 1 names it.
  std::vector<std::uint16_t> values(100, 7);
  values[45] = 60000;
  const std::string bad = write_values("bad.bin", values);
  TokenFile file(bad, kBatch, kSeq, kVocab);
  EXPECT_NO_THROW(read(file, 1, 0, 1));
  message = error_of([&] { read(file, 1, 1, 2); });
  EXPECT_TRUE(contains(message, "'" + bad + "': token 45 is 60000; expected a token < vocab 50257")) << message;

  std::vector<std::int32_t> in(kSeq), out(kSeq - 1);
  message = error_of([&] { file.read(0, 0, 1, in, out); });
  EXPECT_TRUE(contains(message, "targets holds 7 elements, expected 8")) << message;

  fs::resize_file(bad, 10);  // shortened after it was opened: reads fail, saying where
  message = error_of([&] { read(file, 0, 0, 1); });
  EXPECT_TRUE(contains(message, "'" + bad + "': 18 bytes at byte 0 of the 200 it had when opened, and 10 are there"))
      << message;
}

// A run reads the whole file before its first step (BatchSource::check_every_token), so a token outside the
// vocabulary stops it there, not at the step that reaches it; the file is read in pieces, and the one named is the
// first, wherever it lies.
TEST_F(SyntheticDataTokenFile, EveryTokenIsCheckedAcrossTheFileBeforeAnyStep) {
  std::vector<std::uint16_t> values(600000, 7);  // more than one piece of 2^19 tokens
  const std::string good = write_values("good.bin", values);
  EXPECT_NO_THROW(TokenFile(good, kBatch, kSeq, kVocab).check_every_token());
  values[550000] = 50257;
  values[599999] = 65535;
  const std::string bad = write_values("bad.bin", values);
  const std::string message = error_of([&] { TokenFile(bad, kBatch, kSeq, kVocab).check_every_token(); });
  EXPECT_TRUE(contains(message, "'" + bad + "': token 550000 is 50257; expected a token < vocab 50257")) << message;
}

}  // namespace
}  // namespace fsdplab
