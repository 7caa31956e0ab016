#include "engine/nn/materialize.hpp"

#include <vector>

namespace fsdplab {

void init_values(Module& model, std::uint64_t seed) {
  for (Parameter* p : model.parameters()) {
    std::vector<float> values(static_cast<std::size_t>(p->numel()));
    p->init.fill(values, seed, p->name, 0);
    p->value.copy_from(values);
  }
}

}  // namespace fsdplab
