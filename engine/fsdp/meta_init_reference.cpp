// The reference meta init (task 1).
#include <vector>

#include "engine/fsdp/fsdp_tasks.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

class ReferenceMetaInit final : public MetaInitTask {
 public:
  void init_shard(const FlatParameterTask& flat, const FlatParamLayout& layout, int rank, const Tensor& shard,
                  std::uint64_t seed) const override {
    check(shard.dtype() == DType::f32 && shard.numel() == layout.shard_numel(), "init_shard: expected an f32 shard of ",
          layout.shard_numel(), " elements, got ", shard.describe());
    if (shard.device().dry_run()) return;  // a dry run keeps shapes and memory, not values
    std::vector<float> values(static_cast<std::size_t>(layout.shard_numel()), 0.0f);  // padding stays zero
    const std::span<float> all(values);
    for (const ShardSlice& s : flat.shard_slices(layout, rank))
      s.param->init.fill(all.subspan(static_cast<std::size_t>(s.shard_offset), static_cast<std::size_t>(s.count)),
                         seed, s.param->name, static_cast<std::uint64_t>(s.param_begin));
    shard.device().synchronize();  // the host writes memory the device may have used before
    shard.copy_from(values);
  }
};

}  // namespace

const MetaInitTask& reference_meta_init() {
  static const ReferenceMetaInit task;
  return task;
}

}  // namespace fsdplab
