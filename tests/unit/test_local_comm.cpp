// LocalComm's collectives: exact values for every world size and dtype, sub-groups, in-place
// buffers, and one virtual begin and end on every rank.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "engine/comm/local_comm.hpp"
#include "engine/train/world.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using testing::error_of;
using testing::make_sim_device;
using testing::read;
using testing::tensor_from;

constexpr int kWorldSizes[] = {1, 2, 3, 4, 8};
constexpr DType kDTypes[] = {DType::f32, DType::bf16};

// Runs body(comm, device) on W rank threads, each with its own sim device.
void with_ranks(int world, const std::function<void(LocalComm&, SimDevice&)>& body, SimDeviceOptions options = {}) {
  run_world(world, [&](int rank, LocalWorld& local) {
    auto device = make_sim_device(rank, options);
    LocalComm comm(local, rank, *device);
    body(comm, *device);
  });
}

// Small integers: exact in bf16 (up to 256) and in every sum below.
float value(int rank, std::int64_t k) { return static_cast<float>(rank + 1 + k % 5); }

std::vector<float> values(int rank, std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k) v[static_cast<std::size_t>(k)] = value(rank, k);
  return v;
}

// What a reduction of value(q, k) over q < world gives, rounded like the collective: f32 sum, /world, once to dtype.
float reduced(int world, std::int64_t k, ReduceOp op, DType dtype) {
  float sum = 0;
  for (int q = 0; q < world; ++q) sum += value(q, k);
  if (op == ReduceOp::avg) sum /= static_cast<float>(world);
  return dtype == DType::bf16 ? round_to_bf16(sum) : sum;
}

TEST(LocalComm, AllGatherEveryWorldSizeAndDType) {
  constexpr std::int64_t n = 6;
  for (int world : kWorldSizes) {
    for (DType dtype : kDTypes) {
      std::vector<std::vector<float>> got(static_cast<std::size_t>(world));
      with_ranks(world, [&](LocalComm& comm, SimDevice& device) {
        const Tensor shard = tensor_from(device, {n}, values(comm.rank(), n), dtype);
        const Tensor full = Tensor::empty(device, {world * n}, dtype, MemTag::param_full);
        comm.all_gather(device.stream(Lane::all_gather), shard, full);
        got[static_cast<std::size_t>(comm.rank())] = read(full);
      });
      std::vector<float> expected;
      for (int r = 0; r < world; ++r)
        for (float v : values(r, n)) expected.push_back(v);
      for (const auto& g : got) EXPECT_EQ(g, expected) << "world " << world << " " << dtype_name(dtype);
    }
  }
}

TEST(LocalComm, ReduceScatterSumAndAvgEveryWorldSizeAndDType) {
  constexpr std::int64_t n = 3;
  for (int world : kWorldSizes) {
    for (DType dtype : kDTypes) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        std::vector<std::vector<float>> got(static_cast<std::size_t>(world));
        with_ranks(world, [&](LocalComm& comm, SimDevice& device) {
          const Tensor full = tensor_from(device, {world * n}, values(comm.rank(), world * n), dtype);
          const Tensor shard = Tensor::empty(device, {n}, dtype, MemTag::grad_shard);
          comm.reduce_scatter(device.stream(Lane::reduce_scatter), full, shard, op);
          got[static_cast<std::size_t>(comm.rank())] = read(shard);
        });
        for (int r = 0; r < world; ++r) {
          std::vector<float> expected;
          for (std::int64_t k = 0; k < n; ++k) expected.push_back(reduced(world, r * n + k, op, dtype));
          EXPECT_EQ(got[static_cast<std::size_t>(r)], expected)
              << "world " << world << " " << dtype_name(dtype) << " rank " << r
              << (op == ReduceOp::avg ? " avg" : " sum");
        }
      }
    }
  }
}

TEST(LocalComm, AllReduceSumAndAvgEveryWorldSizeAndDType) {
  constexpr std::int64_t n = 7;
  for (int world : kWorldSizes) {
    for (DType dtype : kDTypes) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
        std::vector<std::vector<float>> got(static_cast<std::size_t>(world));
        with_ranks(world, [&](LocalComm& comm, SimDevice& device) {
          const Tensor t = tensor_from(device, {n}, values(comm.rank(), n), dtype);
          comm.all_reduce(device.stream(Lane::compute), t, op);
          got[static_cast<std::size_t>(comm.rank())] = read(t);
        });
        std::vector<float> expected;
        for (std::int64_t k = 0; k < n; ++k) expected.push_back(reduced(world, k, op, dtype));
        for (const auto& g : got) EXPECT_EQ(g, expected) << "world " << world << " " << dtype_name(dtype);
      }
    }
  }
}

TEST(LocalComm, BroadcastFromTheLastRankEveryWorldSizeAndDType) {
  constexpr std::int64_t n = 5;
  for (int world : kWorldSizes) {
    for (DType dtype : kDTypes) {
      std::vector<std::vector<float>> got(static_cast<std::size_t>(world));
      with_ranks(world, [&](LocalComm& comm, SimDevice& device) {
        const Tensor t = tensor_from(device, {n}, values(comm.rank(), n), dtype);
        comm.broadcast(device.stream(Lane::compute), t, world - 1);
        got[static_cast<std::size_t>(comm.rank())] = read(t);
      });
      for (const auto& g : got) EXPECT_EQ(g, values(world - 1, n)) << "world " << world << " " << dtype_name(dtype);
    }
  }
}

// A shard that is its own chunk of the full buffer, as FSDP's flat parameters lay them out.
TEST(LocalComm, InPlaceAllGatherAndReduceScatter) {
  constexpr int world = 4;
  constexpr std::int64_t n = 4;
  std::vector<std::vector<float>> gathered(world), reduced_shards(world);
  with_ranks(world, [&](LocalComm& comm, SimDevice& device) {
    const int r = comm.rank();
    const Tensor full = tensor_from(device, {world * n}, std::vector<float>(world * n, -1.f));
    Tensor shard = full.view(r * n, {n});
    std::vector<float> mine = values(r, n);
    shard.copy_from(mine);
    comm.all_gather(device.stream(Lane::all_gather), shard, full);
    gathered[static_cast<std::size_t>(r)] = read(full);
    comm.reduce_scatter(device.stream(Lane::reduce_scatter), full, shard, ReduceOp::sum);
    reduced_shards[static_cast<std::size_t>(r)] = read(shard);
  });
  std::vector<float> all;
  for (int r = 0; r < world; ++r)
    for (float v : values(r, n)) all.push_back(v);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(gathered[static_cast<std::size_t>(r)], all);
    // Every rank held the same gathered buffer, so chunk r sums to world x chunk r.
    std::vector<float> expected;
    for (std::int64_t k = 0; k < n; ++k) expected.push_back(world * all[static_cast<std::size_t>(r * n + k)]);
    EXPECT_EQ(reduced_shards[static_cast<std::size_t>(r)], expected) << "rank " << r;
  }
}

// In place means that very chunk: a shard that overlaps full anywhere else would be overwritten while the
// collective still reads it (NCCL leaves it undefined), so it is refused on the rank that made the call.
TEST(LocalComm, AShardOverlappingAnotherChunkOfFullIsRefused) {
  constexpr int world = 2;
  constexpr std::int64_t n = 4;
  std::vector<std::string> errors(2 * world);
  with_ranks(world, [&](LocalComm& comm, SimDevice& device) {
    const int r = comm.rank();
    const Tensor full = tensor_from(device, {world * n}, std::vector<float>(world * n, 1.f));
    const Tensor other_chunk = full.view((1 - r) * n, {n});
    const Tensor straddling = full.view(1, {n});
    errors[static_cast<std::size_t>(2 * r)] =
        error_of([&] { comm.all_gather(device.stream(Lane::all_gather), other_chunk, full); });
    errors[static_cast<std::size_t>(2 * r + 1)] =
        error_of([&] { comm.reduce_scatter(device.stream(Lane::reduce_scatter), full, straddling, ReduceOp::sum); });
  });
  EXPECT_NE(errors[0].find("all_gather: shard"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("is not its chunk 0 (this rank's): it starts 4 elements into full; expected 0"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[3].find("reduce_scatter: shard"), std::string::npos) << errors[3];
  EXPECT_NE(errors[3].find("is not its chunk 1 (this rank's): it starts 1 elements into full; expected 4"),
            std::string::npos)
      << errors[3];
}

// HYBRID_SHARD's two groupings of 4 ranks: shard groups {0, 1}, {2, 3} and replica groups {0, 2}, {1, 3}.
TEST(LocalComm, SplitIntoShardAndReplicaGroups) {
  constexpr int world = 4;
  std::vector<std::vector<float>> shard_sum(world), replica_sum(world);
  std::vector<std::vector<int>> shard_members(world);
  with_ranks(world, [&](LocalComm& comm, SimDevice& device) {
    const int r = comm.rank();
    const auto shard_group = comm.split(r / 2);
    const auto replica_group = comm.split(r % 2);
    EXPECT_EQ(shard_group->world(), 2);
    EXPECT_EQ(shard_group->rank(), r % 2);
    EXPECT_EQ(replica_group->rank(), r / 2);
    shard_members[static_cast<std::size_t>(r)] = dynamic_cast<LocalComm&>(*shard_group).members();
    const Tensor a = tensor_from(device, {1}, std::vector<float>{static_cast<float>(1 << r)});
    shard_group->all_reduce(device.stream(Lane::compute), a, ReduceOp::sum);
    const Tensor b = tensor_from(device, {1}, std::vector<float>{static_cast<float>(1 << r)});
    replica_group->all_reduce(device.stream(Lane::compute), b, ReduceOp::sum);
    shard_sum[static_cast<std::size_t>(r)] = read(a);
    replica_sum[static_cast<std::size_t>(r)] = read(b);
  });
  EXPECT_EQ(shard_members[0], (std::vector<int>{0, 1}));
  EXPECT_EQ(shard_members[3], (std::vector<int>{2, 3}));
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(shard_sum[static_cast<std::size_t>(r)], std::vector<float>{r < 2 ? 3.f : 12.f}) << "rank " << r;
    EXPECT_EQ(replica_sum[static_cast<std::size_t>(r)], std::vector<float>{r % 2 == 0 ? 5.f : 10.f}) << "rank " << r;
  }
}

// Four ranks on two nodes of two (ib-ndr400 between them), dry runs: `body` gets each rank's world, its shard
// group (its node: HYBRID_SHARD's consecutive ranks) and its replica group (one rank of each node).
void on_two_nodes_of_two(
    const std::function<void(LocalComm& world, Communicator& shard, Communicator& replica, SimDevice&)>& body) {
  SimDeviceOptions options;
  options.dry_run = true;  // times only
  options.nodes = NodeLayout{2, PresetCatalog::builtin().link("ib-ndr400")};
  with_ranks(
      4,
      [&](LocalComm& comm, SimDevice& device) {
        const auto shard_group = comm.split(comm.rank() / 2);
        const auto replica_group = comm.split(comm.rank() % 2);
        body(comm, *shard_group, *replica_group, device);
        device.synchronize();
      },
      options);
}

// On two nodes of two ranks, HYBRID_SHARD's shard groups each sit in a node and take its link; the replica
// groups span the nodes and take the inter-node link, as the full world's collectives do.
TEST(LocalComm, AGroupSpanningNodesTakesTheInterNodeLink) {
  constexpr int world = 4;
  constexpr std::int64_t n = 1 << 20;
  const PresetCatalog& presets = PresetCatalog::builtin();
  std::vector<std::vector<SimTime>> durations(world);
  on_two_nodes_of_two([&](LocalComm& comm, Communicator& shard_group, Communicator& replica_group, SimDevice& device) {
    const Tensor t = Tensor::empty(device, {n}, DType::f32, MemTag::grad_full, "g");
    std::vector<SimTime>& mine = durations[static_cast<std::size_t>(comm.rank())];
    for (Communicator* group : {&shard_group, &replica_group, static_cast<Communicator*>(&comm)}) {
      group->all_reduce(device.stream(Lane::reduce_scatter), t, ReduceOp::sum);
      mine.push_back(device.ops().back().end - device.ops().back().begin);
    }
  });
  const CostModel nvlink_only(presets.device("h100-sxm"), presets.link("nvlink4"));
  const CostModel ib_only(presets.device("h100-sxm"), presets.link("ib-ndr400"));
  const std::int64_t bytes = n * 4;
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(durations[static_cast<std::size_t>(r)],
              (std::vector<SimTime>{nvlink_only.collective(OpCategory::all_reduce, bytes, 2),
                                    ib_only.collective(OpCategory::all_reduce, bytes, 2),
                                    ib_only.collective(OpCategory::all_reduce, bytes, world)}))
        << "rank " << r << ": its shard group, its replica group, the world";
  }
}

// A rank's two links carry a collective each at once: the replica group's all-reduce crosses the nodes while
// the shard group's next all-gather runs within the node (NVLink and the network card). Two collectives on one
// link still take it in turn, whichever streams issued them.
TEST(LocalComm, ALinkWithinTheNodeAndOneBetweenNodesCarryACollectiveEachAtOnce) {
  constexpr int world = 4;
  constexpr std::int64_t n = 1 << 20;
  std::vector<std::vector<OpRecord>> ops(world);
  on_two_nodes_of_two([&](LocalComm& comm, Communicator& shard_group, Communicator& replica_group, SimDevice& device) {
    const Tensor g = Tensor::empty(device, {n}, DType::f32, MemTag::grad_full, "g");
    const Tensor h = Tensor::empty(device, {n}, DType::f32, MemTag::grad_full, "h");
    const Tensor shard = Tensor::empty(device, {n}, DType::f32, MemTag::param_shard, "w.shard");
    const Tensor full = Tensor::empty(device, {2 * n}, DType::f32, MemTag::param_full, "w");
    auto& mine = ops[static_cast<std::size_t>(comm.rank())];
    replica_group.all_reduce(device.stream(Lane::reduce_scatter), g, ReduceOp::sum);  // between nodes
    mine.push_back(device.ops().back());
    shard_group.all_gather(device.stream(Lane::all_gather), shard, full);  // within the node
    mine.push_back(device.ops().back());
    shard_group.all_reduce(device.stream(Lane::compute), h, ReduceOp::sum);  // within the node again
    mine.push_back(device.ops().back());
  });
  for (int r = 0; r < world; ++r) {
    const std::vector<OpRecord>& mine = ops[static_cast<std::size_t>(r)];
    const OpRecord &across = mine[0], &gather = mine[1], &within = mine[2];
    EXPECT_LT(gather.begin, across.end) << "rank " << r << ": the gather waited for the all-reduce between nodes";
    EXPECT_GT(across.end - across.begin, gather.end - gather.begin) << "rank " << r << ": the network is slower";
    EXPECT_EQ(within.begin, gather.end) << "rank " << r << ": the node's link carries one at a time";
  }
}

// The op starts when the slowest rank's stream is ready, lasts the cost model's time, and has the
// same begin and end on every rank, on whichever stream it was given (SYNC: compute; ASYNC: its own).
TEST(LocalComm, OneVirtualBeginAndEndOnEveryRankOnTheStreamGiven) {
  constexpr int world = 3;
  constexpr std::int64_t n = 1024;
  for (Lane lane : {Lane::compute, Lane::all_gather}) {
    std::vector<OpRecord> ops(world);
    std::vector<SimTime> earliest(world);
    SimTime duration = 0;
    with_ranks(world, [&](LocalComm& comm, SimDevice& device) {
      const int r = comm.rank();
      if (r == 1) {  // rank 1's stream is busy for 50 us
        OpSpec busy;
        busy.name = "busy";
        busy.duration = 50 * kNsPerUs;
        device.launch(lane, std::move(busy), {});
      }
      const Tensor shard = tensor_from(device, {n}, values(r, n), DType::bf16);
      const Tensor full = Tensor::empty(device, {world * n}, DType::bf16, MemTag::param_full, "w");
      earliest[static_cast<std::size_t>(r)] = device.earliest_start(lane, OpCategory::all_gather, RankLink::in_node);
      comm.all_gather(device.stream(lane), shard, full);
      ops[static_cast<std::size_t>(r)] = device.ops().back();
      if (r == 0) duration = device.cost_model().collective(OpCategory::all_gather, full.nbytes(), world);
      device.synchronize();
    });
    const SimTime start = *std::max_element(earliest.begin(), earliest.end());
    EXPECT_EQ(start, earliest[1]);
    EXPECT_GT(start, earliest[0]);
    for (const OpRecord& op : ops) {
      EXPECT_EQ(op.name, "all_gather w");
      EXPECT_EQ(op.category, OpCategory::all_gather);
      EXPECT_EQ(op.lane, lane);
      EXPECT_EQ(op.begin, start);
      EXPECT_EQ(op.end, start + duration);
      EXPECT_EQ(op.bytes_moved, world * n * 2);
    }
  }
}

// A dry run keeps the agreement on times and moves no data (there is none).
TEST(LocalComm, DryRunAgreesOnTimesWithoutData) {
  constexpr int world = 2;
  std::vector<SimTime> ends(world);
  with_ranks(
      world,
      [&](LocalComm& comm, SimDevice& device) {
        const Tensor full = Tensor::empty(device, {8}, DType::f32, MemTag::grad_full);
        const Tensor shard = Tensor::empty(device, {4}, DType::f32, MemTag::grad_shard);
        if (comm.rank() == 0) device.host_work("slow host", 10 * kNsPerUs);
        comm.reduce_scatter(device.stream(Lane::reduce_scatter), full, shard, ReduceOp::avg);
        ends[static_cast<std::size_t>(comm.rank())] = device.ops().back().end;
      },
      SimDeviceOptions{.dry_run = true});
  EXPECT_EQ(ends[0], ends[1]);
  EXPECT_GT(ends[0], 10 * kNsPerUs);
}

}  // namespace
}  // namespace fsdplab
