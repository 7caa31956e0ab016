// caching_allocator.hpp — the cuda device's allocator: blocks kept per stream and handed out again,
// with events (not guesses) wherever a block crosses from one stream to another.
//
// Asking the GPU for memory (cudaMalloc) synchronizes the whole device and costs tens of microseconds,
// so a freed block is cached and given to the next request of its size class. A block is freed at the
// current end of its stream's work: a mark (a CUDA event) is recorded there. Reuse for the same stream
// needs nothing more, as the stream runs in order. Reuse for another stream is allowed once the mark has
// passed, or with the new stream ordered after the mark (cudaStreamWaitEvent). A block used by a second
// stream while live is that stream's owner's business: FSDP parks it until its last use (DeferredFrees),
// record_stream made explicit. When the GPU refuses, the cache is given back and the request tried once
// more; only then is the caller told (the device reports out of memory).
//
// Freeing never throws: it runs in a tensor's destructor, often while an error unwinds the stack, and a throw
// there would end the process with the wrong message (std::terminate). A block whose free the source cannot
// mark, a CUDA error already failing the device, is kept out of the cache instead: lost, never handed out
// again while the GPU may still use it. The device's next call that may throw reports the error.
//
// The device-specific parts are behind BlockSource, so this logic is tested on the host
// (tests/unit/test_caching_allocator.cpp) with a source whose marks pass when the test says so, and the sim device
// runs on it too: a block passes between its streams as it would on the GPU.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "engine/runtime/device.hpp"

namespace fsdplab {

// What the allocator asks of its device. A mark is an opaque handle (a recorded CUDA event).
class BlockSource {
 public:
  using Mark = std::shared_ptr<void>;
  virtual ~BlockSource() = default;
  // `bytes` of device memory, or of pinned host memory when `host`; nullopt when refused (out of memory). A device
  // that holds no data (the sim device's dry run) grants it as a null pointer.
  virtual std::optional<std::byte*> obtain(std::int64_t bytes, bool host) = 0;
  virtual void give_back(std::byte* data, bool host) = 0;
  // A mark at the current end of `stream`'s work.
  virtual Mark mark(Lane stream) = 0;
  // Whether the work before `mark` is done, without waiting.
  virtual bool passed(const Mark& mark) = 0;
  // Later work on `stream` waits for `mark`; the host does not.
  virtual void order_after(Lane stream, const Mark& mark) = 0;
  // The host waits for `mark`.
  virtual void wait(const Mark& mark) = 0;
  // `block`, freed on another stream at `mark`, now serves `stream`: its mark had passed, or `stream` was ordered
  // after it. A device that checks ordering records the hand-over (the sim device's race detector: see [Note: a
  // block that crosses streams], sim_device.cpp); a GPU needs nothing more.
  virtual void handed_over(const Block& /*block*/, Lane /*stream*/, const Mark& /*mark*/) {}
};

class CachingAllocator {
 public:
  // Blocks are multiples of this, so nearby sizes share a size class.
  static constexpr std::int64_t kGranularity = 512;
  // A cached block serves a request at most this many times smaller than itself.
  static constexpr std::int64_t kMaxReuseSlack = 2;
  // The size class a request of `bytes` takes; the sim device's allocator rounds as this one does.
  static std::int64_t size_class(std::int64_t bytes) {
    return std::max(kGranularity, (bytes + kGranularity - 1) / kGranularity * kGranularity);
  }
  // Whether a cached block of `capacity` may serve a request of `size_class`.
  static bool fits(std::int64_t capacity, std::int64_t size_class) {
    return capacity >= size_class && capacity <= size_class * kMaxReuseSlack;
  }

  explicit CachingAllocator(BlockSource& source) : source_(source) {}
  // Gives every cached block back; where the source fails, says so on stderr and keeps the rest (it never throws).
  // Live blocks at that point are the caller's bug, reported by the device.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` for work on `stream` (Lane::host: pinned host memory), or null when the
  // source refuses even with the cache given back.
  Block* take(std::int64_t bytes, MemTag tag, Lane stream);
  // Frees `block` at the current end of its stream's work; it stays cached, or is lost where the source cannot
  // mark its free. Never throws.
  void put(Block* block) noexcept;
  // Waits for every cached block's mark and gives its memory back. Where the source fails, the error is
  // thrown and that block is lost, never given back twice.
  void flush();
  // The block with this id, live or cached; null when there is none (never allocated, or given back).
  Block* find(BlockId id) const;

  std::int64_t reserved_bytes() const { return reserved_; }  // obtained and not given back
  std::int64_t cached_bytes() const;
  int flushes() const { return flushes_; }
  std::int64_t live_blocks() const { return live_; }
  // Blocks freed or flushed while the source failed: neither cached nor given back. The first failure's message.
  std::int64_t lost_blocks() const { return lost_; }
  const std::string& first_loss() const { return first_loss_; }

 private:
  struct Cached {
    Block* block;
    BlockSource::Mark freed;
  };
  using Pool = std::multimap<std::int64_t, Cached>;  // by capacity
  Block* reuse(std::int64_t size_class, Lane stream);
  Block* hand_out(Block* block, std::int64_t bytes, MemTag tag, Lane stream);
  void lose(const std::exception& e) noexcept;

  BlockSource& source_;
  std::unordered_map<BlockId, std::unique_ptr<Block>> blocks_;  // every block holding memory, by id
  std::array<Pool, kLaneCount> pools_;          // per stream, and the host's pinned pool
  std::int64_t reserved_ = 0;
  std::int64_t live_ = 0;
  BlockId next_id_ = 1;
  int flushes_ = 0;
  std::int64_t lost_ = 0;
  std::string first_loss_;
};

}  // namespace fsdplab
