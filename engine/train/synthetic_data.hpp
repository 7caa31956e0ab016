// synthetic_data.hpp — where the training batches come from: seeded synthetic data, and token files.
//
// Data parallelism splits a step's global batch of B rows over the W ranks; rank r takes the
// contiguous rows [r*B/W, (r+1)*B/W) (rank_rows). So that FSDP at any W trains on exactly what the
// single-rank baseline trains on, every source here defines the global batch of a step without
// reference to W, and a rank generates or reads only its own rows: row g of step s is sample
// n = s*B + g of an endless stream of samples, a pure function of (seed, n) through counter_rng.
// tests/reference/counter_rng.py reproduces the synthetic sources bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "engine/runtime/input_file.hpp"
#include "engine/train/crc32.hpp"

namespace fsdplab {

struct RowRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
};
// Rank `rank` of `world` takes rows [rank*B/world, (rank+1)*B/world) of a global batch of B.
RowRange rank_rows(std::int64_t batch, int rank, int world);

// Token sequences for the language models (gpt2, llama), learnable so the loss falls. Each row is a random motif
// of kTokenPeriod tokens repeated, and each position is independently replaced by a random token with
// probability 1/16. A model can predict a token by copying the one kTokenPeriod back (attention to a fixed
// offset, learnable from the positions, GPT-2's embeddings or Llama's rotary angles, in one layer), so the loss
// falls from ln V towards roughly (kTokenPeriod/T + 1/16) ln V: a row's first period and the noise stay
// unpredictable. Token t of sample n is drawn from Philox call n*(T+1)+t of stream "synthetic.tokens": word 0
// decides noise (word0 >> 28 == 0), word 1 is the noise token, word 2 (of calls t < kTokenPeriod) the motif
// token; a word becomes a token as floor(word * V / 2^32). A row holds T+1 tokens:
// inputs are the first T, targets the last T. Fills rows [row_begin, row_end) of the global batch,
// row-major, into spans of (row_end - row_begin) * T.
inline constexpr int kTokenPeriod = 8;
void synthetic_tokens(std::uint64_t seed, std::int64_t step, std::int64_t batch, std::int64_t seq, std::int64_t vocab,
                      std::int64_t row_begin, std::int64_t row_end, std::span<std::int32_t> inputs,
                      std::span<std::int32_t> targets);

// Regression pairs for toy (in 10, out 5) and mlp (in d, out d): x ~ N(0, 1) (stream
// "synthetic.regression.x", index n*in + i), y = A x + N(0, 0.01^2) (noise stream
// "synthetic.regression.noise", index n*out + o), where A is fixed for a seed whatever the step
// (synthetic_regression_map). y is summed in double over i = 0, 1, ... and rounded to float once.
inline constexpr float kRegressionNoiseStd = 0.01f;
void synthetic_regression(std::uint64_t seed, std::int64_t step, std::int64_t batch, std::int64_t in_features,
                          std::int64_t out_features, std::int64_t row_begin, std::int64_t row_end, std::span<float> x,
                          std::span<float> y);
// The map A [out, in], A[o][i] ~ N(0, 1/in) (stream "synthetic.regression.map", index o*in + i), so
// y has about unit variance: what a trained toy model's weights should approach.
void synthetic_regression_map(std::uint64_t seed, std::int64_t in_features, std::int64_t out_features,
                              std::span<float> map);

// A token file in the nanoGPT / llm.c convention: no header, little-endian uint16 tokens. Step s
// reads the B*T+1 tokens starting at s*B*T, wrapping at the end of the file; inputs are the first
// B*T as B rows of T, targets the same shifted by one. Only the rows asked for are read, never the
// whole file; each read says where it starts, so rank threads may share one TokenFile and read at once.
class TokenFile {
 public:
  // An Error when the file is missing or not a regular file, its size is odd, or it holds fewer than B*T+1 tokens.
  TokenFile(std::string path, std::int64_t batch, std::int64_t seq, std::int64_t vocab);

  std::int64_t tokens() const { return tokens_; }
  // An Error naming the first token >= vocab, read through the whole file: a run checks it before its first step,
  // rather than stop at the step that reaches it (a tokenizer's file for another vocabulary fails at once). The
  // file's size and CRC-32 from the same read, which a training checkpoint records (checkpoint_run).
  FileDigest check_every_token() const;

  // Rows [row_begin, row_end) of step `step`; an Error naming the position of any token >= vocab.
  void read(std::int64_t step, std::int64_t row_begin, std::int64_t row_end, std::span<std::int32_t> inputs,
            std::span<std::int32_t> targets) const;

 private:
  // Token k of `bytes`, which sits at `position` in the file; an Error naming it where it is >= vocab.
  int token_at(std::span<const std::byte> bytes, std::int64_t k, std::int64_t position) const;

  std::string path_;
  InputFile file_;
  std::int64_t batch_;
  std::int64_t seq_;
  std::int64_t vocab_;
  std::int64_t tokens_ = 0;
};

}  // namespace fsdplab
