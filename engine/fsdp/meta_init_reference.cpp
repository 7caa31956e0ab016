// The reference meta init (task 1): draw this rank's shard, and nothing else, on the host.
#include <vector>

#include "engine/fsdp/meta_init.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

class ReferenceMetaInit final : public MetaInitTask {
 public:
  void init_shard(std::span<const ShardSlice> slices, const Tensor& shard, std::uint64_t seed) const override {
    check(shard.dtype() == DType::f32, "init_shard: expected an f32 shard, got ", shard.describe());
    if (shard.device().dry_run()) return;  // a dry run keeps shapes and memory, not values
    std::vector<float> values(static_cast<std::size_t>(shard.numel()), 0.0f);  // gaps and padding stay zero
    const std::span<float> all(values);
    for (const ShardSlice& s : slices) {
      check(s.shard_offset >= 0 && s.count >= 0 && s.shard_offset + s.count <= shard.numel(), "init_shard: slice of '",
            s.param->name, "' at [", s.shard_offset, ", ", s.shard_offset + s.count, ") of a shard of ", shard.numel(),
            " elements");
      // The parameter's elements [param_begin, param_begin + count), drawn at their own indices: the same
      // values the unsharded initialisation gives those elements.
      s.param->init.fill(all.subspan(static_cast<std::size_t>(s.shard_offset), static_cast<std::size_t>(s.count)), seed,
                         s.param->name, static_cast<std::uint64_t>(s.param_begin));
    }
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
