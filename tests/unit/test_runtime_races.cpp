// The stream-race detector: missing waits, early reuse, use after free, and a host that reads
// without synchronising are reported with both ops named; correctly ordered programs are clean.
#include <gtest/gtest.h>

#include "engine/runtime/error.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using testing::make_sim_device;

OpSpec touching(const std::string& name, SimTime duration, std::vector<Access> reads, std::vector<Access> writes) {
  OpSpec spec;
  spec.name = name;
  spec.duration = duration;
  spec.reads = std::move(reads);
  spec.writes = std::move(writes);
  return spec;
}

TEST(RuntimeRaces, OrderedProducerConsumerIsClean) {
  auto dev = make_sim_device();
  Tensor full = Tensor::empty(*dev, {1024}, DType::f32, MemTag::param_full, "full");
  dev->launch(Lane::all_gather, touching("all_gather unit 0", 50'000, {}, {full.access()}), {});
  Event gathered;
  dev->record(gathered, Lane::all_gather);
  dev->wait(Lane::compute, gathered);
  EXPECT_NO_THROW(dev->launch(Lane::compute, touching("matmul fc1", 10'000, {full.access()}, {}), {}));
}

TEST(RuntimeRaces, MissingWaitIsCaughtWithBothOpsNamed) {
  auto dev = make_sim_device();
  Tensor full = Tensor::empty(*dev, {1024}, DType::f32, MemTag::param_full, "full");
  dev->launch(Lane::all_gather, touching("all_gather unit 0", 50'000, {}, {full.access()}), {});
  // Planted bug: no event between the gather and its consumer.
  try {
    dev->launch(Lane::compute, touching("matmul fc1", 10'000, {full.access()}, {}), {});
    FAIL() << "expected a RaceError";
  } catch (const RaceError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("matmul fc1"), std::string::npos) << m;
    EXPECT_NE(m.find("all_gather unit 0"), std::string::npos) << m;
    EXPECT_NE(m.find("stream compute"), std::string::npos) << m;
    EXPECT_NE(m.find("stream all_gather"), std::string::npos) << m;
    EXPECT_NE(m.find("param_full"), std::string::npos) << m;
    EXPECT_EQ(e.report().rank, 0);
    EXPECT_EQ(e.report().earlier.lane, Lane::all_gather);
    EXPECT_TRUE(e.report().earlier_wrote);
    EXPECT_EQ(e.report().later.lane, Lane::compute);
    EXPECT_FALSE(e.report().later_writes);
  }
  // The racing op was not launched.
  EXPECT_EQ(dev->ops().size(), 1u);
}

TEST(RuntimeRaces, MissingWaitIsCaughtEvenWhenTimingHidesIt) {
  auto dev = make_sim_device();
  Tensor full = Tensor::empty(*dev, {1024}, DType::f32, MemTag::param_full, "full");
  dev->launch(Lane::all_gather, touching("all_gather", 1'000, {}, {full.access()}), {});
  dev->host_work("a long host stall", 1'000'000);  // by now the gather has finished in virtual time
  EXPECT_THROW(dev->launch(Lane::compute, touching("matmul", 1'000, {full.access()}, {}), {}), RaceError);
}

TEST(RuntimeRaces, DisjointRangesOfOneBufferDoNotRace) {
  auto dev = make_sim_device();
  Tensor flat = Tensor::empty(*dev, {1024}, DType::f32, MemTag::param_full, "flat");
  const Tensor lo = flat.view(0, {512});
  const Tensor hi = flat.view(512, {512});
  dev->launch(Lane::all_gather, touching("gather hi", 50'000, {}, {hi.access()}), {});
  EXPECT_NO_THROW(dev->launch(Lane::compute, touching("use lo", 10'000, {lo.access()}, {}), {}));
}

TEST(RuntimeRaces, EarlyReuseAfterFreeIsCaught) {
  auto dev = make_sim_device();
  auto storage = std::make_shared<Storage>(*dev, 4096, MemTag::param_full, "unit 0 full");
  const Tensor full = Tensor::view_of(storage, 0, {1024}, DType::f32, "unit 0 full");
  const BlockId block = full.access().block;
  // A long read on the compute stream, then the host frees the buffer without waiting for it.
  dev->launch(Lane::compute, touching("forward unit 0", 1'000'000, {full.access()}, {}), {});
  storage->free();
  // The caching allocator hands the same block to the next gather, on another stream.
  Tensor next = Tensor::empty(*dev, {1024}, DType::f32, MemTag::param_full, "unit 1 full");
  ASSERT_EQ(next.access().block, block);
  try {
    dev->launch(Lane::all_gather, touching("all_gather unit 1", 10'000, {}, {next.access()}), {});
    FAIL() << "expected a RaceError";
  } catch (const RaceError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("forward unit 0"), std::string::npos) << m;
    EXPECT_NE(m.find("all_gather unit 1"), std::string::npos) << m;
    EXPECT_NE(m.find("freed and reused"), std::string::npos) << m;
  }
}

TEST(RuntimeRaces, ReuseAfterAnEventWaitIsClean) {
  auto dev = make_sim_device();
  auto storage = std::make_shared<Storage>(*dev, 4096, MemTag::param_full, "unit 0 full");
  const Tensor full = Tensor::view_of(storage, 0, {1024}, DType::f32);
  dev->launch(Lane::compute, touching("forward unit 0", 1'000'000, {full.access()}, {}), {});
  Event used("unit 0 used");
  dev->record(used, Lane::compute);
  storage->free();
  Tensor next = Tensor::empty(*dev, {1024}, DType::f32, MemTag::param_full, "unit 1 full");
  dev->wait(Lane::all_gather, used);  // the free event of YaFSDP's buffer pool
  EXPECT_NO_THROW(dev->launch(Lane::all_gather, touching("all_gather unit 1", 10'000, {}, {next.access()}), {}));
}

// [Note: a block that crosses streams]: a block freed on one stream and taken by another, as the cuda device's
// CachingAllocator hands it on a GPU. The gathered buffer is read by a long matmul on the compute stream and freed
// at the host's time, not parked until that read ends; the reduce-scatter stream's next buffer is that block,
// ordered after the all-gather stream's free only.
TEST(RuntimeRaces, ABlockHandedToAnotherStreamRacesWithAThirdStreamsRead) {
  auto dev = make_sim_device();
  auto gathered = std::make_shared<Storage>(*dev, 4096, MemTag::param_full, "unit 0 full", Storage::Start::allocated,
                                            Lane::all_gather);
  const Tensor full = Tensor::view_of(gathered, 0, {1024}, DType::f32, "unit 0 full");
  const BlockId block = full.access().block;
  dev->launch(Lane::all_gather, touching("all_gather unit 0", 10'000, {}, {full.access()}), {});
  Event done("gathered");
  dev->record(done, Lane::all_gather);
  dev->wait(Lane::compute, done);
  dev->launch(Lane::compute, touching("long matmul reads full", 10'000'000, {full.access()}, {}), {});
  gathered->free();
  Tensor staging =
      Tensor::empty(*dev, {1024}, DType::f32, MemTag::comm_buffer, "reduce-scatter staging", Lane::reduce_scatter);
  ASSERT_EQ(staging.access().block, block) << "the allocator hands the freed block to the other stream";
  try {
    dev->launch(Lane::reduce_scatter, touching("reduce_scatter writes staging", 1'000, {}, {staging.access()}), {});
    FAIL() << "expected a RaceError";
  } catch (const RaceError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("long matmul reads full"), std::string::npos) << m;
    EXPECT_NE(m.find("freed and reused"), std::string::npos) << m;
    EXPECT_EQ(e.report().earlier.lane, Lane::compute);
    EXPECT_EQ(e.report().later.lane, Lane::reduce_scatter);
    EXPECT_TRUE(e.report().reused);
  }
}

// The same hand-over where only the old stream used the block: the allocator's order is all it needs. The new
// stream starts after the free, with the wait in the trace, and no earlier.
TEST(RuntimeRaces, ABlockHandedToAnotherStreamWaitsForItsFree) {
  auto dev = make_sim_device();
  auto gathered = std::make_shared<Storage>(*dev, 4096, MemTag::param_full, "unit 0 full", Storage::Start::allocated,
                                            Lane::all_gather);
  const Tensor full = Tensor::view_of(gathered, 0, {1024}, DType::f32, "unit 0 full");
  const BlockId block = full.access().block;
  const OpId gather = dev->launch(Lane::all_gather, touching("all_gather unit 0", 1'000'000, {}, {full.access()}), {});
  gathered->free();
  Tensor activations = Tensor::empty(*dev, {1024}, DType::f32, MemTag::activation, "activations");
  ASSERT_EQ(activations.access().block, block);
  OpId write = 0;
  ASSERT_NO_THROW(write =
                      dev->launch(Lane::compute, touching("write activations", 1'000, {}, {activations.access()}), {}));
  const OpRecord& gather_op = dev->ops().at(0);
  const OpRecord& write_op = dev->ops().at(1);
  ASSERT_EQ(gather_op.id, gather);
  ASSERT_EQ(write_op.id, write);
  EXPECT_GE(write_op.begin, gather_op.end);
  ASSERT_EQ(write_op.deps.size(), 1u);
  EXPECT_EQ(write_op.deps[0].op, gather);
  EXPECT_EQ(write_op.deps[0].reason, WaitReason::freed_block) << "the allocator's wait, not the program's";
}

// The hand-over orders the block's old use before its new one, not the two streams' other work: a read of what the
// old stream wrote elsewhere still needs the program's own wait.
TEST(RuntimeRaces, AHandOverOrdersOnlyItsBlock) {
  auto dev = make_sim_device();
  Tensor other = Tensor::empty(*dev, {1024}, DType::f32, MemTag::param_full, "unit 1 full", Lane::all_gather);
  auto gathered = std::make_shared<Storage>(*dev, 4096, MemTag::param_full, "unit 0 full", Storage::Start::allocated,
                                            Lane::all_gather);
  const Tensor full = Tensor::view_of(gathered, 0, {1024}, DType::f32, "unit 0 full");
  const BlockId block = full.access().block;
  dev->launch(Lane::all_gather, touching("all_gather unit 1", 10'000, {}, {other.access()}), {});
  dev->launch(Lane::all_gather, touching("all_gather unit 0", 10'000, {}, {full.access()}), {});
  gathered->free();
  Tensor activations = Tensor::empty(*dev, {1024}, DType::f32, MemTag::activation, "activations");
  ASSERT_EQ(activations.access().block, block);
  ASSERT_NO_THROW(dev->launch(Lane::compute, touching("write activations", 1'000, {}, {activations.access()}), {}));
  EXPECT_THROW(dev->launch(Lane::compute, touching("matmul reads unit 1", 1'000, {other.access()}, {}), {}), RaceError);
}

TEST(RuntimeRaces, UseAfterFreeIsAnError) {
  auto dev = make_sim_device();
  auto storage = std::make_shared<Storage>(*dev, 4096, MemTag::param_full, "unit 0 full");
  const Tensor full = Tensor::view_of(storage, 0, {1024}, DType::f32);
  const Access stale = full.access();
  storage->free();
  EXPECT_THROW(full.access(), Error);
  try {
    dev->launch(Lane::compute, touching("matmul", 1'000, {stale}, {}), {});
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("after it was freed"), std::string::npos) << e.what();
  }
}

// An access kept past its tensor's free, used once the block holds another allocation: the bytes are someone else's.
TEST(RuntimeRaces, AnAccessKeptPastAFreeIsRefusedAfterTheBlockIsReused) {
  auto dev = make_sim_device();
  auto storage = std::make_shared<Storage>(*dev, 4096, MemTag::param_full, "unit 0 full");
  const Access stale = Tensor::view_of(storage, 0, {1024}, DType::f32).access();
  storage->free();
  Tensor next = Tensor::empty(*dev, {1024}, DType::f32, MemTag::activation, "activations");
  ASSERT_EQ(next.access().block, stale.block);
  const std::string e =
      testing::error_of([&] { dev->launch(Lane::compute, touching("matmul", 1'000, {}, {stale}), {}); });
  EXPECT_TRUE(testing::contains(e, "now holds another allocation (tagged activation)")) << e;
  EXPECT_NO_THROW(dev->launch(Lane::compute, touching("matmul", 1'000, {}, {next.access()}), {}));
}

// An event orders the accesses of the device that recorded it only: another device's, of the same rank number (two
// runs in one thread, an Event kept in a static), counts that device's ops and orders nothing here.
TEST(RuntimeRaces, AnotherDevicesEventOrdersNothingHere) {
  auto a = make_sim_device(0);
  auto b = make_sim_device(0);
  Tensor full = Tensor::empty(*a, {1024}, DType::f32, MemTag::param_full, "full", Lane::all_gather);
  a->launch(Lane::all_gather, touching("all_gather on a", 10'000, {}, {full.access()}), {});
  Tensor other = Tensor::empty(*b, {1024}, DType::f32, MemTag::param_full, "other", Lane::all_gather);
  for (int i = 0; i < 5; ++i)
    b->launch(Lane::all_gather, touching("all_gather on b", 10'000, {}, {other.access()}), {});
  Event on_b("recorded on b");
  b->record(on_b, Lane::all_gather);
  a->wait(Lane::compute, on_b);
  EXPECT_THROW(a->launch(Lane::compute, touching("matmul on a", 1'000, {full.access()}, {}), {}), RaceError);
}

TEST(RuntimeRaces, HostReadWithoutSyncIsARace) {
  auto dev = make_sim_device();
  Tensor loss = Tensor::empty(*dev, {1}, DType::f32, MemTag::activation, "loss");
  dev->launch(Lane::compute, touching("cross_entropy", 10'000, {}, {loss.access()}), {});
  EXPECT_THROW(loss.to_vector(), RaceError);
  dev->synchronize(Lane::compute);
  EXPECT_NO_THROW(loss.to_vector());
}

// An event the host sees completed orders the host after its work, as CUDA's cudaEventQuery does: a read then is clean.
// Not yet completed, it orders nothing.
TEST(RuntimeRaces, AHostReadAfterItsEventCompletedIsClean) {
  auto dev = make_sim_device();
  Tensor loss = Tensor::empty(*dev, {1}, DType::f32, MemTag::activation, "loss");
  dev->launch(Lane::compute, touching("cross_entropy", 10'000, {}, {loss.access()}), {});
  Event written("loss written");
  dev->record(written, Lane::compute);
  EXPECT_FALSE(dev->completed(written));  // the host issued the op and runs ahead of it
  EXPECT_THROW(loss.to_vector(), RaceError);
  const SimTime before = dev->host_time();
  dev->host_work("the host's own work", 1'000'000);  // by now the op is done in virtual time
  EXPECT_TRUE(dev->completed(written));
  EXPECT_EQ(dev->host_time(), before + 1'000'000);  // asking moved no time
  EXPECT_NO_THROW(loss.to_vector());
}

// [Note: a host that polls an event] (sim_device.cpp): the same question asked again and again at one host time is a
// spin, and the host's clock runs to the next end among the events asked about. The loops are bounded so that a
// failure cannot hang.
TEST(RuntimeRaces, ALoopPollingAnEventEndsAtItsTime) {
  auto dev = make_sim_device();
  Tensor loss = Tensor::empty(*dev, {1}, DType::f32, MemTag::activation, "loss");
  dev->launch(Lane::compute, touching("cross_entropy", 10'000, {}, {loss.access()}), {});
  Event written("loss written");
  dev->record(written, Lane::compute);
  int answered_no = 0;
  while (!dev->completed(written) && answered_no < 100'000) ++answered_no;
  EXPECT_LT(answered_no, 100'000);
  EXPECT_EQ(dev->host_time(), written.time());
  EXPECT_NO_THROW(loss.to_vector());  // the spin ordered the host after the op
}

TEST(RuntimeRaces, ALoopPollingTwoEventsInTurnEnds) {
  auto dev = make_sim_device();
  Event first("first"), second("second");
  dev->launch(Lane::compute, touching("short", 10'000, {}, {}), {});
  dev->record(first, Lane::compute);
  dev->launch(Lane::all_gather, touching("long", 50'000, {}, {}), {});
  dev->record(second, Lane::all_gather);
  int rounds = 0;
  for (bool done_first = false, done_second = false; !(done_first && done_second) && rounds < 100'000; ++rounds) {
    done_first = dev->completed(first);
    done_second = dev->completed(second);
  }
  EXPECT_LT(rounds, 100'000);
  EXPECT_EQ(dev->host_time(), second.time());
}

// A loop waiting for either of two events stops when the first of them completes, as on a GPU, whichever it asks
// about first: the spin runs the clock to the earliest end among the records asked about.
TEST(RuntimeRaces, ALoopWaitingForEitherOfTwoEventsEndsAtTheEarlier) {
  auto dev = make_sim_device();
  Event later("later"), earlier("earlier");
  dev->launch(Lane::all_gather, touching("long", 50'000, {}, {}), {});
  dev->record(later, Lane::all_gather);
  dev->launch(Lane::compute, touching("short", 10'000, {}, {}), {});
  dev->record(earlier, Lane::compute);
  ASSERT_LT(earlier.time(), later.time());
  int rounds = 0;
  while (!dev->completed(later) && !dev->completed(earlier) && rounds < 100'000) ++rounds;
  EXPECT_LT(rounds, 100'000);
  EXPECT_EQ(dev->host_time(), earlier.time());
}

// Asking a few times is not a spin: FSDP's schedule gives back its parked buffers at points with no launch between
// them, and asks about one reduction up to 4 times at one host time. Each answer is 'no', and the clock stays.
TEST(RuntimeRaces, AskingAgainIsNotYetASpin) {
  auto dev = make_sim_device();
  dev->launch(Lane::reduce_scatter, touching("reduce", 50'000, {}, {}), {});
  Event reduced("reduced");
  dev->record(reduced, Lane::reduce_scatter);
  const SimTime before = dev->host_time();
  for (int question = 0; question < 8; ++question) EXPECT_FALSE(dev->completed(reduced)) << "question " << question;
  EXPECT_EQ(dev->host_time(), before);
}

// Nor is a question after a launch: the launch moves the host's clock by its overhead and no more.
TEST(RuntimeRaces, AQuestionAfterALaunchIsNotASpin) {
  auto dev = make_sim_device();
  dev->launch(Lane::all_gather, touching("long", 50'000, {}, {}), {});
  Event gathered("gathered");
  dev->record(gathered, Lane::all_gather);
  EXPECT_FALSE(dev->completed(gathered));
  const SimTime before = dev->host_time();
  dev->launch(Lane::compute, touching("short", 1'000, {}, {}), {});
  EXPECT_FALSE(dev->completed(gathered));
  EXPECT_EQ(dev->host_time(), before + dev->cost_model().launch_overhead());
}

TEST(RuntimeRaces, RecordPolicyCollectsInsteadOfThrowing) {
  auto dev = make_sim_device(0, {.dry_run = false, .races = RaceDetector::Policy::record});
  Tensor full = Tensor::empty(*dev, {1024}, DType::f32, MemTag::param_full, "full");
  dev->launch(Lane::all_gather, touching("gather", 50'000, {}, {full.access()}), {});
  EXPECT_NO_THROW(dev->launch(Lane::compute, touching("use", 10'000, {full.access()}, {}), {}));
  ASSERT_EQ(dev->race_detector().races().size(), 1u);
  EXPECT_EQ(dev->race_detector().races()[0].earlier.name, "gather");
}

}  // namespace
}  // namespace fsdplab
