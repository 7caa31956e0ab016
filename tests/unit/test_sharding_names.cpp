// The FSDP options' names (sharding.hpp): each name the CLI takes parses to a value whose name is that name again,
// and a prefetch policy is written as the comma list --prefetch takes back.
#include <gtest/gtest.h>

#include "engine/fsdp/sharding.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using testing::contains;
using testing::error_of;

TEST(ShardingNames, EveryNameParsesToAValueNamedSo) {
  for (std::string_view name : strategy_names()) EXPECT_EQ(strategy_name(parse_strategy(name)), name);
  for (std::string_view name : {"sync", "async"}) EXPECT_EQ(overlap_mode_name(parse_overlap_mode(name)), name);
  for (std::string_view name : unshard_buffers_names())
    EXPECT_EQ(unshard_buffers_name(parse_unshard_buffers(name)), name);
  for (std::string_view name : embedding_gradient_names())
    EXPECT_EQ(embedding_gradient_name(parse_embedding_gradient(name)), name);
}

TEST(ShardingNames, EveryPrefetchPolicyIsWrittenAsItsCommaList) {
  EXPECT_EQ(prefetch_name(parse_prefetch("none")), "none");
  EXPECT_EQ(prefetch_name(parse_prefetch("all")), "forward,backward-pre,next-step");
  EXPECT_EQ(prefetch_name(parse_prefetch("next-step,backward-post")), "backward-post,next-step");
  for (const bool forward : {false, true})
    for (const BackwardPrefetch backward : {BackwardPrefetch::none, BackwardPrefetch::pre, BackwardPrefetch::post})
      for (const bool next_step : {false, true}) {
        const PrefetchPolicy policy{forward, backward, next_step};
        const std::string name = prefetch_name(policy);
        EXPECT_EQ(parse_prefetch(name), policy) << name;
      }
}

TEST(ShardingNames, APrefetchPolicyAskedForTwiceIsRefused) {
  const auto refusal = [](std::string_view text) { return error_of([&] { parse_prefetch(text); }); };
  EXPECT_TRUE(contains(refusal("forward,forward"), "asks for forward prefetch twice; expected each policy once"));
  EXPECT_TRUE(contains(refusal("all,next-step"),
                       "asks for next-step prefetch twice ('all' is forward,backward-pre,next-step)"));
  EXPECT_TRUE(contains(refusal("backward-pre,backward-post"), "names two backward prefetches"));
}

}  // namespace
}  // namespace fsdplab
