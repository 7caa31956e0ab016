// Task 1's mutants: MetaInitTask (engine/fsdp/meta_init.hpp), each the reference
// (engine/fsdp/meta_init_reference.cpp) with one pitfall of labs/01-meta-init/README.md. The grader's
// checks of task 1 (grader/checks/task1_meta_init.cpp) must catch every one and name its mistake.
#include <algorithm>
#include <vector>

#include "engine/fsdp/meta_init.hpp"
#include "engine/runtime/error.hpp"
#include "engine/tensor/elementwise.hpp"
#include "labs/mutants/mutants.hpp"

namespace fsdplab {
namespace {

std::span<float> slice_of(std::vector<float>& values, const ShardSlice& s) {
  return std::span<float>(values).subspan(static_cast<std::size_t>(s.shard_offset), static_cast<std::size_t>(s.count));
}

// The reference's draw of a slice under `seed`: the parameter's own element indices, at the slice's shard offset.
void draw_slice(std::vector<float>& values, const ShardSlice& s, std::uint64_t seed) {
  s.param->init.fill(slice_of(values, s), seed, s.param->name, static_cast<std::uint64_t>(s.param_begin));
}

// The shard's values as the reference draws them under `seed`, its gaps and padding zero.
std::vector<float> drawn_values(std::span<const ShardSlice> slices, const Tensor& shard, std::uint64_t seed) {
  std::vector<float> values(static_cast<std::size_t>(shard.numel()), 0.0f);
  for (const ShardSlice& s : slices) draw_slice(values, s, seed);
  return values;
}

// The reference's init_shard but for how a slice is drawn, `draw(values, slice)` into the shard's zeroed host
// buffer: refuses a shard that is not f32, writes nothing on a dry run, and copies the buffer into the shard
// once the device is done with its memory.
template <class Draw>
void init_shard_drawing(std::span<const ShardSlice> slices, const Tensor& shard, Draw draw) {
  check(shard.dtype() == DType::f32, "init_shard: expected an f32 shard, got ", shard.describe());
  if (shard.device().dry_run()) return;
  std::vector<float> values(static_cast<std::size_t>(shard.numel()), 0.0f);
  for (const ShardSlice& s : slices) draw(values, s);
  shard.device().synchronize();
  shard.copy_from(values);
}

// Every slice drawn from element 0 of its parameter: invisible at W = 1, where every slice starts there.
class IndexFromZero final : public MetaInitTask {
 public:
  void init_shard(std::span<const ShardSlice> slices, const Tensor& shard, std::uint64_t seed) const override {
    init_shard_drawing(slices, shard, [&](std::vector<float>& values, const ShardSlice& s) {
      s.param->init.fill(slice_of(values, s), seed, s.param->name, 0);  // not param_begin
    });
  }
};

// Every slice written at element 0 of the shard: the later slices overwrite the earlier ones.
class WrittenAtZero final : public MetaInitTask {
 public:
  void init_shard(std::span<const ShardSlice> slices, const Tensor& shard, std::uint64_t seed) const override {
    init_shard_drawing(slices, shard, [&](std::vector<float>& values, const ShardSlice& s) {
      s.param->init.fill(std::span<float>(values).first(static_cast<std::size_t>(s.count)), seed, s.param->name,
                         static_cast<std::uint64_t>(s.param_begin));  // not at s.shard_offset
    });
  }
};

// One host buffer per thread, reused from call to call and never cleared: the gaps and the padding of a
// shard keep what the previous unit's shard put there. (The buffer is the defect, so this one spells out
// the reference's steps instead of init_shard_drawing's.)
class StaleBuffer final : public MetaInitTask {
 public:
  void init_shard(std::span<const ShardSlice> slices, const Tensor& shard, std::uint64_t seed) const override {
    check(shard.dtype() == DType::f32, "init_shard: expected an f32 shard, got ", shard.describe());
    if (shard.device().dry_run()) return;
    thread_local std::vector<float> values;
    values.resize(static_cast<std::size_t>(shard.numel()));  // not zeroed
    for (const ShardSlice& s : slices) draw_slice(values, s, seed);
    shard.device().synchronize();
    shard.copy_from(values);
  }
};

// The seed given is ignored: every run starts from seed 0's model.
class IgnoresSeed final : public MetaInitTask {
 public:
  void init_shard(std::span<const ShardSlice> slices, const Tensor& shard, std::uint64_t) const override {
    init_shard_drawing(slices, shard,
                       [](std::vector<float>& values, const ShardSlice& s) { draw_slice(values, s, 0); });
  }
};

// A seed per rank, as for data-parallel dropout: each rank draws its part of a different model.
class RankSeed final : public MetaInitTask {
 public:
  void init_shard(std::span<const ShardSlice> slices, const Tensor& shard, std::uint64_t seed) const override {
    const std::uint64_t rank_seed = seed + static_cast<std::uint64_t>(shard.device().rank());
    init_shard_drawing(slices, shard,
                       [&](std::vector<float>& values, const ShardSlice& s) { draw_slice(values, s, rank_seed); });
  }
};

// Each parameter built whole on the host and the slice copied out of it: right values, but the rank holds whole
// parameters, the very memory FSDP exists to avoid.
class WholeParameter final : public MetaInitTask {
 public:
  void init_shard(std::span<const ShardSlice> slices, const Tensor& shard, std::uint64_t seed) const override {
    init_shard_drawing(slices, shard, [&](std::vector<float>& values, const ShardSlice& s) {
      std::vector<float> whole(static_cast<std::size_t>(s.param->numel()));
      s.param->init.fill(whole, seed, s.param->name, 0);
      const auto first = whole.begin() + s.param_begin;
      std::copy(first, first + s.count, slice_of(values, s).begin());
    });
  }
};

// The values staged in a device tensor of their own, then copied into the shard: right values, but the rank
// allocates a second shard's worth of device memory.
class DeviceStaging final : public MetaInitTask {
 public:
  void init_shard(std::span<const ShardSlice> slices, const Tensor& shard, std::uint64_t seed) const override {
    check(shard.dtype() == DType::f32, "init_shard: expected an f32 shard, got ", shard.describe());
    if (shard.device().dry_run()) return;
    const std::vector<float> values = drawn_values(slices, shard, seed);
    const Tensor staging = Tensor::empty(shard.device(), shard.shape(), DType::f32, MemTag::workspace, "staging");
    shard.device().synchronize();
    staging.copy_from(values);
    copy(shard.device().stream(Lane::compute), staging, shard);
  }
};

// No early return on a dry run: it draws values and writes them into a tensor that has no data.
class DrawsOnDryRun final : public MetaInitTask {
 public:
  void init_shard(std::span<const ShardSlice> slices, const Tensor& shard, std::uint64_t seed) const override {
    check(shard.dtype() == DType::f32, "init_shard: expected an f32 shard, got ", shard.describe());
    const std::vector<float> values = drawn_values(slices, shard, seed);  // no return on a dry run first
    shard.device().synchronize();
    shard.copy_from(values);
  }
};

// The host writes the shard without waiting for the device: right while nothing else uses the memory, a race
// once a stream still does (a run that initialises again).
class NoHostWait final : public MetaInitTask {
 public:
  void init_shard(std::span<const ShardSlice> slices, const Tensor& shard, std::uint64_t seed) const override {
    check(shard.dtype() == DType::f32, "init_shard: expected an f32 shard, got ", shard.describe());
    if (shard.device().dry_run()) return;
    shard.copy_from(drawn_values(slices, shard, seed));  // no shard.device().synchronize() first
  }
};

// The shard written through its raw pointer on the host: device memory on a GPU, which the host cannot write (the
// sim device refuses the pointer outside an op, as the GPU would fault).
class RawPointerWrites final : public MetaInitTask {
 public:
  void init_shard(std::span<const ShardSlice> slices, const Tensor& shard, std::uint64_t seed) const override {
    check(shard.dtype() == DType::f32, "init_shard: expected an f32 shard, got ", shard.describe());
    if (shard.device().dry_run()) return;
    const std::vector<float> values = drawn_values(slices, shard, seed);
    shard.device().synchronize();
    std::copy(values.begin(), values.end(), shard.f32());  // not shard.copy_from(values)
  }
};

// A shard with no slice (all padding) left as it is: its memory keeps whatever it held, where it must be zero.
class SkipsAShardWithoutSlices final : public MetaInitTask {
 public:
  void init_shard(std::span<const ShardSlice> slices, const Tensor& shard, std::uint64_t seed) const override {
    if (slices.empty()) return;  // the padding-only shard is never written
    reference_meta_init().init_shard(slices, shard, seed);
  }
};

// The slice's offsets kept in int locals: param_begin wraps past 2^31 elements, so a late rank of a parameter of
// more than 2^31 elements draws its slice from the wrong indices (shard-only draws the last of 2^30 ranks, whose slice
// begins near 2^46).
class IntOffsets final : public MetaInitTask {
 public:
  void init_shard(std::span<const ShardSlice> slices, const Tensor& shard, std::uint64_t seed) const override {
    init_shard_drawing(slices, shard, [&](std::vector<float>& values, const ShardSlice& s) {
      // The student's int locals (C++20: the narrowing wraps modulo 2^32, then a negative int widens to a huge
      // first_index).
      const int begin = static_cast<int>(s.param_begin), offset = static_cast<int>(s.shard_offset),
                count = static_cast<int>(s.count);
      s.param->init.fill(
          std::span<float>(values).subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(count)), seed,
          s.param->name, static_cast<std::uint64_t>(begin));  // not the int64 param_begin
    });
  }
};

// The host waits for the compute stream only before it writes the shard: a block that another stream (an
// all-gather reading the old master, a memcpy, a comm buffer's lane) still uses is written under it (host-waits
// leaves a fill on the memcpy stream).
class WaitsForComputeOnly final : public MetaInitTask {
 public:
  void init_shard(std::span<const ShardSlice> slices, const Tensor& shard, std::uint64_t seed) const override {
    check(shard.dtype() == DType::f32, "init_shard: expected an f32 shard, got ", shard.describe());
    if (shard.device().dry_run()) return;
    const std::vector<float> values = drawn_values(slices, shard, seed);
    shard.device().synchronize(Lane::compute);  // not shard.device().synchronize(): every stream
    shard.copy_from(values);
  }
};

}  // namespace

std::span<const Mutant> meta_init_mutants() {
  static const Mutant mutants[] = {
      {1, "index-from-zero", "each slice is drawn from element 0 of its parameter instead of from param_begin",
       instance<IndexFromZero>},
      {1, "written-at-zero", "each slice is written at element 0 of the shard instead of at shard_offset",
       instance<WrittenAtZero>},
      {1, "stale-buffer",
       "a host buffer reused from call to call without zeroing: gaps and padding keep an earlier shard's values",
       instance<StaleBuffer>},
      {1, "ignores-seed", "the seed given is ignored (drawn with seed 0)", instance<IgnoresSeed>},
      {1, "rank-seed",
       "each rank draws with its own seed (seed + rank), so the ranks' shards come from different models",
       instance<RankSeed>},
      {1, "whole-parameter", "each parameter drawn whole on the host and its slice copied out",
       instance<WholeParameter>},
      {1, "device-staging", "the values staged in a device tensor of their own before the copy into the shard",
       instance<DeviceStaging>},
      {1, "draws-on-dry-run", "no early return on a dry run: values drawn and written into a tensor without data",
       instance<DrawsOnDryRun>},
      {1, "no-host-wait", "the host writes the shard without waiting for the device (no synchronize first)",
       instance<NoHostWait>},
      {1, "raw-pointer-writes", "the shard written on the host through shard.f32(), device memory on a GPU",
       instance<RawPointerWrites>},
      {1, "skips-a-shard-without-slices",
       "returns at once when a rank's shard has no slice, leaving its padding "
       "whatever the memory held",
       instance<SkipsAShardWithoutSlices>},
      {1, "int-offsets",
       "the slice's offsets kept in int: param_begin wraps past 2^31 elements and a late rank of a huge parameter "
       "draws from the wrong indices",
       instance<IntOffsets>},
      {1, "waits-for-compute-only",
       "the host waits for the compute stream only (synchronize(Lane::compute)) before writing the shard, not for "
       "every stream",
       instance<WaitsForComputeOnly>},
  };
  return mutants;
}

}  // namespace fsdplab
