// CUPTI's records made into trace events, on synthetic records: kernel names, NCCL kernels by name, routing
// by external correlation id and by stream (with the wait for a late correlation; NCCL's kernels without it),
// and the mapping onto a rank's lanes with its ops' labels, op ids and clock. The CUPTI side itself needs a
// GPU (tests/gpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "engine/trace/gpu_activity.hpp"

namespace fsdplab {
namespace {

GpuRecord kernel(std::string_view name, std::uint32_t stream, std::uint32_t correlation, std::uint64_t start,
                 std::uint64_t end) {
  return GpuRecord{GpuRecordKind::kernel, name, 0, stream, correlation, start, end, 0};
}

TEST(GpuActivity, KernelNamesReadAsATimelineShowsThem) {
  EXPECT_EQ(kernel_display_name("_ZN7fsdplab4cuda12_GLOBAL__N_111fill_kernelIfEEvPT_lS3_"), "fill_kernel<float>");
  EXPECT_EQ(kernel_display_name("_Z11fill_kernelPflf"), "fill_kernel");
  EXPECT_EQ(kernel_display_name("_Z31ncclDevKernel_AllGather_RING_LL24ncclDevKernelArgsStorageILm4096EE"),
            "ncclDevKernel_AllGather_RING_LL");
  // Not mangled (cuBLAS's kernels are extern "C"): kept whole.
  const std::string cublas = "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32_cublas";
  EXPECT_EQ(kernel_display_name(cublas), cublas);
  EXPECT_EQ(kernel_display_name("void (anonymous namespace)::spin_kernel<long>(long)"), "spin_kernel<long>");
  EXPECT_EQ(kernel_display_name("_Zbroken"), "_Zbroken") << "a name the demangler refuses stays as it came";
  EXPECT_EQ(kernel_display_name(""), "kernel");
  EXPECT_EQ(kernel_display_name("f)"), "f)") << "an unmatched parenthesis is left alone";
}

TEST(GpuActivity, NcclKernelsAreCollectivesByName) {
  EXPECT_EQ(nccl_collective("ncclDevKernel_AllGather_RING_LL"), OpCategory::all_gather);
  EXPECT_EQ(nccl_collective("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL"), OpCategory::reduce_scatter);
  EXPECT_EQ(nccl_collective("ncclDevKernel_AllReduce_Sum_bf16_RING_LL128"), OpCategory::all_reduce);
  EXPECT_EQ(nccl_collective("ncclKernel_Broadcast_RING_LL"), OpCategory::broadcast);
  EXPECT_EQ(nccl_collective("ncclDevKernel_Generic_4"), std::nullopt);
  EXPECT_TRUE(is_nccl_kernel("ncclDevKernel_Generic_4"));
  EXPECT_FALSE(is_nccl_kernel("fill_kernel<float>"));
  EXPECT_EQ(nccl_collective("fill_kernel<float>"), std::nullopt);
  EXPECT_EQ(lane_of(OpCategory::broadcast), Lane::all_gather);
  EXPECT_EQ(lane_of(OpCategory::all_reduce), Lane::reduce_scatter);
  EXPECT_EQ(lane_of(OpCategory::memcpy), Lane::memcpy);
}

TEST(GpuActivity, ExternalIdsCarryTheSourceAndTheTag) {
  const std::uint64_t id = external_id(3, 123456789);
  EXPECT_EQ(external_source(id), 3u);
  EXPECT_EQ(external_tag(id), 123456789u);
  EXPECT_NE(external_id(1, 5), external_id(2, 5));
}

// ---- routing -------------------------------------------------------------------------------------------

TEST(GpuRecordRouter, SendsARecordToTheDeviceThatPushedItsId) {
  GpuRecordRouter router;
  router.add_stream(0, 11, 1, Lane::compute);
  router.add_stream(0, 21, 2, Lane::compute);
  router.add_stream(0, 22, 2, Lane::all_gather);
  router.add_correlation(100, external_id(2, 7));
  router.add_correlation(101, external_id(1, 8));
  router.add(kernel("k", 22, 100, 10, 20));
  router.add(kernel("nccl", 99, 101, 30, 40));  // a stream source 1 does not own (NCCL's own): its op still says
  auto routed = router.take_routed();
  ASSERT_EQ(routed.size(), 2u);
  ASSERT_EQ(routed[2].size(), 1u);
  EXPECT_EQ(routed[2][0].tag, 7u);
  EXPECT_EQ(routed[2][0].stream_lane, Lane::all_gather);
  ASSERT_EQ(routed[1].size(), 1u);
  EXPECT_EQ(routed[1][0].tag, 8u);
  EXPECT_EQ(routed[1][0].stream_lane, std::nullopt);
  EXPECT_TRUE(router.take_routed().empty()) << "taken once";
}

TEST(GpuRecordRouter, ARecordWaitsForALateCorrelationThenGoesByItsStream) {
  GpuRecordRouter router;
  router.add_stream(0, 11, 1, Lane::compute);
  router.add(kernel("late", 11, 200, 10, 20));     // its correlation comes in a later buffer
  router.add(kernel("uncorrelated", 11, 201, 30, 40));  // never gets one
  router.add(kernel("stranger", 77, 202, 50, 60));  // nobody's stream, no correlation
  router.add(GpuRecord{GpuRecordKind::host_wait, "cudaEventQuery", 0, 0, 203, 70, 80, 0});
  EXPECT_TRUE(router.take_routed().empty());
  EXPECT_EQ(router.waiting(), 3u) << "a host wait without its correlation is nobody's: let go at once";

  router.add_correlation(200, external_id(1, 5));
  router.end_flush();
  auto routed = router.take_routed();
  ASSERT_EQ(routed[1].size(), 1u);
  EXPECT_EQ(routed[1][0].record.name, "late");
  EXPECT_EQ(routed[1][0].tag, 5u);

  for (std::int64_t f = 1; f < kRecordPatienceFlushes - 1; ++f) router.end_flush();
  EXPECT_TRUE(router.take_routed().empty()) << "still waiting within the patience";
  router.end_flush();
  routed = router.take_routed();
  ASSERT_EQ(routed[1].size(), 1u);
  EXPECT_EQ(routed[1][0].record.name, "uncorrelated");
  EXPECT_EQ(routed[1][0].tag, 0u) << "by its stream: no op to label it";
  EXPECT_EQ(routed[1][0].stream_lane, Lane::compute);
  EXPECT_EQ(router.orphaned(), 1) << "the stranger; the host wait of nobody's call is not device work";
  EXPECT_EQ(router.waiting(), 0u);
}

TEST(GpuRecordRouter, AnNcclKernelOnADevicesStreamGoesByItAtOnce) {
  // [Note: NCCL's kernels go by their stream]: a non-blocking communicator launches from NCCL's own thread, so
  // no correlation will come; other records without one still wait for theirs.
  GpuRecordRouter router;
  router.add_stream(0, 12, 1, Lane::all_gather);
  router.add(kernel("ncclDevKernel_AllGather_RING_LL", 12, 500, 10, 20));
  router.add(kernel("ncclDevKernel_AllGather_RING_LL", 98, 501, 30, 40));  // NCCL's own stream: nobody's
  router.add(kernel("fill_kernel<float>", 12, 502, 50, 60));
  router.add(GpuRecord{GpuRecordKind::memcpy, "Memcpy DtoD", 0, 12, 503, 70, 80, 256});
  auto routed = router.take_routed();
  ASSERT_EQ(routed.size(), 1u);
  ASSERT_EQ(routed[1].size(), 1u);
  EXPECT_EQ(routed[1][0].record.correlation, 500u);
  EXPECT_EQ(routed[1][0].tag, 0u) << "by its stream";
  EXPECT_EQ(routed[1][0].stream_lane, Lane::all_gather);
  EXPECT_EQ(router.waiting(), 3u) << "the kernel on nobody's stream, and the records that are not NCCL's kernels";
  router.add_correlation(504, external_id(1, 6));
  router.add(kernel("ncclDevKernel_AllGather_RING_LL", 12, 504, 90, 100));
  routed = router.take_routed();
  ASSERT_EQ(routed[1].size(), 1u);
  EXPECT_EQ(routed[1][0].tag, 6u) << "a correlation already there still names its op";
}

// CUPTI's stream ids are unique within a context only, and two ranks sharing a GPU have a green context each:
// a second source registering an id the first owns is told so (the tracer warns), and the stream is its now.
TEST(GpuRecordRouter, AStreamIdAnotherSourceOwnsIsReported) {
  GpuRecordRouter router;
  EXPECT_TRUE(router.add_stream(0, 13, 1, Lane::compute));
  EXPECT_TRUE(router.add_stream(0, 13, 1, Lane::compute)) << "the same source again";
  EXPECT_TRUE(router.add_stream(1, 13, 2, Lane::compute)) << "another GPU's stream 13";
  EXPECT_FALSE(router.add_stream(0, 13, 2, Lane::all_gather));
  router.add(kernel("ncclDevKernel_AllGather_RING_LL", 13, 700, 10, 20));
  auto routed = router.take_routed();
  ASSERT_EQ(routed[2].size(), 1u);
  EXPECT_EQ(routed[2][0].stream_lane, Lane::all_gather);
}

// [Note: checking CUPTI's stream ids]: a probe's record is its lane's stream as the records name it.
TEST(GpuRecordRouter, AProbeCorrectsAStreamIdTheRecordsDoNotCarry) {
  GpuRecordRouter router;
  router.add_stream(0, 11, 1, Lane::compute);
  router.add_stream(0, 12, 1, Lane::all_gather);
  router.add_correlation(1, external_id(1, probe_tag(Lane::compute)));
  router.add_correlation(2, external_id(1, probe_tag(Lane::all_gather)));
  router.add(kernel("spin_kernel", 11, 1, 10, 20));  // as registered
  router.add(kernel("spin_kernel", 15, 2, 10, 20));  // the all_gather stream's records say 15, not 12
  EXPECT_TRUE(router.take_routed().empty()) << "probes go nowhere";
  EXPECT_EQ(router.restreamed(), 1);
  router.add(kernel("ncclDevKernel_AllGather_RING_LL", 15, 3, 30, 40));
  router.add(kernel("ncclDevKernel_AllGather_RING_LL", 12, 4, 50, 60));
  auto routed = router.take_routed();
  ASSERT_EQ(routed[1].size(), 1u);
  EXPECT_EQ(routed[1][0].record.stream, 15u);
  EXPECT_EQ(routed[1][0].stream_lane, Lane::all_gather);
  EXPECT_EQ(router.waiting(), 1u) << "12 is nobody's stream now";
  EXPECT_EQ(router.orphaned(), 0);
}

TEST(GpuRecordRouter, CorrelationZeroNamesNoCall) {
  // Records made outside any API call may carry correlation 0: one stray correlation record with id 0 must not
  // send them all to one op.
  GpuRecordRouter router;
  router.add_stream(0, 11, 1, Lane::compute);
  router.add_correlation(0, external_id(1, 9));
  router.add(kernel("internal", 11, 0, 10, 20));
  EXPECT_TRUE(router.take_routed().empty());
  EXPECT_EQ(router.waiting(), 1u) << "it waits as any uncorrelated record does, then goes by its stream";
  for (std::int64_t f = 0; f < kRecordPatienceFlushes; ++f) router.end_flush();
  auto routed = router.take_routed();
  ASSERT_EQ(routed[1].size(), 1u);
  EXPECT_EQ(routed[1][0].tag, 0u);
}

TEST(GpuRecordRouter, CorrelationsAreForgottenAfterThePatience) {
  GpuRecordRouter router;
  router.add_stream(0, 11, 1, Lane::compute);
  router.add_correlation(300, external_id(1, 9));
  for (std::int64_t f = 0; f < kRecordPatienceFlushes; ++f) router.end_flush();
  router.add(kernel("too late", 11, 300, 10, 20));
  EXPECT_EQ(router.waiting(), 1u);
}

TEST(GpuRecordRouter, SettlingADeviceSendsItsWaitingRecordsAndRemovingItOrphansTheRest) {
  GpuRecordRouter router;
  router.add_stream(0, 11, 1, Lane::memcpy);
  router.add_stream(0, 21, 2, Lane::compute);
  router.add(kernel("mine", 11, 400, 10, 20));
  router.add(kernel("theirs", 21, 401, 30, 40));
  router.settle(1);
  auto routed = router.take_routed();
  ASSERT_EQ(routed.size(), 1u);
  ASSERT_EQ(routed[1].size(), 1u);
  EXPECT_EQ(routed[1][0].stream_lane, Lane::memcpy);
  EXPECT_EQ(router.waiting(), 1u) << "device 2's record waits on";

  router.add_correlation(402, external_id(1, 3));
  router.add(kernel("before removal", 11, 402, 50, 60));
  router.remove_source(1);  // routed but not taken: orphaned with its device
  router.add_correlation(403, external_id(1, 4));
  router.add(kernel("after removal", 11, 403, 70, 80));
  EXPECT_EQ(router.orphaned(), 2);
  EXPECT_TRUE(router.take_routed().empty());
}

// Records still waiting when the tracer stops belong to no device: they are counted then, not in the next
// session, whose devices would otherwise see orphans they never made; a correlation of this session names
// nothing in the next one.
TEST(GpuRecordRouter, ASessionsEndOrphansWhatStillWaitsAndKeepsNothingForTheNext) {
  GpuRecordRouter router;
  router.add_stream(0, 11, 1, Lane::compute);
  router.add(kernel("never correlated", 11, 600, 10, 20));
  router.add(GpuRecord{GpuRecordKind::host_wait, "cudaStreamSynchronize", 0, 0, 601, 30, 40, 0});
  router.add_correlation(602, external_id(1, 7));
  router.remove_source(1);
  ASSERT_EQ(router.waiting(), 1u) << "the kernel; the uncorrelated host wait was let go at once";
  router.end_session();
  EXPECT_EQ(router.waiting(), 0u);
  EXPECT_EQ(router.orphaned(), 1) << "the kernel";

  // The next session: the same source id and stream come back, and a record reusing the old correlation id
  // waits for its own correlation instead of taking the old one's op.
  router.add_stream(0, 11, 1, Lane::compute);
  router.add(kernel("a new session's", 11, 602, 50, 60));
  EXPECT_TRUE(router.take_routed().empty());
  EXPECT_EQ(router.waiting(), 1u);
  for (std::int64_t f = 0; f < kRecordPatienceFlushes; ++f) router.end_flush();
  EXPECT_EQ(router.orphaned(), 1) << "nothing of the last session was counted again";
}

// ---- mapping ---------------------------------------------------------------------------------------------

TraceEvent op_span(Lane lane, std::string name, OpCategory category, OpId op) {
  TraceEvent e;
  e.rank = 1;
  e.lane = lane;
  e.name = std::move(name);
  e.category = category;
  e.step = 3;
  e.unit = 2;
  e.phase = "forward";
  e.bytes = 4096;
  e.flops = 1e6;
  e.op = op;
  e.deps = {{0, 5}};
  return e;
}

TEST(GpuActivityMapper, AnOpsKernelsCarryItsLabelsOnTheirStreamsLaneInTheDevicesClock) {
  GpuActivityMapper mapper(1, 1000);
  const std::uint64_t tag = mapper.issue(op_span(Lane::compute, "matmul", OpCategory::compute, 17));
  const std::vector<RoutedRecord> records = {
      {kernel("epilogue", 11, 2, 2600, 2900), tag, Lane::compute},
      {kernel("gemm", 11, 1, 2000, 2500), tag, Lane::compute},
  };
  std::vector<TraceEvent> events;
  mapper.map(records, 0, events);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].name, "gemm") << "in time order";
  EXPECT_EQ(events[1].name, "epilogue");
  for (const TraceEvent& e : events) {
    EXPECT_EQ(e.rank, 1);
    EXPECT_EQ(e.lane, Lane::compute);
    EXPECT_EQ(e.category, OpCategory::compute);
    EXPECT_EQ(e.step, 3);
    EXPECT_EQ(e.unit, 2);
    EXPECT_EQ(e.phase, "forward");
    EXPECT_EQ(e.op, 17u) << "the op id, so its dependencies' arrows still find it";
  }
  EXPECT_EQ(events[0].begin, 1000);
  EXPECT_EQ(events[0].end, 1500);
  // The op's deps, bytes and FLOPs go with the first record mapped (here the epilogue, which came first).
  EXPECT_EQ(events[1].deps, (std::vector<OpRef>{{0, 5}}));
  EXPECT_EQ(events[1].flops, 1e6);
  EXPECT_EQ(events[1].bytes, 4096);
  EXPECT_TRUE(events[0].deps.empty());
  EXPECT_EQ(events[0].flops, 0);
  EXPECT_EQ(mapper.events(), 2);
  EXPECT_EQ(mapper.unlabelled(), 0);
}

TEST(GpuActivityMapper, ACollectivesCopiesAndNcclKernelsAreCommunication) {
  GpuActivityMapper mapper(0, 0);
  const std::uint64_t gather = mapper.issue(op_span(Lane::all_gather, "all_gather", OpCategory::all_gather, 4));
  const std::uint64_t sync_gather = mapper.issue(op_span(Lane::compute, "all_gather", OpCategory::all_gather, 5));
  std::vector<RoutedRecord> records = {
      {GpuRecord{GpuRecordKind::memcpy, "Memcpy DtoD", 0, 12, 1, 10, 20, 512}, gather, Lane::all_gather},
      // SYNC mode: the collective on the compute stream stays where it ran.
      {kernel("ncclDevKernel_Generic_4", 11, 2, 30, 40), sync_gather, Lane::compute},
      // NCCL's own stream, no op known: its name picks the category and the lane.
      {kernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 90, 3, 50, 60), 0, std::nullopt},
      {kernel("ncclDevKernel_Generic_1", 90, 4, 70, 80), 0, std::nullopt},
      {GpuRecord{GpuRecordKind::memset, "Memset", 0, 13, 5, 90, 95, 64}, 0, Lane::memcpy},
  };
  std::vector<TraceEvent> events;
  mapper.map(records, 0, events);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].category, OpCategory::all_gather);
  EXPECT_EQ(events[0].lane, Lane::all_gather);
  EXPECT_EQ(events[0].bytes, 512) << "a copy's own bytes";
  EXPECT_EQ(events[1].category, OpCategory::all_gather);
  EXPECT_EQ(events[1].lane, Lane::compute);
  EXPECT_EQ(events[2].category, OpCategory::reduce_scatter);
  EXPECT_EQ(events[2].lane, Lane::reduce_scatter);
  EXPECT_EQ(events[2].step, -1);
  EXPECT_EQ(events[3].category, OpCategory::all_reduce);
  EXPECT_EQ(events[4].category, OpCategory::memcpy);
  EXPECT_EQ(events[4].name, "Memset");
  EXPECT_EQ(mapper.unlabelled(), 3);
}

TEST(GpuActivityMapper, HostWaitsAreOnTheHostLaneNamedByTheDevicesCall) {
  GpuActivityMapper mapper(0, 100);
  TraceEvent wait;
  wait.lane = Lane::host;
  wait.category = OpCategory::host;
  wait.name = "synchronize compute";
  wait.step = 1;
  const std::uint64_t tag = mapper.issue(wait);
  std::vector<TraceEvent> events;
  const std::vector<RoutedRecord> records = {
      {GpuRecord{GpuRecordKind::host_wait, "cudaStreamSynchronize", 0, 11, 7, 300, 900, 0}, tag, std::nullopt}};
  mapper.map(records, 0, events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].lane, Lane::host);
  EXPECT_EQ(events[0].category, OpCategory::host);
  EXPECT_EQ(events[0].name, "synchronize compute");
  EXPECT_EQ(events[0].step, 1);
  EXPECT_EQ(events[0].op, 0u);
  EXPECT_EQ(events[0].begin, 200);
  EXPECT_EQ(events[0].end, 800);
}

// Finished work's labels are kept until both kRetiredWorkFlushes flushes and kRetiredWorkKept later retirements
// have passed: a rank's buffer comes back only once full, however long its ops took on the GPU.
TEST(GpuActivityMapper, RetiredWorkIsForgottenOnceOldInTimeAndInLaterWorkAndLaterRecordsAreUnlabelled) {
  GpuActivityMapper mapper(0, 0);
  const auto later_op = [&](std::int64_t flush) {
    mapper.retire(mapper.issue(op_span(Lane::compute, "later", OpCategory::compute, 3)), flush);
  };
  std::vector<TraceEvent> events;
  // Old in flushes, recent in work: kept.
  const std::uint64_t done = mapper.issue(op_span(Lane::compute, "fill", OpCategory::compute, 1));
  const std::uint64_t running = mapper.issue(op_span(Lane::compute, "copy", OpCategory::compute, 2));
  EXPECT_NE(done, running);
  mapper.retire(done, 5);
  mapper.map({}, 6 + kRetiredWorkFlushes, events);
  EXPECT_EQ(mapper.known_work(), 2u) << "old in flushes only";
  // Old in work, recent in flushes: kept.
  for (std::int64_t i = 0; i < kRetiredWorkKept; ++i) later_op(6 + kRetiredWorkFlushes);
  const std::uint64_t recent = mapper.issue(op_span(Lane::compute, "recent", OpCategory::compute, 4));
  mapper.retire(recent, 6 + kRetiredWorkFlushes);
  for (std::int64_t i = 0; i < kRetiredWorkKept; ++i) later_op(6 + kRetiredWorkFlushes);
  mapper.map({}, 7 + kRetiredWorkFlushes, events);
  EXPECT_EQ(mapper.known_work(), 2u + 1u + static_cast<std::size_t>(2 * kRetiredWorkKept) - 1u)
      << "only the first op is forgotten: the rest retired within kRetiredWorkFlushes, the running op is kept "
         "however long it runs";
  // Then old in both: forgotten, all but the last kRetiredWorkKept and the running op.
  mapper.map({}, 7 + 2 * kRetiredWorkFlushes, events);
  EXPECT_EQ(mapper.known_work(), 1u + static_cast<std::size_t>(kRetiredWorkKept));
  const std::vector<RoutedRecord> late = {{kernel("fill_kernel", 11, 1, 10, 20), done, Lane::compute},
                                          {kernel("fill_kernel", 11, 2, 30, 40), recent, Lane::compute}};
  mapper.map(late, 8 + 2 * kRetiredWorkFlushes, events);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].name, "fill_kernel");
  EXPECT_EQ(events[0].lane, Lane::compute);
  EXPECT_EQ(events[0].op, 0u);
  EXPECT_EQ(events[0].step, -1);
  EXPECT_EQ(events[1].op, 0u);
  EXPECT_EQ(mapper.unlabelled(), 2);
}

TEST(GpuActivityMapper, ARecordWithoutItsTagFindsTheOpWhoseEventSpanOnItsStreamHoldsIt) {
  // NCCL may launch from a thread of its own, which pushed no external id: such a kernel comes routed by its
  // stream alone. The op whose CUDA-event span on that stream holds the kernel's midpoint is its op.
  GpuActivityMapper mapper(0, 1000);  // records' times minus 1000 are the device's
  const std::uint64_t first = mapper.issue(op_span(Lane::all_gather, "all_gather", OpCategory::all_gather, 7));
  const std::uint64_t second = mapper.issue(op_span(Lane::all_gather, "all_gather", OpCategory::all_gather, 8));
  const std::uint64_t on_compute = mapper.issue(op_span(Lane::compute, "matmul", OpCategory::compute, 9));
  mapper.retire(first, 0, std::pair<SimTime, SimTime>{100, 200});
  mapper.retire(second, 0, std::pair<SimTime, SimTime>{200, 400});
  mapper.retire(on_compute, 0, std::pair<SimTime, SimTime>{0, 1000});
  const std::vector<RoutedRecord> records = {
      {kernel("ncclDevKernel_AllGather_RING_LL", 12, 50, 1000 + 120, 1000 + 190), 0, Lane::all_gather},
      {kernel("ncclDevKernel_AllGather_RING_LL", 12, 51, 1000 + 250, 1000 + 390), 0, Lane::all_gather},
      {kernel("ncclDevKernel_AllGather_RING_LL", 12, 52, 1000 + 500, 1000 + 600), 0, Lane::all_gather},
  };
  std::vector<TraceEvent> events;
  mapper.map(records, 0, events);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].op, 7u);
  EXPECT_EQ(events[0].step, 3);
  EXPECT_EQ(events[0].deps, (std::vector<OpRef>{{0, 5}})) << "the op's first record carries its arrows";
  EXPECT_EQ(events[1].op, 8u);
  EXPECT_EQ(mapper.found_by_span(), 2);
  EXPECT_EQ(mapper.waiting(), 1u) << "after every span on its stream: its op may retire yet (the compute op's "
                                     "span is another stream's)";
  mapper.map({}, kRecordPatienceFlushes - 1, events);
  EXPECT_EQ(events.size(), 2u) << "within the patience";
  mapper.map({}, kRecordPatienceFlushes, events);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].op, 0u) << "no op retired around it in the patience";
  EXPECT_EQ(mapper.unlabelled(), 1);
  EXPECT_EQ(mapper.waiting(), 0u);
}

// [Note: the two clocks of a record and a span]: CUPTI's times read earlier than the CUDA-event spans, by how
// late the host saw the epoch's event. A short collective kernel would then fall in the op before its own.
TEST(GpuActivityMapper, RecordsArePlacedInSpansAfterTheLeadTheirTaggedRecordsShow) {
  GpuActivityMapper mapper(0, 1000);
  const std::uint64_t first = mapper.issue(op_span(Lane::all_gather, "all_gather", OpCategory::all_gather, 7));
  const std::uint64_t second = mapper.issue(op_span(Lane::all_gather, "all_gather", OpCategory::all_gather, 8));
  const std::uint64_t not_yet = mapper.issue(op_span(Lane::all_gather, "all_gather", OpCategory::all_gather, 10));
  mapper.retire(first, 0, std::pair<SimTime, SimTime>{100, 200});
  mapper.retire(second, 0, std::pair<SimTime, SimTime>{200, 230});
  // The second op's kernel ran 205..225 on the device's clock; CUPTI's reads 30 ns earlier, 175..195: inside the
  // first op's span. The first op's tagged record (true 110..190) reads 80..160, 20 before its span begins.
  // Teaching nothing: a tagged record of an op on another stream, a host wait, a host-to-host copy, and a
  // record of an op not retired yet (no span).
  const std::uint64_t elsewhere = mapper.issue(op_span(Lane::compute, "matmul", OpCategory::compute, 9));
  mapper.retire(elsewhere, 0, std::pair<SimTime, SimTime>{500, 600});
  TraceEvent wait;
  wait.lane = Lane::host;
  wait.category = OpCategory::host;
  const std::uint64_t host = mapper.issue(wait);
  mapper.retire(host, 0, std::pair<SimTime, SimTime>{900, 950});
  std::vector<RoutedRecord> records = {
      {kernel("fill_kernel", 11, 1, 1000 + 100, 1000 + 190), elsewhere, Lane::all_gather},
      {GpuRecord{GpuRecordKind::host_wait, "cudaStreamSynchronize", 0, 0, 4, 1000 + 10, 1000 + 20, 0}, host,
       std::nullopt},
      {GpuRecord{GpuRecordKind::memcpy, "Memcpy HtoH", 0, 12, 5, 1000 + 1, 1000 + 2, 8}, first, Lane::all_gather},
      {kernel("ncclDevKernel_AllGather_RING_LL", 12, 6, 1000 + 1, 1000 + 2), not_yet, Lane::all_gather},
      {kernel("ncclDevKernel_AllGather_RING_LL", 12, 2, 1000 + 80, 1000 + 160), first, Lane::all_gather},
      {kernel("ncclDevKernel_AllGather_RING_LL", 12, 3, 1000 + 175, 1000 + 195), 0, Lane::all_gather},
  };
  // More of the first op's kind, until the lead is used (kLeadSamplesBeforeUse): ops on the compute stream,
  // each a tagged record 20 ns early with a 5 ns gap.
  for (std::int64_t i = 1; i < kLeadSamplesBeforeUse; ++i) {
    const std::uint64_t tag = mapper.issue(op_span(Lane::compute, "fill", OpCategory::compute, 20 + i));
    const SimTime begin = 10000 + 100 * i;
    mapper.retire(tag, 0, std::pair<SimTime, SimTime>{begin, begin + 50});
    const auto start = static_cast<std::uint64_t>(1000 + begin - 20 + 5);
    records.push_back({kernel("fill_kernel", 11, 100, start, start + 10), tag, Lane::compute});
  }
  std::vector<TraceEvent> events;
  mapper.map(records, 0, events);
  EXPECT_EQ(mapper.record_lead(), SimTime{20}) << "the largest (span begin - record start) of the records that "
                                                  "teach; the true lead is 30";
  ASSERT_EQ(events.size(), 6u + static_cast<std::size_t>(kLeadSamplesBeforeUse) - 1u);
  const auto untagged = std::find_if(events.begin(), events.end(), [](const TraceEvent& e) { return e.begin == 175; });
  ASSERT_NE(untagged, events.end()) << "the trace keeps CUPTI's times, on the host's clock";
  EXPECT_EQ(untagged->op, 8u) << "midpoint 185 + 20 lies in the second op's span";
  EXPECT_EQ(mapper.found_by_span(), 1);
}

// The GPU's and the host's clocks drift apart over a run: the lead is the largest over the latest kLeadSamples
// records, so it follows a lead that shrinks.
TEST(GpuActivityMapper, TheLeadFollowsTheLatestRecords) {
  GpuActivityMapper mapper(0, 0);
  const auto tagged_at = [&](SimTime span_begin, SimTime lead) {
    const std::uint64_t tag = mapper.issue(op_span(Lane::compute, "fill", OpCategory::compute, 1));
    mapper.retire(tag, 0, std::pair<SimTime, SimTime>{span_begin, span_begin + 50});
    const auto start = static_cast<std::uint64_t>(span_begin - lead + 1);  // a kernel 1 ns after the start event
    return RoutedRecord{kernel("fill_kernel", 11, 1, start, start + 10), tag, Lane::compute};
  };
  std::vector<TraceEvent> events;
  mapper.map(std::vector<RoutedRecord>{tagged_at(1000, 40)}, 0, events);
  EXPECT_EQ(mapper.record_lead(), std::nullopt) << "one record is too few to go by";
  std::vector<RoutedRecord> later;
  for (std::size_t i = 0; i + 1 < kLeadSamples; ++i) later.push_back(tagged_at(2000 + 100 * SimTime(i), 12));
  mapper.map(later, 1, events);
  EXPECT_EQ(mapper.record_lead(), SimTime{39}) << "the first record is still among the latest kLeadSamples";
  mapper.map(std::vector<RoutedRecord>{tagged_at(900000, 12)}, 2, events);
  EXPECT_EQ(mapper.record_lead(), SimTime{11});
}

TEST(GpuActivityMapper, ACollectiveKeepsTheLinkItsOpTook) {
  GpuActivityMapper mapper(0, 0);
  TraceEvent between = op_span(Lane::reduce_scatter, "reduce_scatter", OpCategory::reduce_scatter, 4);
  between.link = RankLink::between_nodes;
  const std::uint64_t tag = mapper.issue(between);
  std::vector<TraceEvent> events;
  mapper.map(std::vector<RoutedRecord>{{kernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 12, 1, 10, 20), tag,
                                        Lane::reduce_scatter}},
             0, events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].link, RankLink::between_nodes);
}

TEST(GpuActivityMapper, ARecordThatCameBeforeItsOpRetiredWaitsForItsSpan) {
  // The kernel finished and CUPTI handed its record over before the device saw its op's end event: the record
  // waits, and the drain after the op retires labels it. One that lies between two retired spans does not wait.
  GpuActivityMapper mapper(0, 0);
  const auto reduce_scatter = [](OpId op) {
    return op_span(Lane::reduce_scatter, "reduce_scatter", OpCategory::reduce_scatter, op);
  };
  const std::uint64_t done = mapper.issue(reduce_scatter(3));
  const std::uint64_t running = mapper.issue(reduce_scatter(4));
  const std::uint64_t later = mapper.issue(reduce_scatter(5));
  mapper.retire(done, 0, std::pair<SimTime, SimTime>{100, 200});
  std::vector<TraceEvent> events;
  mapper.map(std::vector<RoutedRecord>{{kernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 12, 60, 250, 350), 0,
                                        Lane::reduce_scatter}},
             1, events);
  EXPECT_TRUE(events.empty());
  EXPECT_EQ(mapper.waiting(), 1u);
  mapper.retire(running, 2, std::pair<SimTime, SimTime>{220, 400});
  mapper.retire(later, 2, std::pair<SimTime, SimTime>{500, 600});
  mapper.map(std::vector<RoutedRecord>{{kernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 12, 61, 420, 480), 0,
                                        Lane::reduce_scatter}},
             2, events);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].op, 4u) << "found once its op retired";
  EXPECT_EQ(events[0].category, OpCategory::reduce_scatter);
  EXPECT_EQ(events[1].op, 0u) << "between two retired spans: no op, and nothing to wait for";
  EXPECT_EQ(mapper.waiting(), 0u);

  mapper.map(std::vector<RoutedRecord>{{kernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 12, 62, 700, 800), 0,
                                        Lane::reduce_scatter}},
             3, events);
  EXPECT_EQ(mapper.waiting(), 1u);
  mapper.finish(events);
  ASSERT_EQ(events.size(), 3u) << "the device's end lets it out";
  EXPECT_EQ(events[2].op, 0u);
  EXPECT_EQ(mapper.waiting(), 0u);
  EXPECT_EQ(mapper.found_by_span(), 1);
  EXPECT_EQ(mapper.unlabelled(), 2);
}

TEST(GpuActivity, AnUncorrelatedRecordThatCameLateStillFindsItsOpAfterWaitingThePatience) {
  // A collective's copy made from a thread that pushed no external id: no correlation ever comes, so it waits
  // the router's whole patience, counted from the flush its buffer came in, here 3 flushes after its op
  // retired (its end event seen). The device must still know the op when the record reaches it by its stream.
  GpuRecordRouter router;
  GpuActivityMapper mapper(0, 0);
  router.add_source(1);
  router.add_stream(0, 12, 1, Lane::all_gather);
  const std::uint64_t op = mapper.issue(op_span(Lane::all_gather, "all_gather", OpCategory::all_gather, 4));
  std::vector<TraceEvent> events;
  std::int64_t flush = 0;
  mapper.retire(op, flush, std::pair<SimTime, SimTime>{100, 300});
  for (; flush < 3; ++flush) {
    router.end_flush();
    mapper.map({}, flush + 1, events);  // other records' drains meanwhile forget what is old enough
  }
  router.add(GpuRecord{GpuRecordKind::memcpy, "Memcpy DtoD", 0, 12, 900, 150, 250, 1024});
  while (router.waiting() != 0) {
    router.end_flush();
    ++flush;
    const auto routed = router.take_routed();
    mapper.map({}, flush, events);  // a drain before the record's
    if (const auto it = routed.find(1); it != routed.end()) mapper.map(it->second, flush, events);
  }
  EXPECT_EQ(flush, 3 + kRecordPatienceFlushes);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].op, 4u) << "found by its stream and its op's span";
  EXPECT_EQ(events[0].category, OpCategory::all_gather);
  EXPECT_EQ(mapper.found_by_span(), 1);
  EXPECT_EQ(mapper.unlabelled(), 0);
}

TEST(GpuActivity, AnNcclKernelWithoutCorrelationIsOnTheTimelineAtTheNextDrain) {
  // [Note: NCCL's kernels go by their stream]: routed at once, labelled by its op's span in the same flush,
  // where it used to wait the patience (about five seconds of a live run).
  GpuRecordRouter router;
  GpuActivityMapper mapper(0, 0);
  router.add_stream(0, 12, 1, Lane::all_gather);
  const std::uint64_t op = mapper.issue(op_span(Lane::all_gather, "all_gather", OpCategory::all_gather, 4));
  mapper.retire(op, 0, std::pair<SimTime, SimTime>{100, 300});
  router.add(kernel("ncclDevKernel_AllGather_RING_LL", 12, 900, 150, 250));
  auto routed = router.take_routed();
  std::vector<TraceEvent> events;
  mapper.map(routed[1], 0, events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].op, 4u);
  EXPECT_EQ(events[0].lane, Lane::all_gather);
  EXPECT_EQ(mapper.found_by_span(), 1);
  EXPECT_EQ(router.waiting(), 0u);
}

TEST(GpuActivity, TwoRanksRecordsReachTheirOwnTraces) {
  // Both ranks on one GPU: the router sends each record to its device, each device maps its own.
  GpuRecordRouter router;
  GpuActivityMapper rank0(0, 0), rank1(1, 0);
  router.add_stream(0, 11, 1, Lane::compute);
  router.add_stream(0, 12, 1, Lane::all_gather);
  router.add_stream(0, 21, 2, Lane::compute);
  router.add_stream(0, 22, 2, Lane::all_gather);
  const std::uint64_t a = rank0.issue(op_span(Lane::all_gather, "all_gather", OpCategory::all_gather, 1));
  const std::uint64_t b = rank1.issue(op_span(Lane::compute, "gelu", OpCategory::compute, 1));
  router.add_correlation(1, external_id(1, a));
  router.add(GpuRecord{GpuRecordKind::memcpy, "Memcpy DtoD", 0, 12, 1, 10, 20, 256});
  router.add_correlation(2, external_id(2, b));
  router.add(kernel("gelu_kernel", 21, 2, 15, 25));
  auto routed = router.take_routed();
  std::vector<TraceEvent> events0, events1;
  rank0.map(routed[1], 0, events0);
  rank1.map(routed[2], 0, events1);
  ASSERT_EQ(events0.size(), 1u);
  ASSERT_EQ(events1.size(), 1u);
  EXPECT_EQ(events0[0].rank, 0);
  EXPECT_EQ(events0[0].lane, Lane::all_gather);
  EXPECT_EQ(events0[0].category, OpCategory::all_gather);
  EXPECT_EQ(events1[0].rank, 1);
  EXPECT_EQ(events1[0].lane, Lane::compute);
  EXPECT_EQ(events1[0].name, "gelu_kernel");
}

}  // namespace
}  // namespace fsdplab
