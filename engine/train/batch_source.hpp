// batch_source.hpp — a step's batch for one rank, as tensors on its device.
//
// Wraps the sources of synthetic_data.hpp: regression pairs for toy and mlp, token sequences for
// gpt2 and llama (synthetic, or read from a token file). Whatever the world size, the global batch of a step
// is the same and rank r receives rows [r*B/W, (r+1)*B/W), so losses compare across world sizes.
#pragma once
#include <optional>

#include "engine/nn/model.hpp"
#include "engine/train/synthetic_data.hpp"

namespace fsdplab {

struct BatchShape {
  enum class Kind { regression, tokens } kind = Kind::regression;
  std::int64_t batch = 0;         // global rows
  std::int64_t in = 0, out = 0;   // regression features
  std::int64_t seq = 0, vocab = 0;  // tokens
};

class BatchSource {
 public:
  // `token_file` empty: synthetic data from `seed`.
  BatchSource(BatchShape shape, std::uint64_t seed, const std::string& token_file);
  // Rank `rank` of `world`'s rows of step `step`. The host writes the tensors, so the device must
  // not be running anything that could still read their (reused) memory: the caller synchronises.
  // On a dry-run device the tensors are allocated and left unwritten.
  // With `micro_batches` > 1, micro-batch `micro` of them: the rank's rows split evenly, in order.
  Batch batch(Device& device, std::int64_t step, int rank, int world, int micro = 0, int micro_batches = 1);
  // A token file read through before the first step, an Error naming its first token outside the vocabulary, and
  // its digest (TokenFile::check_every_token); nullopt for synthetic data, which has nothing to check.
  std::optional<FileDigest> check_every_token() const;

 private:
  BatchShape shape_;
  std::uint64_t seed_;
  std::optional<TokenFile> file_;
};

}  // namespace fsdplab
