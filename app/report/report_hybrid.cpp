// Section 6.1 of the writeup, bonus task 8: hybrid sharding against full sharding where the ranks sit on
// nodes. The lecture's point is a ring that spans nodes runs at the link between them: full shard puts every
// all-gather and reduce-scatter on that ring, hybrid shards each unit within a node (the fast link) and sends
// only the all-reduce of a gradient shard between nodes. Dry runs on the sim device with --ranks-per-node,
// as `bench --what overlap` makes them (its headline: rank 0, step 2 of 3, HTA's exposed communication): two
// nodes of W / 2 ranks, hybrid with a shard group per node. The presets are a DGX H100's, NVLink 4 within a
// node and a 400 Gb/s InfiniBand NIC per GPU between nodes: the report's workstation has no nodes.
#include <string>
#include <vector>

#include "app/report/markdown_table.hpp"
#include "app/report/report_context.hpp"

namespace fsdplab::app {
namespace {

constexpr const char* kDevicePreset = "h100-sxm";
constexpr const char* kInNodeLink = "nvlink4";
constexpr const char* kInterNodeLink = "ib-ndr400";

struct Measured {
  int world = 0;
  bool hybrid = false;
  OverlapHeadline h;

  int shard_group() const { return hybrid ? world / 2 : world; }
  double link_ms(RankLink l) const { return ns_to_ms(h.links[static_cast<std::size_t>(l)]); }
};

Measured measure_strategy(const Gpt2Scale& s, int world, bool hybrid) {
  FsdpFlags flags;
  flags.strategy = hybrid ? "hybrid" : "full";
  flags.hybrid_group = hybrid ? world / 2 : 0;
  OverlapBenchOptions bench = gpt2_overlap_bench(s, world, kDevicePreset, kInNodeLink, flags);
  bench.nodes = {world / 2, kInterNodeLink};
  return {world, hybrid, overlap_headline(bench)};
}

std::string command(const Gpt2Scale& s, const Measured& m) {
  return format(
      "fsdplab bench --what overlap %s --world %d --ranks-per-node %d "
      "--device-preset %s --link-preset %s --inter-node-link %s --bandwidths 1 --strategy %s",
      s.bench_flags().c_str(), m.world, m.world / 2, kDevicePreset, kInNodeLink, kInterNodeLink,
      m.hybrid ? ("hybrid --hybrid-group " + std::to_string(m.shard_group())).c_str() : "full");
}

}  // namespace

std::string report_hybrid(ReportContext& ctx) {
  const Gpt2Scale s = gpt2_scale(ctx);
  const std::vector<int> worlds = ctx.options.quick ? std::vector<int>{4} : std::vector<int>{4, 8};
  std::vector<Measured> rows;
  for (int w : worlds)
    for (bool hybrid : {false, true}) rows.push_back(measure_strategy(s, w, hybrid));

  std::string md = "### 6.1 Hybrid Sharding (HSDP)\n\n";
  md += format("**Setup:** GPT-2 '%s' (%.2fM parameters), %lld sequences x %lld tokens a rank, AdamW in f32, ASYNC "
               "(`fsdplab run`'s defaults). W ranks on two nodes of W / 2: %s, %s within a node, %s between nodes (one "
               "NIC per GPU; [sim-device.md](../docs/sim-device.md#the-cost-model)). Full shard (`--strategy full`) "
               "against hybrid with a shard group per node (`--strategy hybrid --hybrid-group W/2`). Dry runs on the "
               "sim device, virtual time: rank 0's step 2 of 3 as `bench --what overlap` prints it.\n\n",
               s.preset.c_str(), static_cast<double>(rows.front().h.parameters) / 1e6, s.micro_batch, s.seq,
               kDevicePreset, kInNodeLink, kInterNodeLink);
  std::vector<std::string> commands;
  for (const Measured& m : rows) commands.push_back(command(s, m));
  md += command_block(commands);
  md += "\n";
  MarkdownTable table({"W, nodes", "Strategy", "Within a node busy (ms)", "Between nodes busy (ms)", "T_sync (ms)",
                       "T_async (ms)", "Exposed comm (ms)", "Params + grads + optimizer/GPU (MB)"});
  for (const Measured& m : rows)
    table.add_row({format("%d, 2 of %d ranks", m.world, m.world / 2),
                   m.hybrid ? format("hybrid, S = %d", m.shard_group()) : std::string("full"),
                   format("%.3f", m.link_ms(RankLink::in_node)), format("%.3f", m.link_ms(RankLink::between_nodes)),
                   format("%.3f", ns_to_ms(m.h.t_sync)), format("%.3f", ns_to_ms(m.h.t_async)),
                   format("%.3f", ns_to_ms(m.h.exposed)),
                   format("%.3f", static_cast<double>(m.h.sharded_state) / 1e6)});
  md += table.str();
  md += "\nBusy: the sum of rank 0's collectives on each of its links (the bench's `links busy` line). Exposed: "
        "|comm| - |comm ∩ compute|, HTA's, which counts a moment when both links are busy once. The last column is "
        "the memory ledger's peak of param_shard + grad_shard + optim_state in the same step (MB = 10^6 bytes).\n\n";

  md += "**Analysis:**\n\n";
  for (std::size_t i = 0; i + 1 < rows.size(); i += 2) {
    const Measured& full = rows[i];
    const Measured& hybrid = rows[i + 1];
    const double nic_full = full.link_ms(RankLink::between_nodes), nic_hybrid = hybrid.link_ms(RankLink::between_nodes);
    const double t_full = ns_to_ms(full.h.t_async), t_hybrid = ns_to_ms(hybrid.h.t_async);
    md += format(
        "- W = %d: hybrid keeps the NIC busy %.3f ms against full shard's %.3f (%.1fx less), the ASYNC step "
        "takes %.3f ms against %.3f (%+.1f %%), and each rank holds %.2fx the sharded state (%.3f against %.3f "
        "MB): its units are sharded over the %d ranks of a node, not all %d.\n",
        full.world, nic_hybrid, nic_full, nic_hybrid > 0 ? nic_full / nic_hybrid : 0.0, t_hybrid, t_full,
        100.0 * (t_hybrid - t_full) / t_full,
        static_cast<double>(hybrid.h.sharded_state) / static_cast<double>(full.h.sharded_state),
        static_cast<double>(hybrid.h.sharded_state) / 1e6, static_cast<double>(full.h.sharded_state) / 1e6,
        hybrid.shard_group(), full.world);
  }
  md += "- Under full shard every collective's ring crosses the nodes, so the link within a node idles and the NIC "
        "carries everything. Under hybrid the all-gathers and reduce-scatters stay on the fast link and only 1 / S of "
        "each gradient crosses the NIC, in the replicas' all-reduce; a rank's two links carry a collective each at "
        "once, so that all-reduce runs beside the next unit's gather. The price is memory: the state is divided by "
        "S, not W.\n\n";
  return md;
}

}  // namespace fsdplab::app
