// event_queue.hpp — the sink between a rank's engine thread and the dashboard thread.
//
// The engine must never wait for the UI, and the UI must see every event (a missing op would be a
// hole in the timeline and a wrong number in the metrics). So the queue is unbounded and lock-free:
// a single producer appends to a linked list of fixed-size chunks, a single consumer drains them and
// frees the chunks it has emptied. Nothing is shared but two atomics per chunk:
//   size  how many slots the producer has filled; stored with release after the slot is written,
//         loaded with acquire by the consumer before it reads those slots;
//   next  the chunk after this one; stored with release once this chunk is full, loaded with acquire
//         by the consumer, after which the producer never touches this chunk again, so the consumer
//         may delete it.
// The producer never waits for the consumer. It may allocate (a new chunk every kChunkSize items;
// copying an event's name allocates anyway), but it never takes a lock the consumer holds.
// Memory grows while nobody drains: that is the price of never dropping.
#pragma once
#include <array>
#include <atomic>
#include <cstddef>
#include <utility>
#include <vector>

#include "engine/trace/trace_event.hpp"

namespace fsdplab {

// One producer thread calls push, one consumer thread calls drain; each may be any thread, but only
// one at a time for each role.
template <class T>
class SpscQueue {
 public:
  static constexpr std::size_t kChunkSize = 256;

  SpscQueue() : head_(new Chunk), tail_(head_) {}
  ~SpscQueue() {
    while (head_) delete std::exchange(head_, head_->next.load(std::memory_order_acquire));
  }
  SpscQueue(const SpscQueue&) = delete;
  SpscQueue& operator=(const SpscQueue&) = delete;

  // Producer side.
  void push(const T& item) {
    std::size_t slot = tail_->size.load(std::memory_order_relaxed);  // only this thread writes it
    if (slot == kChunkSize) {
      Chunk* fresh = new Chunk;
      tail_->next.store(fresh, std::memory_order_release);
      tail_ = fresh;
      slot = 0;
    }
    tail_->items[slot] = item;
    tail_->size.store(slot + 1, std::memory_order_release);
  }

  // Consumer side: moves everything published so far to the end of `out`; returns how many.
  std::size_t drain(std::vector<T>& out) {
    std::size_t moved = 0;
    for (;;) {
      const std::size_t size = head_->size.load(std::memory_order_acquire);
      for (; read_ < size; ++read_, ++moved) out.push_back(std::move(head_->items[read_]));
      if (read_ < kChunkSize) break;  // the producer may still fill this chunk
      Chunk* next = head_->next.load(std::memory_order_acquire);
      if (!next) break;  // full, but the next chunk is not linked yet
      delete std::exchange(head_, next);
      read_ = 0;
    }
    return moved;
  }

 private:
  struct Chunk {
    std::array<T, kChunkSize> items{};
    std::atomic<std::size_t> size{0};
    std::atomic<Chunk*> next{nullptr};
  };
  Chunk* head_;           // consumer's chunk
  std::size_t read_ = 0;  // consumer's next slot in head_
  Chunk* tail_;           // producer's chunk
};

// The per-rank sink the dashboard reads: attach it to a rank's device (Device::add_sink) and drain it
// from the UI thread each frame.
class EventQueue final : public TraceSink {
 public:
  void on_event(const TraceEvent& event) override;
  void on_counter(const CounterSample& sample) override;

  // Appends every event and counter sample published so far, each in emission order; returns how
  // many items (events plus samples) were moved.
  std::size_t drain(std::vector<TraceEvent>& events, std::vector<CounterSample>& counters);

 private:
  SpscQueue<TraceEvent> events_;
  SpscQueue<CounterSample> counters_;
};

}  // namespace fsdplab
