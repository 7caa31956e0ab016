#include "engine/train/batch_source.hpp"

#include <vector>

#include "engine/runtime/error.hpp"

namespace fsdplab {

BatchSource::BatchSource(BatchShape shape, std::uint64_t seed, const std::string& token_file)
    : shape_(shape), seed_(seed) {
  if (!token_file.empty()) {
    check(shape.kind == BatchShape::Kind::tokens, "--data '", token_file,
          "': token files feed the token models (gpt2, llama), not regression ones (toy, mlp)");
    file_.emplace(token_file, shape.batch, shape.seq, shape.vocab);
  }
}

std::optional<FileDigest> BatchSource::check_every_token() const {
  if (!file_) return std::nullopt;
  return file_->check_every_token();
}

Batch BatchSource::batch(Device& device, std::int64_t step, int rank, int world, int micro, int micro_batches) {
  const RowRange all = rank_rows(shape_.batch, rank, world);
  const std::int64_t per_rank = all.end - all.begin;
  check(micro_batches >= 1 && per_rank % micro_batches == 0 && micro >= 0 && micro < micro_batches, "micro-batch ",
        micro, " of ", micro_batches, ": a rank's ", per_rank, " rows must split evenly into --accumulate ",
        micro_batches, " micro-batches");
  const std::int64_t n = per_rank / micro_batches;
  const RowRange rows{all.begin + micro * n, all.begin + (micro + 1) * n};
  if (device.dry_run()) {  // shapes and memory only: there is nothing to write into
    return shape_.kind == BatchShape::Kind::regression
               ? Batch{Tensor::empty(device, {n, shape_.in}, DType::f32, MemTag::activation, "inputs"),
                       Tensor::empty(device, {n, shape_.out}, DType::f32, MemTag::activation, "targets")}
               : Batch{Tensor::empty(device, {n, shape_.seq}, DType::i32, MemTag::activation, "input ids"),
                       Tensor::empty(device, {n, shape_.seq}, DType::i32, MemTag::activation, "target ids")};
  }
  if (shape_.kind == BatchShape::Kind::regression) {
    std::vector<float> x(static_cast<std::size_t>(n * shape_.in)), y(static_cast<std::size_t>(n * shape_.out));
    synthetic_regression(seed_, step, shape_.batch, shape_.in, shape_.out, rows.begin, rows.end, x, y);
    Batch b{Tensor::empty(device, {n, shape_.in}, DType::f32, MemTag::activation, "inputs"),
            Tensor::empty(device, {n, shape_.out}, DType::f32, MemTag::activation, "targets")};
    b.inputs.copy_from(x);
    b.targets.copy_from(y);
    return b;
  }
  std::vector<std::int32_t> inputs(static_cast<std::size_t>(n * shape_.seq)), targets(inputs.size());
  if (file_) {
    file_->read(step, rows.begin, rows.end, inputs, targets);
  } else {
    synthetic_tokens(seed_, step, shape_.batch, shape_.seq, shape_.vocab, rows.begin, rows.end, inputs, targets);
  }
  Batch b{Tensor::empty(device, {n, shape_.seq}, DType::i32, MemTag::activation, "input ids"),
          Tensor::empty(device, {n, shape_.seq}, DType::i32, MemTag::activation, "target ids")};
  b.inputs.copy_from(std::span<const std::int32_t>(inputs));
  b.targets.copy_from(std::span<const std::int32_t>(targets));
  return b;
}

}  // namespace fsdplab
