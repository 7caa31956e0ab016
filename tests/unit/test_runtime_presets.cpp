// Device and link presets: the built-in catalogue, and clear errors for malformed preset files.
#include <gtest/gtest.h>

#include <vector>

#include "engine/runtime/cost_model.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/presets.hpp"

namespace fsdplab {
namespace {

std::string error_of(std::string_view text) {
  try {
    PresetCatalog::parse(text, "test.jsonc");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

constexpr std::string_view kValid = R"({
  "devices": {"d": {"description": "x", "matmul_flops_bf16": 1e12, "matmul_flops_f32": 1e11,
    "vector_flops": 1e11, "memory_bandwidth": 1e12, "memory_bytes": 1e10, "host_bandwidth": 1e10,
    "launch_overhead_us": 3, "min_kernel_us": 2, "default_link": "l"}},
  // a comment
  "links": {"l": {"description": "y", "bandwidth": 1e10, "latency_us": 5}}
})";

TEST(RuntimePresets, BuiltinCatalogueHasTheLabsPresets) {
  const auto& c = PresetCatalog::builtin();
  for (const char* d : {"h100-sxm", "h100-pcie", "rtx-4090"}) EXPECT_NO_THROW(c.device(d)) << d;
  for (const char* l : {"nvlink4", "pcie5", "pcie4-no-p2p", "slow-demo", "ib-ndr400"}) EXPECT_NO_THROW(c.link(l)) << l;
  EXPECT_GT(c.device("h100-sxm").matmul_flops_bf16, c.device("h100-sxm").matmul_flops_f32);
  EXPECT_GT(c.link("nvlink4").bandwidth, c.link("pcie4-no-p2p").bandwidth);
}

TEST(RuntimePresets, ParsesAValidFileWithComments) {
  const PresetCatalog c = PresetCatalog::parse(kValid, "test.jsonc");
  EXPECT_DOUBLE_EQ(c.device("d").matmul_flops_bf16, 1e12);
  EXPECT_DOUBLE_EQ(c.link("l").latency_us, 5);
}

TEST(RuntimePresets, UnknownPresetListsTheKnownOnes) {
  try {
    PresetCatalog::builtin().device("a100");
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("a100"), std::string::npos);
    EXPECT_NE(m.find("h100-sxm"), std::string::npos);
  }
  EXPECT_THROW(PresetCatalog::builtin().link("infiniband"), Error);
}

TEST(RuntimePresets, MalformedFilesSayWhatIsWrong) {
  EXPECT_NE(error_of("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[]").find("expected a JSON object"), std::string::npos);
  // A device given twice is a typo, not a choice of the last.
  const std::string twice = error_of(R"({"devices": {"a": {}, "a": {}}, "links": {}})");
  EXPECT_NE(twice.find("it has the key \"a\" twice in one object"), std::string::npos) << twice;
  EXPECT_NE(error_of(R"({"devices": {}, "links": {}})").find("\"devices\""), std::string::npos);

  std::string missing(kValid);
  missing.replace(missing.find("\"vector_flops\": 1e11,"), 21, "");
  EXPECT_NE(error_of(missing).find("has no field 'vector_flops'"), std::string::npos) << error_of(missing);

  std::string negative(kValid);
  negative.replace(negative.find("\"latency_us\": 5"), 15, "\"latency_us\": -5");
  EXPECT_NE(error_of(negative).find("should be > 0"), std::string::npos) << error_of(negative);

  std::string text(kValid);
  text.replace(text.find("\"bandwidth\": 1e10"), 17, "\"bandwidth\": \"fast\"");
  EXPECT_NE(error_of(text).find("should be a number"), std::string::npos) << error_of(text);

  // Figures that would overflow the virtual clock's nanoseconds are refused, not wrapped to short steps.
  std::string slow_launch(kValid);
  slow_launch.replace(slow_launch.find("\"launch_overhead_us\": 3"), 23, "\"launch_overhead_us\": 1e16");
  EXPECT_NE(error_of(slow_launch).find("field 'launch_overhead_us' is 1e+16; expected at most 1e+06 us"),
            std::string::npos)
      << error_of(slow_launch);
  std::string no_bandwidth(kValid);
  no_bandwidth.replace(no_bandwidth.find("\"bandwidth\": 1e10"), 17, "\"bandwidth\": 1e-300");
  EXPECT_NE(error_of(no_bandwidth).find("field 'bandwidth' is 1e-300; expected at least 1e+06 per second"),
            std::string::npos)
      << error_of(no_bandwidth);

  std::string dangling(kValid);
  dangling.replace(dangling.find("\"default_link\": \"l\""), 19, "\"default_link\": \"nope\"");
  EXPECT_NE(error_of(dangling).find("not a link preset"), std::string::npos) << error_of(dangling);
}

// [NodeLayout]: a group within one node runs on the device's link; one that spans nodes, wherever its ranks
// sit, on the inter-node link, with the ring formula's bandwidth and latency both that link's.
TEST(RuntimePresets, ACollectiveSpanningNodesRunsOnTheInterNodeLink) {
  const auto& c = PresetCatalog::builtin();
  const LinkPreset& nvlink = c.link("nvlink4");
  const LinkPreset& ib = c.link("ib-ndr400");
  const CostModel one_node(c.device("h100-sxm"), nvlink);
  const CostModel nodes(c.device("h100-sxm"), nvlink, NodeLayout{4, ib});
  const std::int64_t bytes = 64'000'000;
  const auto ring = [&](const LinkPreset& link, int w, double factor) {
    return seconds_to_ns((w - 1) * link.latency_us * 1e-6 + factor * bytes / link.bandwidth);
  };
  const std::vector<int> shard_group = {4, 5, 6, 7}, replica_group = {1, 5}, everyone = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(nodes.link_of(shard_group), RankLink::in_node);
  EXPECT_EQ(nodes.preset_of(RankLink::in_node).name, "nvlink4");
  const auto on_nodes = [&](const CostModel& m, OpCategory category, const std::vector<int>& members) {
    return m.collective(category, bytes, static_cast<int>(members.size()), m.link_of(members));
  };
  EXPECT_EQ(on_nodes(nodes, OpCategory::all_gather, shard_group), ring(nvlink, 4, 3.0 / 4));
  EXPECT_EQ(nodes.link_of(replica_group), RankLink::between_nodes);
  EXPECT_EQ(nodes.preset_of(RankLink::between_nodes).name, "ib-ndr400");
  EXPECT_EQ(on_nodes(nodes, OpCategory::all_reduce, replica_group), ring(ib, 2, 2 * 1.0 / 2));
  EXPECT_EQ(on_nodes(nodes, OpCategory::reduce_scatter, everyone), ring(ib, 8, 7.0 / 8));
  EXPECT_EQ(on_nodes(one_node, OpCategory::reduce_scatter, everyone), ring(nvlink, 8, 7.0 / 8))
      << "without nodes, every rank shares one";
  EXPECT_EQ(on_nodes(one_node, OpCategory::reduce_scatter, everyone),
            one_node.collective(OpCategory::reduce_scatter, bytes, 8));
  EXPECT_THROW(CostModel(c.device("h100-sxm"), nvlink, NodeLayout{2, LinkPreset{}}), Error)
      << "nodes without an inter-node link";
}

TEST(RuntimePresets, CollectiveCostFollowsTheRing) {
  const auto& c = PresetCatalog::builtin();
  const CostModel model(c.device("h100-sxm"), c.link("slow-demo"));
  const LinkPreset& link = model.link();
  const std::int64_t bytes = 100'000'000;
  for (int w : {2, 4, 8}) {
    const double ring = (w - 1) * link.latency_us * 1e-6;
    EXPECT_EQ(model.collective(OpCategory::all_gather, bytes, w),
              seconds_to_ns(ring + (w - 1.0) / w * bytes / link.bandwidth));
    EXPECT_EQ(model.collective(OpCategory::all_reduce, bytes, w),
              seconds_to_ns(ring + 2 * (w - 1.0) / w * bytes / link.bandwidth));
  }
  // Bus bandwidth recovers the link bandwidth when latency is negligible.
  const double seconds = (3.0 / 4) * bytes / link.bandwidth;
  EXPECT_NEAR(bus_bandwidth(OpCategory::reduce_scatter, bytes, 4, seconds), link.bandwidth, 1);
  EXPECT_THROW(ring_traffic_factor(OpCategory::compute, 2), Error);
}

}  // namespace
}  // namespace fsdplab
