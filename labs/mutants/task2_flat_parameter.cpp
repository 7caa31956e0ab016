// Task 2's mutants: FlatParameters with one mistake each (the pitfalls of labs/02-flat-parameter). Each is
// the reference (reference_flat_parameter()) but for the one method the mistake is in.
#include <algorithm>
#include <vector>

#include "engine/fsdp/flat_parameter.hpp"
#include "engine/runtime/error.hpp"
#include "labs/mutants/mutants.hpp"

namespace fsdplab {
namespace {

const FlatParameterTask& reference() { return reference_flat_parameter(); }

// Forwards every call to the reference; a mutant overrides the one it gets wrong.
class LikeTheReference : public FlatParameterTask {
 public:
  explicit LikeTheReference(std::source_location origin = std::source_location::current())
      : FlatParameterTask(origin) {}
  FlatParamLayout plan(std::span<Parameter* const> params, int world, std::int64_t align) const override {
    return reference().plan(params, world, align);
  }
  std::vector<ShardSlice> shard_slices(const FlatParamLayout& layout, int rank) const override {
    return reference().shard_slices(layout, rank);
  }
  void point_views(const FlatParamLayout& layout, const Tensor& flat, Tensor Parameter::*field) const override {
    reference().point_views(layout, flat, field);
  }
};

// Pads by a whole extra chunk when the size is already a multiple of W: (used / W + 1) * W.
class PaddingOffByOne final : public LikeTheReference {
 public:
  FlatParamLayout plan(std::span<Parameter* const> params, int world, std::int64_t align) const override {
    FlatParamLayout layout = reference().plan(params, world, align);
    layout.padded_numel = (layout.used_numel / world + 1) * world;
    return layout;
  }
};

// Does not pad at all: padded_numel = used_numel, which W need not divide.
class NoPadding final : public LikeTheReference {
 public:
  FlatParamLayout plan(std::span<Parameter* const> params, int world, std::int64_t align) const override {
    FlatParamLayout layout = reference().plan(params, world, align);
    layout.padded_numel = layout.used_numel;
    return layout;
  }
};

// Rounds used_numel up to a multiple of W with no floor of one element: a unit whose parameters are all empty gets a
// flat buffer of 0 elements, and its ranks no shard to gather.
class EmptyUnitUnpadded final : public LikeTheReference {
 public:
  FlatParamLayout plan(std::span<Parameter* const> params, int world, std::int64_t align) const override {
    FlatParamLayout layout = reference().plan(params, world, align);
    layout.padded_numel = (layout.used_numel + world - 1) / world * world;
    return layout;
  }
};

// Packs the parameters back to back, ignoring `align`.
class NoAlignment final : public LikeTheReference {
 public:
  FlatParamLayout plan(std::span<Parameter* const> params, int world, std::int64_t align) const override {
    FlatParamLayout layout = reference().plan(params, world, 1);
    layout.align = align;
    return layout;
  }
};

// Gives rank r the slices of chunk r + 1 (mod W): every rank initialises and updates its neighbour's chunk.
class WrongRankSlices final : public LikeTheReference {
 public:
  std::vector<ShardSlice> shard_slices(const FlatParamLayout& layout, int rank) const override {
    if (rank < 0 || rank >= layout.world) return reference().shard_slices(layout, rank);  // the reference's error
    return reference().shard_slices(layout, (rank + 1) % layout.world);
  }
};

// Each slice's param_begin in shard space (lo - begin) instead of the parameter's own (lo - offset): the
// second piece of a cut parameter is drawn from the wrong indices.
class ParamBeginInShardSpace final : public LikeTheReference {
 public:
  std::vector<ShardSlice> shard_slices(const FlatParamLayout& layout, int rank) const override {
    std::vector<ShardSlice> slices = reference().shard_slices(layout, rank);
    for (ShardSlice& s : slices) s.param_begin = s.shard_offset;
    return slices;
  }
};

// Keeps only the parameters that lie wholly inside the shard: a parameter cut between ranks is in no shard
// whole, so its pieces are never initialised or updated.
class DropsCutParameters final : public LikeTheReference {
 public:
  std::vector<ShardSlice> shard_slices(const FlatParamLayout& layout, int rank) const override {
    std::vector<ShardSlice> slices = reference().shard_slices(layout, rank);
    std::erase_if(slices, [](const ShardSlice& s) { return s.count != s.param->numel(); });
    return slices;
  }
};

// Skips a parameter given twice instead of refusing it: a tied weight put in two units goes unnoticed.
class SkipsRepeats final : public LikeTheReference {
 public:
  FlatParamLayout plan(std::span<Parameter* const> params, int world, std::int64_t align) const override {
    std::vector<Parameter*> once;
    for (Parameter* p : params)
      if (std::find(once.begin(), once.end(), p) == once.end()) once.push_back(p);
    return reference().plan(once, world, align);
  }
};

// Gives each parameter a copy of its part of the flat buffer instead of a view of it.
class ViewsThatCopy final : public LikeTheReference {
 public:
  void point_views(const FlatParamLayout& layout, const Tensor& flat, Tensor Parameter::*field) const override {
    for (const FlatParamEntry& e : layout.entries)
      (e.param->*field) = Tensor::empty(flat.device(), e.param->shape, flat.dtype(), MemTag::workspace, e.param->name);
  }
};

// The running end of the layout kept in an int: a unit of more than 2^31 elements (a whole-model unit of Llama 7B,
// `--wrap model`) gets offsets that wrap (the slices check plans a unit of 6.4 billion elements).
class IntOffsets final : public LikeTheReference {
 public:
  FlatParamLayout plan(std::span<Parameter* const> params, int world, std::int64_t align) const override {
    FlatParamLayout layout = reference().plan(params, world, align);  // the contract's errors, the entries' order
    int end = 0;                                                      // not std::int64_t
    for (FlatParamEntry& e : layout.entries) {
      const int offset = static_cast<int>((end + align - 1) / align * align);  // C++20: the narrowing wraps
      e.offset = offset;
      end = static_cast<int>(offset + e.numel);
    }
    layout.used_numel = end;
    layout.padded_numel = (std::max<std::int64_t>(end, 1) + world - 1) / world * world;
    return layout;
  }
};

// A parameter given twice is refused only when it follows itself: the student compares each parameter with the one
// before it. A tied weight comes back far from its first place (GPT-2's wte ... lm_head), is laid out twice, and its
// first copy's slices are drawn, gathered and reduced for nothing (bad-input gives p0, p1, p0 too).
class RepeatsOnlyAdjacent final : public LikeTheReference {
 public:
  FlatParamLayout plan(std::span<Parameter* const> params, int world, std::int64_t align) const override {
    check(!params.empty(), "FlatParameter: a unit with no parameters; expected at least one");
    check(world >= 1, "FlatParameter: world size ", world, "; expected at least 1");
    check(align >= 1, "FlatParameter: alignment ", align, " elements; expected at least 1");
    FlatParamLayout layout;
    layout.world = world;
    layout.align = align;
    const Parameter* previous = nullptr;
    std::int64_t end = 0;
    for (Parameter* p : params) {
      check(p != nullptr, "FlatParameter: a null parameter");
      check(p != previous, "FlatParameter: parameter '", p->name, "' given twice");  // only the one before it
      previous = p;
      const std::int64_t offset = (end + align - 1) / align * align;
      layout.entries.push_back({p, offset, p->numel()});
      end = offset + p->numel();
    }
    layout.used_numel = end;
    layout.padded_numel = (std::max<std::int64_t>(end, 1) + world - 1) / world * world;
    return layout;
  }
};

}  // namespace

std::span<const Mutant> flat_parameter_mutants() {
  static const Mutant mutants[] = {
      {2, "padding-off-by-one", "pads a size that is already a multiple of W by a whole extra chunk",
       instance<PaddingOffByOne>},
      {2, "no-padding", "does not pad: padded_numel = used_numel, which W need not divide", instance<NoPadding>},
      {2, "empty-unit-unpadded", "gives a unit whose parameters are all empty a flat buffer of 0 elements",
       instance<EmptyUnitUnpadded>},
      {2, "no-alignment", "packs the parameters back to back, ignoring align", instance<NoAlignment>},
      {2, "wrong-rank-slices", "gives rank r the slices of the next rank's chunk", instance<WrongRankSlices>},
      {2, "views-that-copy", "points each parameter at a tensor of its own instead of a view of the flat buffer",
       instance<ViewsThatCopy>},
      {2, "param-begin-in-shard-space",
       "gives each slice its offset in the shard as param_begin, not its offset in the parameter",
       instance<ParamBeginInShardSpace>},
      {2, "drops-cut-parameters",
       "keeps only the parameters wholly inside the shard: a parameter cut between ranks is dropped",
       instance<DropsCutParameters>},
      {2, "skips-repeats", "skips a parameter given twice instead of raising an Error", instance<SkipsRepeats>},
      {2, "int-offsets", "accumulates the layout's offsets in an int: a unit of more than 2^31 elements wraps",
       instance<IntOffsets>},
      {2, "repeats-only-adjacent",
       "refuses a parameter given twice only when the repeat is next to it; a tied weight further on is laid out "
       "twice",
       instance<RepeatsOnlyAdjacent>},
  };
  return mutants;
}

}  // namespace fsdplab
