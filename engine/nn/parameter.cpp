#include "engine/nn/parameter.hpp"

#include <algorithm>

#include "engine/nn/counter_rng.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab {

void ParamInit::fill(std::span<float> out, std::uint64_t seed, std::string_view name, std::uint64_t first_index) const {
  switch (kind) {
    case Kind::normal:
      fill_normal(out, seed, stream_key(name), first_index, a, b);
      break;
    case Kind::uniform:
      fill_uniform(out, seed, stream_key(name), first_index, a, b);
      break;
    case Kind::constant:
      std::fill(out.begin(), out.end(), a);
      break;
  }
  if (first_index + out.size() > zero_from) {
    const std::uint64_t zeros_begin = std::max(zero_from, first_index) - first_index;
    std::fill(out.begin() + static_cast<std::ptrdiff_t>(zeros_begin), out.end(), 0.f);
  }
}

Shape Parameter::logical_shape() const {
  Shape s = shape;
  if (padding_rows > 0) s[0] -= padding_rows;
  return s;
}

const Tensor& value_of(const Parameter& p) {
  check(p.value.defined(), "parameter '", p.name, "' has no value: materialise the model before running it");
  return p.value;
}

const Tensor& grad_of(const Parameter& p) {
  check(p.grad.defined(), "parameter '", p.name, "' has no gradient buffer: the trainer provides one before backward");
  return p.grad;
}

}  // namespace fsdplab
