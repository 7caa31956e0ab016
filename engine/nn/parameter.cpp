#include "engine/nn/parameter.hpp"

#include <algorithm>

#include "engine/nn/counter_rng.hpp"

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

}  // namespace fsdplab
