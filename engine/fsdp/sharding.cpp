#include "engine/fsdp/sharding.hpp"

#include <array>
#include <utility>

#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

constexpr std::array<std::pair<ShardingStrategy, std::string_view>, 6> kNames = {{
    {ShardingStrategy::full_shard, "full"},
    {ShardingStrategy::shard_grad_op, "grad_op"},
    {ShardingStrategy::hybrid_shard, "hybrid"},
    {ShardingStrategy::no_shard, "no_shard"},
    {ShardingStrategy::zero1, "zero1"},
    {ShardingStrategy::zero2, "zero2"},
}};

}  // namespace

std::string_view strategy_name(ShardingStrategy s) {
  for (const auto& [strategy, name] : kNames)
    if (strategy == s) return name;
  fail("unknown sharding strategy #", static_cast<int>(s));
}

ShardingStrategy parse_strategy(std::string_view name) {
  for (const auto& [strategy, n] : kNames)
    if (n == name) return strategy;
  fail("unknown strategy '", name, "'; expected full, grad_op, hybrid, no_shard, zero1 or zero2");
}

std::string_view overlap_mode_name(OverlapMode m) { return m == OverlapMode::sync ? "sync" : "async"; }

OverlapMode parse_overlap_mode(std::string_view name) {
  if (name == "sync") return OverlapMode::sync;
  if (name == "async") return OverlapMode::async;
  fail("unknown mode '", name, "'; expected sync or async");
}

PrefetchPolicy parse_prefetch(std::string_view text) {
  PrefetchPolicy p{false, BackwardPrefetch::none};
  std::string_view rest = text;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const bool backward_given = p.backward != BackwardPrefetch::none;
    if (item == "none") {
      check(text == "none", "--prefetch '", text, "': 'none' cannot be combined with other policies");
    } else if (item == "forward") {
      p.forward = true;
    } else if (item == "backward-pre" || item == "backward-post" || item == "all") {
      check(!backward_given, "--prefetch '", text, "' names two backward prefetches; pick backward-pre or backward-post");
      p.backward = item == "backward-post" ? BackwardPrefetch::post : BackwardPrefetch::pre;
      if (item == "all") p.forward = true;
    } else {
      fail("unknown prefetch '", item, "' in --prefetch '", text,
           "'; expected none, forward, backward-pre, backward-post, all, or a comma list such as forward,backward-post");
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return p;
}

std::string prefetch_name(const PrefetchPolicy& p) {
  std::string out = p.forward ? "forward" : "";
  if (p.backward != BackwardPrefetch::none)
    out += std::string(out.empty() ? "" : ",") + (p.backward == BackwardPrefetch::pre ? "backward-pre" : "backward-post");
  return out.empty() ? "none" : out;
}

std::string_view unshard_buffers_name(UnshardBuffers b) { return b == UnshardBuffers::pool ? "pool" : "alloc"; }

UnshardBuffers parse_unshard_buffers(std::string_view name) {
  if (name == "alloc") return UnshardBuffers::alloc;
  if (name == "pool") return UnshardBuffers::pool;
  fail("unknown --buffers '", name, "'; expected alloc (the caching allocator, per gather) or pool (two buffers, YaFSDP)");
}

FsdpOptions sync_schedule(FsdpOptions options) {
  options.mode = OverlapMode::sync;
  options.prefetch = PrefetchPolicy{false, BackwardPrefetch::none};
  return options;
}

void validate_fsdp_options(const FsdpOptions& options, int world) {
  check(world >= 1, "--world ", world, "; expected at least 1 rank");
  if (options.strategy == ShardingStrategy::hybrid_shard) {
    check(options.hybrid_group >= 1, "--strategy hybrid needs --hybrid-group S (the ranks a unit is sharded "
          "over, dividing --world ", world, "); got ", options.hybrid_group);
    check(world % options.hybrid_group == 0, "--hybrid-group ", options.hybrid_group, " does not divide --world ",
          world, "; expected a divisor such as ", world % 2 == 0 ? world / 2 : 1);
  } else {
    check(options.hybrid_group == 0, "--hybrid-group ", options.hybrid_group,
          " is for --strategy hybrid; this run's strategy is ", strategy_name(options.strategy));
  }
  for (const auto& [what, dtype] : {std::pair{"--precision", options.param_dtype},
                                    std::pair{"--reduce-dtype", options.reduce_dtype}}) {
    check(dtype == DType::f32 || dtype == DType::bf16, what, " ", dtype_name(dtype), "; expected f32 or bf16");
  }
  check(!(options.param_dtype == DType::f32 && options.reduce_dtype == DType::bf16),
        "--reduce-dtype bf16 with --precision f32: gradients computed in f32 would lose bits in a bf16 "
        "reduction for no gain; use --precision bf16 (bf16 compute) or reduce in f32");
  check(options.align >= 1, "FlatParameter alignment ", options.align, " elements; expected at least 1");
  const bool prefetching = options.prefetch.forward || options.prefetch.backward != BackwardPrefetch::none;
  check(options.mode == OverlapMode::async || !prefetching, "--prefetch ", prefetch_name(options.prefetch),
        " with --mode sync: in SYNC mode every collective blocks compute, so nothing can be fetched ahead; "
        "use --mode async or --prefetch none");
  check(options.max_inflight >= 0, "--max-inflight ", options.max_inflight,
        "; expected the number of gathered units allowed at once (>= 1), or 0 for no limit");
  check(options.buffers == UnshardBuffers::alloc || reshards_after_forward(options.strategy),
        "--buffers pool with --strategy ", strategy_name(options.strategy),
        ": the two-buffer pool lets even and odd units take turns, which needs units freed after their "
        "forward; use --strategy full or hybrid, or --buffers alloc");
  check(!options.offload || !parameters_replicated(options.strategy), "--offload with --strategy ",
        strategy_name(options.strategy), ": CPU offload moves the shards to the host, and this strategy keeps the whole "
        "parameters on the device; use --strategy full, grad_op or hybrid");
}

int shard_group_size(const FsdpOptions& options, int world) {
  switch (options.strategy) {
    case ShardingStrategy::hybrid_shard: return options.hybrid_group;
    case ShardingStrategy::no_shard: return 1;
    default: return world;
  }
}

bool parameters_replicated(ShardingStrategy s) {
  return s == ShardingStrategy::no_shard || s == ShardingStrategy::zero1 || s == ShardingStrategy::zero2;
}

bool gradients_replicated(ShardingStrategy s) { return s == ShardingStrategy::no_shard || s == ShardingStrategy::zero1; }

bool reshards_after_forward(ShardingStrategy s) {
  return s == ShardingStrategy::full_shard || s == ShardingStrategy::hybrid_shard;
}

std::string describe(const FsdpOptions& options, int world) {
  std::string out = std::string(strategy_name(options.strategy)) + " W=" + std::to_string(world) +
                    " (S=" + std::to_string(shard_group_size(options, world)) + "), " +
                    std::string(dtype_name(options.param_dtype)) + " params, " +
                    std::string(dtype_name(options.reduce_dtype)) + " reduce, " +
                    std::string(overlap_mode_name(options.mode));
  if (options.mode == OverlapMode::async) {
    out += " prefetch " + prefetch_name(options.prefetch) + ", ";
    out += options.buffers == UnshardBuffers::pool ? std::string("two-buffer pool")
           : options.max_inflight == 0             ? std::string("no in-flight limit")
                                                   : std::to_string(options.max_inflight) + " in flight";
  }
  if (options.offload) out += ", CPU offload";
  return out;
}

}  // namespace fsdplab
