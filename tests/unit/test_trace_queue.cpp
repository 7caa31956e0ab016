// The per-rank sinks: the lock-free queue the dashboard drains while a run goes on, and the recorder.
#include <atomic>
#include <thread>

#include "engine/trace/event_queue.hpp"
#include "engine/trace/trace_recorder.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

TraceEvent numbered_event(std::uint64_t i) {
  TraceEvent e;
  e.name = "op";
  e.op = i;
  e.begin = static_cast<SimTime>(i);
  e.end = static_cast<SimTime>(i) + 1;
  return e;
}

// A producer thread pushes while this thread drains: everything arrives, in order. Under
// ThreadSanitizer this is also the check that the chunk handover is properly synchronised.
TEST(TraceQueue, ConcurrentDrainGetsEverythingInOrder) {
  constexpr std::uint64_t kEvents = 100'000;
  constexpr std::uint64_t kSampleEvery = 8;
  EventQueue queue;
  std::atomic<bool> done{false};
  std::thread producer([&] {
    for (std::uint64_t i = 1; i <= kEvents; ++i) {
      TraceEvent e = numbered_event(i);
      // Every few events a name too long for the small-string buffer: its heap memory crosses threads.
      if (i % 16 == 0) e.name = "a name long enough to live on the heap #" + std::to_string(i);
      if (i % 32 == 0) e.deps = {OpRef{1, i - 1}};
      queue.on_event(e);
      if (i % kSampleEvery == 0)
        queue.on_counter(
            CounterSample{0, static_cast<SimTime>(i), MemTag::activation, static_cast<std::int64_t>(i), 0});
    }
    done.store(true, std::memory_order_release);
  });

  std::vector<TraceEvent> events;
  std::vector<CounterSample> counters;
  for (;;) {
    // Read the flag before draining: once it is seen set, this drain finds every push.
    const bool finished = done.load(std::memory_order_acquire);
    queue.drain(events, counters);
    if (finished) break;
    std::this_thread::yield();
  }
  producer.join();

  ASSERT_EQ(events.size(), kEvents);
  for (std::uint64_t i = 1; i <= kEvents; ++i) {
    const TraceEvent& e = events[i - 1];
    ASSERT_EQ(e.op, i) << "event " << i - 1 << " out of order";
    if (i % 16 == 0) {
      ASSERT_EQ(e.name, "a name long enough to live on the heap #" + std::to_string(i));
    }
    if (i % 32 == 0) {
      ASSERT_EQ(e.deps, (std::vector<OpRef>{OpRef{1, i - 1}}));
    }
  }
  ASSERT_EQ(counters.size(), kEvents / kSampleEvery);
  for (std::size_t k = 0; k < counters.size(); ++k)
    ASSERT_EQ(counters[k].tag_live, static_cast<std::int64_t>((k + 1) * kSampleEvery));
  EXPECT_EQ(queue.drain(events, counters), 0u);
}

// Chunk boundaries, one thread: a drain that stops exactly at the end of a full chunk whose successor
// is not linked yet, one just past it, and several chunks at once.
TEST(TraceQueue, DrainsAcrossChunkBoundaries) {
  constexpr std::size_t kChunk = SpscQueue<TraceEvent>::kChunkSize;
  EventQueue queue;
  std::vector<TraceEvent> events;
  std::vector<CounterSample> counters;
  EXPECT_EQ(queue.drain(events, counters), 0u);

  std::uint64_t next = 1;
  for (const std::size_t batch : {kChunk, std::size_t{1}, kChunk - 1, std::size_t{0}, 3 * kChunk + 5, std::size_t{2}}) {
    for (std::size_t i = 0; i < batch; ++i) queue.on_event(numbered_event(next++));
    const std::size_t before = events.size();
    EXPECT_EQ(queue.drain(events, counters), batch);
    EXPECT_EQ(events.size(), before + batch);
  }
  for (std::size_t i = 0; i < events.size(); ++i) ASSERT_EQ(events[i].op, i + 1);
  EXPECT_TRUE(counters.empty());
}

// Undrained items are freed with the queue (checked by the address sanitizer).
TEST(TraceQueue, DestroyedWithItemsInside) {
  EventQueue queue;
  for (std::uint64_t i = 0; i < 3 * SpscQueue<TraceEvent>::kChunkSize; ++i) queue.on_event(numbered_event(i));
  queue.on_counter(CounterSample{});
}

// Both sinks on a real device see the same stream of events and samples.
TEST(TraceRecorder, SeesWhatTheDeviceEmitsLikeTheQueue) {
  auto device = testing::make_sim_device(3);
  EventQueue queue;
  TraceRecorder recorder;
  device->add_sink(&queue);
  device->add_sink(&recorder);
  {
    LabelScope scope(*device, {.step = 2, .unit = 1, .phase = "forward"});
    device->host_work("python loop", 5 * kNsPerUs);
    Allocation a = device->allocate(4096, MemTag::param_full);
    device->host_work("more host work", 1 * kNsPerUs);
  }
  device->remove_sink(&queue);
  device->remove_sink(&recorder);

  std::vector<TraceEvent> events;
  std::vector<CounterSample> counters;
  queue.drain(events, counters);
  const TraceData& data = recorder.data();
  ASSERT_EQ(data.events.size(), 2u);
  ASSERT_EQ(data.counters.size(), 2u);  // the allocation and its free
  EXPECT_EQ(data.events[0].name, "python loop");
  EXPECT_EQ(data.events[0].rank, 3);
  EXPECT_EQ(data.events[0].step, 2);
  EXPECT_EQ(data.events[0].phase, "forward");
  EXPECT_EQ(data.counters[0].tag, MemTag::param_full);
  EXPECT_EQ(data.counters[0].tag_live, 4096);
  EXPECT_EQ(data.counters[1].tag_live, 0);
  ASSERT_EQ(events.size(), data.events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].name, data.events[i].name);
    EXPECT_EQ(events[i].begin, data.events[i].begin);
    EXPECT_EQ(events[i].end, data.events[i].end);
  }
  ASSERT_EQ(counters.size(), data.counters.size());

  TraceData merged = data;
  merged.append(data);
  EXPECT_EQ(merged.events.size(), 4u);
  EXPECT_EQ(merged.counters.size(), 4u);
  recorder.clear();
  EXPECT_TRUE(recorder.data().events.empty());
}

}  // namespace
}  // namespace fsdplab
