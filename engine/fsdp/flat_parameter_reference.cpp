// The reference FlatParameter (task 2): lay out, pad, slice, and point views.
#include <algorithm>
#include <set>

#include "engine/fsdp/flat_parameter.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

std::int64_t round_up(std::int64_t n, std::int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

class ReferenceFlatParameter final : public FlatParameterTask {
 public:
  FlatParamLayout plan(std::span<Parameter* const> params, int world, std::int64_t align) const override {
    check(!params.empty(), "FlatParameter: a unit with no parameters; expected at least one");
    check(world >= 1, "FlatParameter: world size ", world, "; expected at least 1");
    check(align >= 1, "FlatParameter: alignment ", align, " elements; expected at least 1");
    FlatParamLayout layout;
    layout.world = world;
    layout.align = align;
    std::set<const Parameter*> seen;
    std::int64_t end = 0;
    for (Parameter* p : params) {
      check(p != nullptr, "FlatParameter: a null parameter");
      check(seen.insert(p).second, "FlatParameter: parameter '", p->name,
            "' given twice (tied weights belong to one unit, once)");
      const std::int64_t offset = round_up(end, align);
      layout.entries.push_back({p, offset, p->numel()});
      end = offset + p->numel();
    }
    layout.used_numel = end;
    layout.padded_numel = round_up(std::max<std::int64_t>(end, 1), world);
    return layout;
  }

  std::vector<ShardSlice> shard_slices(const FlatParamLayout& layout, int rank) const override {
    check(rank >= 0 && rank < layout.world, "shard_slices: rank ", rank, " of a world of ", layout.world);
    const std::int64_t begin = rank * layout.shard_numel();
    const std::int64_t end = begin + layout.shard_numel();
    std::vector<ShardSlice> slices;
    for (const FlatParamEntry& e : layout.entries) {
      const std::int64_t lo = std::max(begin, e.offset);
      const std::int64_t hi = std::min(end, e.offset + e.numel);
      if (lo < hi) slices.push_back({e.param, lo - e.offset, hi - lo, lo - begin});
    }
    return slices;
  }

  void point_views(const FlatParamLayout& layout, const Tensor& flat, Tensor Parameter::*field) const override {
    check(flat.numel() == layout.padded_numel, "flat buffer ", flat.describe(), " for a FlatParameter of ",
          layout.padded_numel, " elements");
    for (const FlatParamEntry& e : layout.entries)
      (e.param->*field) = flat.view(e.offset, e.param->shape).set_name(e.param->name);
  }
};

}  // namespace

const FlatParameterTask& reference_flat_parameter() {
  static const ReferenceFlatParameter task;
  return task;
}

}  // namespace fsdplab
