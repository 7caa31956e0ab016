// The cuda device on a real GPU: its allocator's tags, its streams and events, op times from CUDA
// events, errors that name the rank and the op, LocalComm with every rank on one GPU (bit-identical to
// the sim device's collectives), the emulated link, and FSDP training equal to the baseline with
// per-rank compute and collective lanes from real kernels. Every test skips, saying why, where this
// build or this machine has no GPU; the op-level numerics are the op tests' cuda instances (OnEachDevice).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <set>

#include "../integration/fsdp_runs.hpp"
#include "engine/comm/local_comm.hpp"
#include "engine/runtime/device_factory.hpp"
#include "engine/tensor/elementwise.hpp"
#include "engine/tensor/launch.hpp"
#include "engine/tensor/matmul.hpp"
#include "engine/trace/trace_recorder.hpp"
#include "engine/train/world.hpp"
#include "gpu_runs.hpp"
#include "test_support.hpp"

#if FSDPLAB_HAVE_CUDA
#include "engine/cuda/comm_kernels.hpp"
#include "engine/cuda/copies.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cuda_device.hpp"
#include "flash_attention_blocks_an_sm.hpp"
#endif

namespace fsdplab {
namespace {

using namespace testing;

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = cuda_unavailable()) GTEST_SKIP() << "cuda device: " << *why;
  }
  static DeviceSpec spec(const std::string& link = "nvlink4", bool emulate = false) {
    const auto& presets = PresetCatalog::builtin();
    DeviceSpec s;
    s.kind = DeviceKind::cuda;
    s.preset = presets.device("h100-sxm");
    s.link = presets.link(link);
    s.emulate_link = emulate;
    return s;
  }
};

#if FSDPLAB_HAVE_CUDA
// Ranks sharing the GPU each get a disjoint share of its SMs (engine/cuda/sm_partition.hpp), together no more
// than the GPU has; one share is every SM; more shares than the GPU can make are refused, naming the counts.
// (LocalCommOnOneGpuGivesExactlyTheSimDevicesResults runs the collectives on split ranks too.)
TEST_F(CudaDeviceTest, RanksSharingTheGpuEachGetTheirOwnShareOfItsSms) {
  int total = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&total, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  DeviceSpec whole = spec();
  EXPECT_EQ(dynamic_cast<CudaDevice&>(*make_device(0, whole)).sm_count(), total);

  DeviceSpec split = spec();
  split.sm.count = 2;
  split.sm.required = true;  // a share the driver cannot make fails here, instead of falling back to every SM
  int together = 0;
  for (int share : {0, 1}) {
    split.sm.index = share;
    const int sms = dynamic_cast<CudaDevice&>(*make_device(share, split)).sm_count();
    EXPECT_GT(sms, 0);
    EXPECT_LE(sms, total / 2);
    together += sms;
  }
  EXPECT_LE(together, total);

  split.sm.count = total + 1;
  split.sm.index = 0;
  const std::string refused = error_of([&] { make_device(0, split); });
  EXPECT_TRUE(contains(refused, "too few for " + std::to_string(total + 1) + " shares")) << refused;
}
#endif

TEST_F(CudaDeviceTest, TagsEveryAllocationInTheLedger) {
  auto dev = make_device(0, spec());
  {
    Tensor a = Tensor::empty(*dev, {1024}, DType::f32, MemTag::param_full, "a");
    Tensor b = Tensor::empty(*dev, {256}, DType::bf16, MemTag::grad_shard, "b", Lane::reduce_scatter);
    EXPECT_EQ(dev->ledger().live(MemTag::param_full), 4096);
    EXPECT_EQ(dev->ledger().live(MemTag::grad_shard), 512);
    EXPECT_EQ(dev->ledger().live_total(), 4608);
  }
  EXPECT_EQ(dev->ledger().live_total(), 0);
  EXPECT_EQ(dev->ledger().peak_total(), 4608);
}

TEST_F(CudaDeviceTest, AnOpsScratchIsTaggedWorkspaceAndFreedBehindIt) {
  auto dev = make_device(0, spec());
  Tensor a = zeros(*dev, {64, 64}), b = zeros(*dev, {64, 64}), out = zeros(*dev, {64, 64});
  matmul(dev->stream(Lane::compute), a, b, out);  // cuBLAS's workspace comes from the device's allocator
  dev->synchronize();
  EXPECT_GE(dev->ledger().peak(MemTag::workspace), std::int64_t{4} << 20);
  EXPECT_EQ(dev->ledger().live(MemTag::workspace), 0);
}

TEST_F(CudaDeviceTest, HostWritesAndReadsThroughTheDevice) {
  auto dev = make_device(0, spec());
  const std::vector<float> values = random_values(1000, 1);
  Tensor t = tensor_from(*dev, {1000}, values);
  EXPECT_EQ(read(t), values);
  Tensor h = tensor_from(*dev, {1000}, values, DType::bf16);
  EXPECT_EQ(read(h), rounded_to_bf16(values));
}

TEST_F(CudaDeviceTest, AnEventOrdersOneStreamAfterAnother) {
  auto dev = make_device(0, spec());
  const std::int64_t n = 1 << 24;  // long enough that an unordered copy would read the old values
  Tensor src = zeros(*dev, {n});
  Tensor dst = zeros(*dev, {n});
  dev->synchronize();
  fill(dev->stream(Lane::compute), src, 3.f);
  Event filled("filled");
  dev->record(filled, Lane::compute);
  dev->wait(Lane::all_gather, filled);
  copy(dev->stream(Lane::all_gather), src, dst);
  dev->synchronize();
  const std::vector<float> out = dst.to_vector();
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == 3.f; }));
  // The copy lists the fill as what it waited for.
  const OpRecord& last = dev->ops().back();
  ASSERT_EQ(last.deps.size(), 1u);
  EXPECT_EQ(last.deps[0].op, dev->ops()[dev->ops().size() - 2].id);
}

// [Note: a block that crosses streams] (sim_device.cpp): the caching allocator hands a block freed on the all-gather
// stream, still busy writing it, to the compute stream, which waits for the free; the compute op lists that wait as
// the allocator's, as on the sim device, and its write lands after the old ones.
TEST_F(CudaDeviceTest, ABlockHandedToAnotherStreamListsTheAllocatorsWait) {
  auto dev = make_device(0, spec());
  const std::int64_t n = 1 << 26;  // 256 MiB: each fill takes the GPU far longer than the host takes to issue it
  std::optional<Tensor> gathered =
      Tensor::empty(*dev, {n}, DType::f32, MemTag::param_full, "unit 0 full", Lane::all_gather);
  const BlockId block = gathered->access().block;
  for (int k = 0; k < 20; ++k) fill(dev->stream(Lane::all_gather), *gathered, 1.f);  // the free is still pending
  const OpId last_fill = dev->ops().back().id;
  gathered.reset();
  Tensor activations = Tensor::empty(*dev, {n}, DType::f32, MemTag::activation, "activations");
  ASSERT_EQ(activations.access().block, block) << "the allocator hands the freed block to the compute stream";
  fill(dev->stream(Lane::compute), activations, 2.f);
  dev->synchronize();
  const OpRecord& written = dev->ops().back();
  ASSERT_EQ(written.deps.size(), 1u);
  EXPECT_EQ(written.deps[0], (OpRef{.rank = 0, .op = last_fill, .reason = WaitReason::freed_block}));
  const std::vector<float> out = activations.to_vector();
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == 2.f; }));
}

TEST_F(CudaDeviceTest, OpTimesComeFromCudaEventsIntoTheOpLogAndTheTrace) {
  DeviceSpec untraced = spec();
  untraced.cupti = false;  // with CUPTI the sinks get kernels instead of op spans (test_cupti_tracing.cpp)
  auto dev = make_device(0, untraced);
  TraceRecorder recorder;
  dev->add_sink(&recorder);
  Tensor big = zeros(*dev, {1 << 22});
  dev->synchronize();
  const std::size_t first = dev->ops().size();
  for (int i = 0; i < 5; ++i) fill(dev->stream(Lane::compute), big, static_cast<float>(i));
  dev->synchronize();
  const auto& events = recorder.data().events;
  ASSERT_GE(events.size(), 5u);
  ASSERT_EQ(dev->ops().size(), first + 5) << "the op log holds each of the five fills";
  SimTime last_end = 0;
  for (std::size_t i = first; i < dev->ops().size(); ++i) {
    const OpRecord& op = dev->ops()[i];
    EXPECT_EQ(op.name, "fill");
    EXPECT_GT(op.end, op.begin) << "a 16 MiB fill takes measurable time";
    EXPECT_GE(op.begin, last_end) << "one stream runs its ops in order";
    last_end = op.end;
  }
  const auto fills = std::count_if(events.begin(), events.end(), [](const TraceEvent& e) {
    return e.name == "fill" && e.lane == Lane::compute && e.end > e.begin;
  });
  EXPECT_GE(fills, 5);
  dev->remove_sink(&recorder);
}

TEST_F(CudaDeviceTest, OutOfMemoryNamesTheRankTheTagAndTheGpusMemory) {
  auto dev = make_device(3, spec());
  const std::string message = error_of([&] {
    Tensor t = Tensor::empty(*dev, {std::int64_t{1} << 48}, DType::f32, MemTag::param_full, "too big");
  });
  EXPECT_TRUE(contains(message, "rank 3: out of GPU memory")) << message;
  EXPECT_TRUE(contains(message, "param_full")) << message;
  EXPECT_TRUE(contains(message, "free of")) << message;
  // The device is still usable afterwards.
  Tensor ok = zeros(*dev, {16});
  EXPECT_EQ(read(ok), std::vector<float>(16, 0.f));
}

TEST_F(CudaDeviceTest, ACudaErrorNamesTheRankAndTheOp) {
#if FSDPLAB_HAVE_CUDA
  auto dev = make_device(1, spec());
  Tensor from = Tensor::empty(*dev, {256}, DType::f32, MemTag::activation, "from", Lane::memcpy);
  Tensor to = Tensor::empty(*dev, {256}, DType::f32, MemTag::activation, "to", Lane::memcpy);
  OpSpec bad;
  bad.name = "copy with a bad pitch";
  const std::string message = error_of([&] {
    dev->launch(Lane::memcpy, bad, {.cuda = [&](CUstream_st* s) {
                  // A destination pitch narrower than the row: the runtime refuses the call with an error code
                  // before any copy engine moves a byte (the addresses are real allocations).
                  cuda::check_cuda(cudaMemcpy2DAsync(to.raw(), 16, from.raw(), 64, 64, 4, cudaMemcpyDeviceToDevice, s),
                                   "a 2-D copy");
                }});
  });
  EXPECT_TRUE(contains(message, "rank 1, op 'copy with a bad pitch' on stream memcpy")) << message;
  EXPECT_TRUE(contains(message, "CUDA error")) << message;
  // The error was the call's, not the context's: the device goes on working.
  fill(dev->stream(Lane::compute), to, 2.f);
  EXPECT_EQ(read(to).front(), 2.f);
#endif
}

// The blocks of each flash attention kernel an SM holds at once, registers counted (CUDA's occupancy calculator):
// the table at the top of engine/cuda/flash_attention_kernels.cu, whose shared-memory half the CPU-thread test
// TheTilesLetInTheBlocksAnSmTheKernelsNotesSay checks. The table is for an sm_90 SM (H100, H200).
TEST_F(CudaDeviceTest, TheFlashAttentionKernelsHoldTheBlocksAnSmTheirTableSays) {
#if FSDPLAB_HAVE_CUDA
  int major = 0, shared = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&shared, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0), cudaSuccess);
  if (major != 9 || shared != 228 * 1024)
    GTEST_SKIP() << "the table is for sm_90's SM of 228 KiB of shared memory; GPU 0 is sm_" << major << "x with "
                 << shared << " bytes an SM";
  expect_the_flash_attention_blocks_an_sm_of_the_table();
#endif
}

TEST_F(CudaDeviceTest, AnAddressCudaDidNotAllocateNeverReachesTheDriver) {
#if FSDPLAB_HAVE_CUDA
  auto dev = make_device(0, spec());
  Tensor on_gpu = Tensor::empty(*dev, {16}, DType::f32, MemTag::activation, "on_gpu", Lane::memcpy);
  std::vector<float> pageable(16, 1.f);
  OpSpec copy_op;
  copy_op.name = "copy from nowhere";
  const auto copy_from = [&](const void* source) {
    return error_of([&] {
      dev->launch(Lane::memcpy, copy_op, {.cuda = [&](CUstream_st* s) {
                    cuda::copy_bytes(s, on_gpu.raw(), source, on_gpu.nbytes());
                  }});
    });
  };
  // Handed to cudaMemcpyAsync, the first crashed the process inside libcuda (a SIGSEGV, not an error).
  const std::string nowhere = copy_from(reinterpret_cast<const void*>(0x20));
  EXPECT_TRUE(contains(nowhere, "rank 0, op 'copy from nowhere' on stream memcpy")) << nowhere;
  EXPECT_TRUE(contains(nowhere, "the source 0x20 is not memory CUDA allocated")) << nowhere;
  const std::string host = copy_from(pageable.data());
  EXPECT_TRUE(contains(host, "is not memory CUDA allocated")) << "pageable host memory would make the copy synchronous";
  fill(dev->stream(Lane::compute), on_gpu, 3.f);
  EXPECT_EQ(read(on_gpu).back(), 3.f) << "the device goes on working";
#endif
}

// ---- LocalComm with every rank on one GPU ----------------------------------------------------------

// Each rank's values: rank r's element k is a distinct number, so every misplaced chunk shows.
std::vector<float> values_of(int rank, std::int64_t n) {
  std::vector<float> v = random_values(static_cast<std::size_t>(n), 100 + static_cast<std::uint32_t>(rank));
  return v;
}

struct CollectiveResults {
  std::vector<std::vector<float>> gathered, reduced, all_reduced, broadcast;
};

// Runs the four collectives on W ranks of `kind` devices and returns what each rank ended with.
CollectiveResults run_collectives(DeviceKind kind, int world, DType dtype, const DeviceSpec& cuda_spec) {
  const std::int64_t shard = 1000;  // not a multiple of anything convenient
  CollectiveResults results;
  for (auto* r : {&results.gathered, &results.reduced, &results.all_reduced, &results.broadcast})
    r->resize(static_cast<std::size_t>(world));
  run_world(world, [&](int r, LocalWorld& local) {
    DeviceSpec rank_spec = cuda_spec;
    rank_spec.sm.index = cuda_spec.sm.count > 1 ? r : 0;  // split: each rank on its own share of the SMs
    std::unique_ptr<Device> dev = kind == DeviceKind::sim ? make_sim_device(r) : make_device(r, rank_spec);
    LocalComm comm(local, r, *dev);
    const Stream ag = dev->stream(Lane::all_gather), rs = dev->stream(Lane::reduce_scatter);
    Tensor mine = tensor_from(*dev, {shard}, values_of(r, shard), dtype);
    Tensor full = Tensor::empty(*dev, {shard * world}, dtype, MemTag::param_full, "full", Lane::all_gather);
    comm.all_gather(ag, mine, full);
    Tensor grads = tensor_from(*dev, {shard * world}, values_of(10 + r, shard * world), dtype);
    Tensor reduced = Tensor::empty(*dev, {shard}, dtype, MemTag::grad_shard, "reduced", Lane::reduce_scatter);
    comm.reduce_scatter(rs, grads, reduced, ReduceOp::avg);
    Tensor everything = tensor_from(*dev, {shard}, values_of(20 + r, shard), dtype);
    comm.all_reduce(rs, everything, ReduceOp::sum);
    Tensor from_root = tensor_from(*dev, {shard}, values_of(30 + r, shard), dtype);
    comm.broadcast(ag, from_root, world - 1);
    dev->synchronize();
    const auto i = static_cast<std::size_t>(r);
    results.gathered[i] = full.to_vector();
    results.reduced[i] = reduced.to_vector();
    results.all_reduced[i] = everything.to_vector();
    results.broadcast[i] = from_root.to_vector();
  }, scaled_world_options());
  return results;
}

TEST_F(CudaDeviceTest, LocalCommOnOneGpuGivesExactlyTheSimDevicesResults) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int world : {1, 2, 3}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " W=" + std::to_string(world));
      const CollectiveResults sim = run_collectives(DeviceKind::sim, world, dtype, spec());
      DeviceSpec split = spec();
      split.sm.count = world;  // each rank on its own share of the SMs, as training runs them
      for (const DeviceSpec& cuda : {spec(), split}) {
        SCOPED_TRACE(cuda.sm.count > 1 ? "SMs split" : "every SM");
        const CollectiveResults gpu = run_collectives(DeviceKind::cuda, world, dtype, cuda);
        // Same values, same order of additions, one rounding: bit for bit.
        EXPECT_EQ(gpu.gathered, sim.gathered);
        EXPECT_EQ(gpu.reduced, sim.reduced);
        EXPECT_EQ(gpu.all_reduced, sim.all_reduced);
        EXPECT_EQ(gpu.broadcast, sim.broadcast);
      }
    }
  }
}

TEST_F(CudaDeviceTest, InPlaceCollectivesOnOneGpu) {
  const int world = 2;
  const std::int64_t shard = 4096;
  std::vector<std::vector<float>> gathered(world), reduced(world);
  run_world(world, [&](int r, LocalWorld& local) {
    auto dev = make_device(r, spec());
    LocalComm comm(local, r, *dev);
    Tensor full = tensor_from(*dev, {shard * world}, values_of(r, shard * world));
    // All-gather in place: each rank's shard is its own chunk of `full`.
    comm.all_gather(dev->stream(Lane::all_gather), full.view(r * shard, {shard}), full);
    Tensor grads = tensor_from(*dev, {shard * world}, values_of(5 + r, shard * world));
    comm.reduce_scatter(dev->stream(Lane::reduce_scatter), grads, grads.view(r * shard, {shard}), ReduceOp::sum);
    dev->synchronize();
    gathered[static_cast<std::size_t>(r)] = full.to_vector();
    reduced[static_cast<std::size_t>(r)] = grads.view(r * shard, {shard}).to_vector();
  }, scaled_world_options());
  for (int r = 0; r < world; ++r) {
    const auto i = static_cast<std::size_t>(r);
    for (int p = 0; p < world; ++p) {
      const std::vector<float> expected = values_of(p, shard * world);
      for (std::int64_t k = 0; k < shard; ++k)
        ASSERT_EQ(gathered[i][static_cast<std::size_t>(p * shard + k)],
                  expected[static_cast<std::size_t>(p * shard + k)]);
    }
    const std::vector<float> a = values_of(5, shard * world), b = values_of(6, shard * world);
    for (std::int64_t k = 0; k < shard; ++k) {
      const auto at = static_cast<std::size_t>(r * shard + k);
      ASSERT_EQ(reduced[i][static_cast<std::size_t>(k)], a[at] + b[at]);
    }
  }
}

// NcclComm's bf16 average ([Note: averaging bf16 on NCCL]): NCCL's sum, then this division in f32 with one
// rounding, where ncclAvg would multiply by a 1/3 rounded to bf16 (0.333984375). One GPU cannot run a 3-rank
// NCCL average, so the division is checked on its own.
TEST_F(CudaDeviceTest, TheBf16AverageDividesTheSumInF32AndRoundsOnce) {
#if FSDPLAB_HAVE_CUDA
  auto dev = make_device(0, spec());
  // 5 / 3 reads 1.6640625 in bf16, where 5 x 0.333984375 reads 1.671875.
  const std::vector<float> sums = {5.f, 1.25f, 100.f, -7.f, 255.f, 0.5f};
  const Tensor t = tensor_from(*dev, {static_cast<std::int64_t>(sums.size())}, sums, DType::bf16);
  OpSpec divide;
  divide.name = "divide a bf16 sum by 3";
  dev->launch(Lane::reduce_scatter, divide, {.cuda = [&](CUstream_st* s) {
    const void* sum = t.raw();
    cuda::reduce_peers(s, DType::bf16, t.raw(), &sum, 1, t.numel(), 3);
  }});
  dev->synchronize();
  const std::vector<float> got = t.to_vector();
  for (std::size_t k = 0; k < sums.size(); ++k)
    EXPECT_EQ(got[k], round_to_bf16(round_to_bf16(sums[k]) / 3.f)) << "element " << k;
  EXPECT_EQ(got[0], 1.6640625f);
  EXPECT_NE(got[0], round_to_bf16(5.f * 0.333984375f)) << "ncclAvg's bf16 factor would give this";
#endif
}

TEST_F(CudaDeviceTest, TheEmulatedLinkHoldsACollectiveForTheLinksTime) {
  const int world = 2;
  const std::int64_t n = 1 << 20;  // 4 MiB gathered over a slow link: milliseconds
  const DeviceSpec slow = spec("slow-demo", /*emulate=*/true);
  const SimTime expected = CostModel(slow.preset, slow.link).collective(OpCategory::all_gather, n * 4, world);
  std::vector<SimTime> durations(world);
  run_world(world, [&](int r, LocalWorld& local) {
    auto dev = make_device(r, slow);
    LocalComm comm(local, r, *dev);
    Tensor shard = zeros(*dev, {n / world});
    Tensor full = Tensor::empty(*dev, {n}, DType::f32, MemTag::param_full, "full", Lane::all_gather);
    comm.all_gather(dev->stream(Lane::all_gather), shard, full);
    dev->synchronize();
    for (const OpRecord& op : dev->ops())
      if (op.category == OpCategory::all_gather) durations[static_cast<std::size_t>(r)] = op.end - op.begin;
  }, scaled_world_options());
  for (SimTime d : durations) EXPECT_GE(d, expected) << "the hold keeps the stream for latency + bytes / bandwidth";
}

// The copies run inside the emulated link's time, as a link's bytes move within it: the hold counts from the
// collective's start, so a collective takes the link's time, not the link's time plus its copies'. 256 MiB
// gathered by each of two ranks: copies of a few hundred microseconds on an H100, 67 ms over the slow link.
TEST_F(CudaDeviceTest, TheEmulatedLinksCopiesRunInsideItsTime) {
  const int world = 2;
  const std::int64_t n = std::int64_t{1} << 26;
  const int runs = 4;  // the first of each rank warms up (CUPTI, the copy path) and is left out of the bounds
  const DeviceSpec plain = spec("slow-demo"), emulated = spec("slow-demo", /*emulate=*/true);
  const SimTime link = CostModel(emulated.preset, emulated.link).collective(OpCategory::all_gather, n * 4, world);
  // Each all-gather's time on each rank, warm-up first.
  const auto all_gathers = [&](const DeviceSpec& s) {
    std::vector<std::vector<SimTime>> durations(world);
    run_world(
        world,
        [&](int r, LocalWorld& local) {
          auto dev = make_device(r, s);
          LocalComm comm(local, r, *dev);
          Tensor shard = zeros(*dev, {n / world});
          Tensor full = Tensor::empty(*dev, {n}, DType::f32, MemTag::param_full, "full", Lane::all_gather);
          for (int i = 0; i < runs; ++i) comm.all_gather(dev->stream(Lane::all_gather), shard, full);
          dev->synchronize();
          for (const OpRecord& op : dev->ops())
            if (op.category == OpCategory::all_gather)
              durations[static_cast<std::size_t>(r)].push_back(op.end - op.begin);
        },
        scaled_world_options());
    return durations;
  };
  SimTime copies_min = std::numeric_limits<SimTime>::max(), copies_max = 0;
  for (const std::vector<SimTime>& rank : all_gathers(plain)) {
    ASSERT_EQ(rank.size(), static_cast<std::size_t>(runs));
    copies_min = std::min(copies_min, *std::min_element(rank.begin() + 1, rank.end()));
    copies_max = std::max(copies_max, *std::max_element(rank.begin() + 1, rank.end()));
  }
  ASSERT_LT(copies_max, link / 4) << "the copies take a fraction of the link's time, so the hold covers them";
  SimTime fastest = std::numeric_limits<SimTime>::max();
  for (const std::vector<SimTime>& rank : all_gathers(emulated)) {
    ASSERT_EQ(rank.size(), static_cast<std::size_t>(runs));
    for (std::size_t i = 0; i < rank.size(); ++i) {
      EXPECT_GE(rank[i], link) << "all-gather " << i << ": the hold lasts the link's time";
      if (i > 0) {
        EXPECT_LT(rank[i], link + copies_max) << "all-gather " << i << ": not the link's time + the copies'";
      }
    }
    fastest = std::min(fastest, *std::min_element(rank.begin() + 1, rank.end()));
  }
  // A hold that began after the copies would add at least the copies of one rank alone, about half of what the
  // two ranks' copies at once take in `copies_min`: every all-gather would be that late. A hold from the start
  // overshoots the link's time only by a kernel launch and the timer's read, microseconds.
  EXPECT_LT(fastest, link + copies_min / 4)
      << "the copies ran inside the link's time (fastest of " << runs - 1 << " all-gathers on each of " << world
      << " ranks; copies alone took " << copies_min << " to " << copies_max << " ns, the link " << link << " ns)";
}

TEST_F(CudaDeviceTest, AFailingRankStopsItsPeersWithinTheTimeout) {
  LocalWorldOptions options;
  options.timeout = scaled(std::chrono::milliseconds(2000));
  const std::string message = error_of([&] {
    run_world(
        2,
        [&](int r, LocalWorld& local) {
          auto dev = make_device(r, spec());
          LocalComm comm(local, r, *dev);
          Tensor shard = zeros(*dev, {256});
          Tensor full = Tensor::empty(*dev, {512}, DType::f32, MemTag::param_full, "full", Lane::all_gather);
          if (r == 1) fail("rank 1 gave up before its all-gather");
          comm.all_gather(dev->stream(Lane::all_gather), shard, full);
          dev->synchronize();
        },
        options);
  });
  EXPECT_TRUE(contains(message, "rank 1 gave up")) << message;
}

// ---- FSDP training on one GPU ------------------------------------------------------------------------

TEST_F(CudaDeviceTest, FsdpOnOneGpuTrainsWithTheBaselinesLossesAndPerRankLanes) {
  const RunConfig run = one_gpu_fsdp_run();
  const std::vector<double> baseline = losses_of(train_baseline([&] {
    RunConfig one = on_sim(run);
    one.world = 1;
    return one;
  }(), PresetCatalog::builtin(), {}, nullptr));

  FsdpRun fsdp = gpu_fsdp(run);
  std::vector<TraceRecorder> recorders(2);
  for (TraceRecorder& r : recorders) fsdp.sinks.push_back(&r);
  const std::vector<double> losses = losses_of(train_fsdp(fsdp, PresetCatalog::builtin(), {}));
  ASSERT_EQ(losses.size(), baseline.size());
  for (std::size_t i = 0; i < losses.size(); ++i)
    EXPECT_NEAR(losses[i], baseline[i], 1e-4 * std::abs(baseline[i])) << "step " << i;

  for (int r = 0; r < 2; ++r) {
    std::set<std::pair<Lane, OpCategory>> seen;
    for (const TraceEvent& e : recorders[static_cast<std::size_t>(r)].data().events) {
      EXPECT_EQ(e.rank, r);
      if (e.end > e.begin) seen.insert({e.lane, e.category});
    }
    EXPECT_TRUE(seen.count({Lane::compute, OpCategory::compute})) << "rank " << r;
    EXPECT_TRUE(seen.count({Lane::all_gather, OpCategory::all_gather})) << "rank " << r;
    EXPECT_TRUE(seen.count({Lane::reduce_scatter, OpCategory::reduce_scatter})) << "rank " << r;
  }
}

}  // namespace
}  // namespace fsdplab
