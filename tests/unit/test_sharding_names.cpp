// The FSDP options' names (sharding.hpp): each name the CLI takes parses to a value whose name is that name again,
// and a prefetch policy is written as the comma list --prefetch takes back.
#include <gtest/gtest.h>

#include "engine/fsdp/sharding.hpp"

namespace fsdplab {
namespace {

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

}  // namespace
}  // namespace fsdplab
