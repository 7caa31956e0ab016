// synthetic_data.cpp — seeded synthetic tokens and regression pairs, and the token-file reader.
#include "engine/train/synthetic_data.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/nn/counter_rng.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab {

namespace {

// A token is replaced by a random one when word 0 >> 28 == 0: probability 1/16.
constexpr int kTokenNoiseShift = 28;

// floor(word * vocab / 2^32): a word spread over [0, vocab) with integer arithmetic only, so the
// Python twin agrees without thinking about float rounding.
std::int32_t token_of(std::uint32_t word, std::int64_t vocab) {
  return static_cast<std::int32_t>((std::uint64_t{word} * static_cast<std::uint64_t>(vocab)) >> 32);
}

void check_rows(const char* what, std::int64_t step, std::int64_t batch, std::int64_t row_begin, std::int64_t row_end) {
  check(step >= 0, what, ": expected step >= 0, got ", step);
  check(batch > 0, what, ": expected batch > 0, got ", batch);
  check(0 <= row_begin && row_begin <= row_end && row_end <= batch, what,
        ": expected rows 0 <= begin <= end <= ", batch, ", got [", row_begin, ", ", row_end, ")");
}

template <class T>
void check_span(const char* what, const char* name, std::span<T> span, std::int64_t expected) {
  check(static_cast<std::int64_t>(span.size()) == expected, what, ": ", name, " holds ", span.size(),
        " elements, expected ", expected);
}

}  // namespace

RowRange rank_rows(std::int64_t batch, int rank, int world) {
  check(world > 0 && 0 <= rank && rank < world, "rank_rows: expected 0 <= rank < world, got rank ", rank, " of world ",
        world);
  check(batch >= 0, "rank_rows: expected batch >= 0, got ", batch);
  return {rank * batch / world, (rank + 1) * batch / world};
}

void synthetic_tokens(std::uint64_t seed, std::int64_t step, std::int64_t batch, std::int64_t seq, std::int64_t vocab,
                      std::int64_t row_begin, std::int64_t row_end, std::span<std::int32_t> inputs,
                      std::span<std::int32_t> targets) {
  check_rows("synthetic_tokens", step, batch, row_begin, row_end);
  check(seq > 0, "synthetic_tokens: expected seq > 0, got ", seq);
  check(0 < vocab && vocab <= std::numeric_limits<std::int32_t>::max(),
        "synthetic_tokens: expected 0 < vocab < 2^31, got ", vocab);
  const std::int64_t rows = row_end - row_begin;
  check_span("synthetic_tokens", "inputs", inputs, rows * seq);
  check_span("synthetic_tokens", "targets", targets, rows * seq);

  const std::uint64_t key = stream_key("synthetic.tokens");
  std::vector<std::int32_t> row_tokens(static_cast<std::size_t>(seq + 1));
  std::int32_t motif[kTokenPeriod] = {};
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto sample = static_cast<std::uint64_t>(step * batch + row_begin + r);
    const std::uint64_t base = sample * static_cast<std::uint64_t>(seq + 1);
    for (std::int64_t t = 0; t <= seq; ++t) {
      const PhiloxCounter w = philox_at(seed, key, base + static_cast<std::uint64_t>(t));
      // Call t < period sets motif[t] before position t reads it: motif[t % period] == motif[t].
      if (t < kTokenPeriod) motif[t] = token_of(w[2], vocab);
      row_tokens[static_cast<std::size_t>(t)] =
          (w[0] >> kTokenNoiseShift) == 0 ? token_of(w[1], vocab) : motif[t % kTokenPeriod];
    }
    for (std::int64_t t = 0; t < seq; ++t) {
      inputs[static_cast<std::size_t>(r * seq + t)] = row_tokens[static_cast<std::size_t>(t)];
      targets[static_cast<std::size_t>(r * seq + t)] = row_tokens[static_cast<std::size_t>(t + 1)];
    }
  }
}

void synthetic_regression_map(std::uint64_t seed, std::int64_t in_features, std::int64_t out_features,
                              std::span<float> map) {
  check(in_features > 0 && out_features > 0, "synthetic_regression_map: expected positive sizes, got in ", in_features,
        ", out ", out_features);
  check_span("synthetic_regression_map", "map", map, in_features * out_features);
  const auto stddev = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in_features)));
  fill_normal(map, seed, stream_key("synthetic.regression.map"), 0, 0.f, stddev);
}

void synthetic_regression(std::uint64_t seed, std::int64_t step, std::int64_t batch, std::int64_t in_features,
                          std::int64_t out_features, std::int64_t row_begin, std::int64_t row_end, std::span<float> x,
                          std::span<float> y) {
  check_rows("synthetic_regression", step, batch, row_begin, row_end);
  const std::int64_t rows = row_end - row_begin;
  check_span("synthetic_regression", "x", x, rows * in_features);
  check_span("synthetic_regression", "y", y, rows * out_features);
  std::vector<float> map(static_cast<std::size_t>(in_features * out_features));
  synthetic_regression_map(seed, in_features, out_features, map);

  const std::uint64_t key_x = stream_key("synthetic.regression.x");
  const std::uint64_t key_noise = stream_key("synthetic.regression.noise");
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto sample = static_cast<std::uint64_t>(step * batch + row_begin + r);
    const std::span<float> xr =
        x.subspan(static_cast<std::size_t>(r * in_features), static_cast<std::size_t>(in_features));
    fill_normal(xr, seed, key_x, sample * static_cast<std::uint64_t>(in_features), 0.f, 1.f);
    for (std::int64_t o = 0; o < out_features; ++o) {
      double acc = 0;  // float products are exact in double; the order of the sum is fixed
      for (std::int64_t i = 0; i < in_features; ++i)
        acc +=
            static_cast<double>(map[static_cast<std::size_t>(o * in_features + i)]) * xr[static_cast<std::size_t>(i)];
      const float noise =
          normal_at(seed, key_noise, sample * static_cast<std::uint64_t>(out_features) + static_cast<std::uint64_t>(o),
                    0.f, kRegressionNoiseStd);
      y[static_cast<std::size_t>(r * out_features + o)] = static_cast<float>(acc + noise);
    }
  }
}

TokenFile::TokenFile(std::string path, std::int64_t batch, std::int64_t seq, std::int64_t vocab)
    : path_(std::move(path)),
      file_(path_, "token file", "little-endian uint16 tokens, as nanoGPT and llm.c write them"),
      batch_(batch),
      seq_(seq),
      vocab_(vocab) {
  check(batch > 0 && seq > 0 && vocab > 0, "token file '", path_, "': expected positive batch, seq and vocab, got ",
        batch, ", ", seq, ", ", vocab);
  const std::uint64_t bytes = file_.size();
  check(bytes % 2 == 0, "token file '", path_, "' holds ", bytes,
        " bytes, an odd count; expected little-endian uint16 tokens, 2 bytes each");
  tokens_ = static_cast<std::int64_t>(bytes / 2);
  check(tokens_ >= batch * seq + 1, "token file '", path_, "' holds ", tokens_,
        " tokens; expected at least B*T+1 = ", batch * seq + 1, " for batch ", batch, " and seq ", seq);
}

int TokenFile::token_at(std::span<const std::byte> bytes, std::int64_t k, std::int64_t position) const {
  const auto at = static_cast<std::size_t>(2 * k);
  const int value = std::to_integer<int>(bytes[at]) | (std::to_integer<int>(bytes[at + 1]) << 8);  // little-endian
  check(value < vocab_, "token file '", path_, "': token ", position, " is ", value, "; expected a token < vocab ",
        vocab_, " (the model's: was the file made by another tokenizer?)");
  return value;
}

FileDigest TokenFile::check_every_token() const {
  constexpr std::int64_t kChunk = 1 << 19;  // tokens a read: 1 MiB
  std::vector<std::byte> bytes(static_cast<std::size_t>(2 * kChunk));
  FileDigest digest;
  for (std::int64_t begin = 0; begin < tokens_; begin += kChunk) {
    const std::int64_t n = std::min(kChunk, tokens_ - begin);
    const std::span<std::byte> chunk(bytes.data(), static_cast<std::size_t>(2 * n));
    file_.read_at(static_cast<std::uint64_t>(2 * begin), chunk);
    for (std::int64_t k = 0; k < n; ++k) token_at(chunk, k, begin + k);
    digest.crc32 = crc32(digest.crc32, chunk);
    digest.bytes += chunk.size();
  }
  return digest;
}

void TokenFile::read(std::int64_t step, std::int64_t row_begin, std::int64_t row_end, std::span<std::int32_t> inputs,
                     std::span<std::int32_t> targets) const {
  check_rows("token file read", step, batch_, row_begin, row_end);
  const std::int64_t rows = row_end - row_begin;
  check_span("token file read", "inputs", inputs, rows * seq_);
  check_span("token file read", "targets", targets, rows * seq_);
  check(step <= std::numeric_limits<std::int64_t>::max() / (batch_ * seq_) - 1, "token file '", path_, "': step ", step,
        " is too large to address");

  // The rows' tokens and the one after them: at most B*T+1 <= tokens_, so they wrap at most once.
  const std::int64_t count = rows * seq_ + 1;
  const std::int64_t start = (step * batch_ * seq_ + row_begin * seq_) % tokens_;
  std::vector<std::byte> bytes(static_cast<std::size_t>(2 * count));
  const std::int64_t first = std::min(count, tokens_ - start);
  const auto read_at = [&](std::int64_t token, std::int64_t n, std::int64_t into) {
    file_.read_at(static_cast<std::uint64_t>(2 * token),
                  std::span<std::byte>(bytes.data() + 2 * into, static_cast<std::size_t>(2 * n)));
  };
  read_at(start, first, 0);
  if (first < count) read_at(0, count - first, first);

  std::vector<std::int32_t> tokens(static_cast<std::size_t>(count));
  for (std::int64_t k = 0; k < count; ++k)
    tokens[static_cast<std::size_t>(k)] = token_at(bytes, k, (start + k) % tokens_);
  for (std::int64_t i = 0; i < rows * seq_; ++i) {
    inputs[static_cast<std::size_t>(i)] = tokens[static_cast<std::size_t>(i)];
    targets[static_cast<std::size_t>(i)] = tokens[static_cast<std::size_t>(i + 1)];
  }
}

}  // namespace fsdplab
