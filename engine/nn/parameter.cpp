#include "engine/nn/parameter.hpp"

#include <algorithm>

#include "engine/nn/counter_rng.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab {

void ParamInit::fill(std::span<float> out, std::uint64_t seed, std::string_view name, std::uint64_t first_index) const {
  switch (kind) {
    case Kind::normal:
      fill_normal(out, seed, stream_key(name), first_index, a, b);
      return;
    case Kind::uniform:
      fill_uniform(out, seed, stream_key(name), first_index, a, b);
      return;
    case Kind::constant:
      std::fill(out.begin(), out.end(), a);
      return;
  }
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
