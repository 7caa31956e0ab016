#include "engine/fsdp/sharding.hpp"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

// Each enum's names, once: the parse and name functions read these, and so do the *_names() lists.
template <class Enum, std::size_t N>
using NameTable = std::array<std::pair<Enum, std::string_view>, N>;

constexpr NameTable<ShardingStrategy, 6> kStrategies = {{
    {ShardingStrategy::full_shard, "full"},
    {ShardingStrategy::shard_grad_op, "grad_op"},
    {ShardingStrategy::hybrid_shard, "hybrid"},
    {ShardingStrategy::no_shard, "no_shard"},
    {ShardingStrategy::zero1, "zero1"},
    {ShardingStrategy::zero2, "zero2"},
}};
constexpr NameTable<OverlapMode, 2> kModes = {{{OverlapMode::sync, "sync"}, {OverlapMode::async, "async"}}};
constexpr NameTable<UnshardBuffers, 2> kBuffers = {{{UnshardBuffers::alloc, "alloc"}, {UnshardBuffers::pool, "pool"}}};
constexpr NameTable<EmbeddingGradient, 2> kEmbeddingGradients = {
    {{EmbeddingGradient::table, "table"}, {EmbeddingGradient::rows, "rows"}}};
constexpr NameTable<DType, 2> kFsdpDTypes = {{{DType::f32, "f32"}, {DType::bf16, "bf16"}}};
// --prefetch's words; "all" is forward + backward-pre + next-step.
constexpr NameTable<PrefetchPolicy, 6> kPrefetches = {{
    {PrefetchPolicy{false, BackwardPrefetch::none, false}, "none"},
    {PrefetchPolicy{true, BackwardPrefetch::none, false}, "forward"},
    {PrefetchPolicy{false, BackwardPrefetch::pre, false}, "backward-pre"},
    {PrefetchPolicy{false, BackwardPrefetch::post, false}, "backward-post"},
    {PrefetchPolicy{false, BackwardPrefetch::none, true}, "next-step"},
    {PrefetchPolicy{true, BackwardPrefetch::pre, true}, "all"},
}};

// The second column of `table`, as a constant array the *_names() spans view.
template <class Enum, std::size_t N>
constexpr std::array<std::string_view, N> names_of(const NameTable<Enum, N>& table) {
  std::array<std::string_view, N> names{};
  for (std::size_t i = 0; i < N; ++i) names[i] = table[i].second;
  return names;
}
constexpr auto kStrategyNames = names_of(kStrategies);
constexpr auto kModeNames = names_of(kModes);
constexpr auto kBufferNames = names_of(kBuffers);
constexpr auto kEmbeddingGradientNames = names_of(kEmbeddingGradients);
constexpr auto kFsdpDTypeNames = names_of(kFsdpDTypes);
constexpr auto kPrefetchNames = names_of(kPrefetches);

template <class Enum, std::size_t N>
const Enum* find_value(const NameTable<Enum, N>& table, std::string_view name) {
  for (const auto& [value, n] : table)
    if (n == name) return &value;
  return nullptr;
}

// `value`'s name in `table`, where every value the engine makes has one.
template <class Enum, std::size_t N>
std::string_view name_of(const NameTable<Enum, N>& table, const Enum& value, std::string_view what) {
  for (const auto& [v, name] : table)
    if (v == value) return name;
  fail("a ", what, " with no name in its table");
}

}  // namespace

std::span<const std::string_view> strategy_names() { return kStrategyNames; }
std::span<const std::string_view> prefetch_names() { return kPrefetchNames; }
std::span<const std::string_view> unshard_buffers_names() { return kBufferNames; }
std::span<const std::string_view> embedding_gradient_names() { return kEmbeddingGradientNames; }
std::span<const std::string_view> fsdp_dtype_names() { return kFsdpDTypeNames; }

std::string names_list(std::span<const std::string_view> names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

std::string_view strategy_name(ShardingStrategy s) { return name_of(kStrategies, s, "sharding strategy"); }

ShardingStrategy parse_strategy(std::string_view name) {
  if (const ShardingStrategy* s = find_value(kStrategies, name)) return *s;
  fail("unknown strategy '", name, "'; expected ", names_list(kStrategyNames));
}

std::string_view overlap_mode_name(OverlapMode m) { return name_of(kModes, m, "overlap mode"); }

OverlapMode parse_overlap_mode(std::string_view name) {
  if (const OverlapMode* m = find_value(kModes, name)) return *m;
  fail("unknown mode '", name, "'; expected ", names_list(kModeNames));
}

PrefetchPolicy parse_prefetch(std::string_view text) {
  PrefetchPolicy p{false, BackwardPrefetch::none, false};
  std::string_view rest = text;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const PrefetchPolicy* word = find_value(kPrefetches, item);
    check(word != nullptr, "unknown prefetch '", item, "' in --prefetch '", text, "'; expected ",
          names_list(kPrefetchNames), ", or a comma list such as forward,backward-post");
    check(item != "none" || text == "none", "--prefetch '", text, "': 'none' cannot be combined with other policies");
    const bool forward_twice = word->forward && p.forward, next_step_twice = word->next_step && p.next_step;
    check(!forward_twice && !next_step_twice, "--prefetch '", text, "' asks for ",
          forward_twice ? "forward" : "next-step", " prefetch twice",
          text.find("all") != std::string_view::npos ? " ('all' is forward,backward-pre,next-step)" : "",
          "; expected each policy once");
    check(p.backward == BackwardPrefetch::none || word->backward == BackwardPrefetch::none, "--prefetch '", text,
          "' names two backward prefetches; pick backward-pre or backward-post");
    p.forward = p.forward || word->forward;
    p.next_step = p.next_step || word->next_step;
    if (word->backward != BackwardPrefetch::none) p.backward = word->backward;
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return p;
}

std::string prefetch_name(const PrefetchPolicy& p) {
  // A comma list of the one-part words, as --prefetch takes it back ("all" comes out spelt whole).
  constexpr BackwardPrefetch no_backward = BackwardPrefetch::none;
  std::vector<PrefetchPolicy> parts;
  if (p.forward) parts.push_back({true, no_backward, false});
  if (p.backward != no_backward) parts.push_back({false, p.backward, false});
  if (p.next_step) parts.push_back({false, no_backward, true});
  if (parts.empty()) parts.push_back({false, no_backward, false});
  std::string out;
  for (const PrefetchPolicy& part : parts)
    out += std::string(out.empty() ? "" : ",") + std::string(name_of(kPrefetches, part, "prefetch"));
  return out;
}

std::string_view unshard_buffers_name(UnshardBuffers b) { return name_of(kBuffers, b, "unshard buffers"); }

UnshardBuffers parse_unshard_buffers(std::string_view name) {
  if (const UnshardBuffers* b = find_value(kBuffers, name)) return *b;
  fail("unknown --buffers '", name,
       "'; expected alloc (the caching allocator, per gather) or pool (two buffers, YaFSDP)");
}

std::string_view embedding_gradient_name(EmbeddingGradient g) {
  return name_of(kEmbeddingGradients, g, "embedding gradient");
}

EmbeddingGradient parse_embedding_gradient(std::string_view name) {
  if (const EmbeddingGradient* g = find_value(kEmbeddingGradients, name)) return *g;
  fail("unknown --embedding-grad '", name,
       "'; expected table (added into the tables' gradients, reduced with the "
       "root's) or rows (the rows' gradients all-gathered, the root's others reduced early)");
}

FsdpOptions sync_schedule(FsdpOptions options) {
  options.mode = OverlapMode::sync;
  options.prefetch = PrefetchPolicy{false, BackwardPrefetch::none, false};
  return options;
}

void validate_fsdp_options(const FsdpOptions& options, int world) {
  check(world >= 1, "--world ", world, "; expected at least 1 rank");
  if (options.strategy == ShardingStrategy::hybrid_shard) {
    check(options.hybrid_group >= 1,
          "--strategy hybrid needs --hybrid-group S (the ranks a unit is sharded over, dividing --world ", world, "); ",
          options.hybrid_group == 0 ? std::string("none was given") : "got " + std::to_string(options.hybrid_group));
    check(world % options.hybrid_group == 0, "--hybrid-group ", options.hybrid_group, " does not divide --world ",
          world, "; expected a divisor such as ", world % 2 == 0 ? world / 2 : 1);
  } else {
    check(options.hybrid_group == 0, "--hybrid-group ", options.hybrid_group,
          " is for --strategy hybrid; this run's strategy is ", strategy_name(options.strategy));
  }
  for (const auto& [what, dtype] : {std::pair{"--precision", options.param_dtype},
                                    std::pair{"--reduce-dtype", options.reduce_dtype}}) {
    check(std::any_of(kFsdpDTypes.begin(), kFsdpDTypes.end(), [&](const auto& d) { return d.first == dtype; }), what,
          " ", dtype_name(dtype), "; expected ", names_list(kFsdpDTypeNames));
  }
  check(!(options.param_dtype == DType::f32 && options.reduce_dtype == DType::bf16),
        "--reduce-dtype bf16 with --precision f32: gradients computed in f32 would lose bits in a bf16 "
        "reduction for no gain; use --precision bf16 (bf16 compute) or reduce in f32");
  check(options.align >= 1, "FlatParameter alignment ", options.align, " elements; expected at least 1");
  const bool prefetching =
      options.prefetch.forward || options.prefetch.backward != BackwardPrefetch::none || options.prefetch.next_step;
  check(options.mode == OverlapMode::async || !prefetching, "--prefetch ", prefetch_name(options.prefetch),
        " with --mode sync: in SYNC mode every collective blocks compute, so nothing can be fetched ahead; "
        "use --mode async or --prefetch none");
  check(options.max_inflight >= 0, "--max-inflight ", options.max_inflight,
        "; expected the number of gathered units allowed at once (>= 1), or 0 for no limit");
  check(options.buffers == UnshardBuffers::alloc || reshards_after_forward(options.strategy),
        "--buffers pool with --strategy ", strategy_name(options.strategy),
        ": the two-buffer pool lets even and odd units take turns, which needs units freed after their "
        "forward; use --strategy full or hybrid, or --buffers alloc");
  // The rate limiter counts the units freed after their forward that hold buffers of their own (live_gathered,
  // overlap_state.hpp); under the pool every such unit takes one of its two buffers instead.
  check(options.buffers == UnshardBuffers::alloc || options.max_inflight == FsdpOptions{}.max_inflight,
        "--max-inflight ", options.max_inflight,
        " with --buffers pool: the pool's two buffers hold every unit the rate limiter would count, so no limit "
        "applies; drop --max-inflight");
  check(!options.offload || !parameters_replicated(options.strategy), "--offload with --strategy ",
        strategy_name(options.strategy),
        ": CPU offload moves the shards to the host, and this strategy keeps the whole "
        "parameters on the device; use --strategy full, grad_op or hybrid");
  if (options.embedding_grad == EmbeddingGradient::rows) {
    check(!parameters_replicated(options.strategy), "--embedding-grad rows with --strategy ",
          strategy_name(options.strategy),
          ": each rank adds the rows of its own shard of the root's gradient, and this strategy keeps the whole "
          "parameters on every rank; use --strategy full, grad_op or hybrid, or --embedding-grad table");
    check(!options.offload,
          "--embedding-grad rows with --offload: the rows are added into the gradient shard on the "
          "device, and CPU offload keeps it on the host; use one or the other");
  }
}

int shard_group_size(const FsdpOptions& options, int world) {
  switch (options.strategy) {
    case ShardingStrategy::hybrid_shard: return options.hybrid_group;
    case ShardingStrategy::no_shard: return 1;
    default: return world;
  }
}

int replica_group_size(const FsdpOptions& options, int world) { return world / shard_group_size(options, world); }

bool parameters_replicated(ShardingStrategy s) {
  return s == ShardingStrategy::no_shard || s == ShardingStrategy::zero1 || s == ShardingStrategy::zero2;
}

bool gradients_replicated(ShardingStrategy s) {
  return s == ShardingStrategy::no_shard || s == ShardingStrategy::zero1;
}

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
  if (options.embedding_grad == EmbeddingGradient::rows) out += ", embedding gradient as rows";
  return out;
}

}  // namespace fsdplab
