#include "engine/comm/rank_order_reduction.hpp"

#include <cstring>

#include "engine/tensor/bf16.hpp"

namespace fsdplab {

std::vector<float> reduce_in_rank_order(const std::vector<const std::byte*>& inputs, std::size_t offset,
                                        std::int64_t count, DType dtype, ReduceOp op) {
  std::vector<float> sum(static_cast<std::size_t>(count), 0.f);
  for (const std::byte* input : inputs) {
    const std::byte* src = input + offset;
    for (std::size_t k = 0; k < sum.size(); ++k) {
      if (dtype == DType::f32) {
        float v;
        std::memcpy(&v, src + k * sizeof v, sizeof v);
        sum[k] += v;
      } else {
        std::uint16_t v;
        std::memcpy(&v, src + k * sizeof v, sizeof v);
        sum[k] += bf16_to_float(v);
      }
    }
  }
  if (op == ReduceOp::avg)
    for (float& v : sum) v /= static_cast<float>(inputs.size());
  return sum;
}

void store_reduced(std::byte* dst, const std::vector<float>& values, DType dtype) {
  if (dtype == DType::f32) {
    std::memcpy(dst, values.data(), values.size() * sizeof(float));
    return;
  }
  for (std::size_t k = 0; k < values.size(); ++k) {
    const std::uint16_t v = float_to_bf16(values[k]);  // the one rounding
    std::memcpy(dst + k * sizeof v, &v, sizeof v);
  }
}

}  // namespace fsdplab
