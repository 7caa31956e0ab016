#include "engine/runtime/caching_allocator.hpp"

#include <algorithm>
#include <exception>
#include <iostream>

namespace fsdplab {

CachingAllocator::~CachingAllocator() {
  // Only cached blocks are given back: a live block's memory may still be in use on the GPU.
  try {
    flush();
  } catch (const std::exception& e) {
    std::cerr << "fsdplab: cached device memory not given back: " << e.what() << "\n";
  }
}

void CachingAllocator::lose(const std::exception& e) noexcept {
  ++lost_;
  if (first_loss_.empty()) first_loss_ = e.what();
}

std::int64_t CachingAllocator::cached_bytes() const {
  std::int64_t bytes = 0;
  for (const Pool& pool : pools_)
    for (const auto& [capacity, cached] : pool) bytes += capacity;
  return bytes;
}

Block* CachingAllocator::hand_out(Block* block, std::int64_t bytes, MemTag tag, Lane stream) {
  block->bytes = bytes;
  block->tag = tag;
  block->stream = stream;
  block->generation += 1;
  block->live = true;
  ++live_;
  return block;
}

Block* CachingAllocator::reuse(std::int64_t size_class, Lane stream) {
  Pool& own = pools_[lane_index(stream)];
  // The stream's own pool first: its order makes the reuse safe with no wait at all.
  if (auto it = own.lower_bound(size_class); it != own.end() && fits(it->first, size_class)) {
    Block* block = it->second.block;
    own.erase(it);
    return block;
  }
  if (stream == Lane::host) return nullptr;  // pinned host memory never becomes device memory, nor back
  // Another stream's block: one whose free has passed costs nothing; otherwise the new stream is ordered
  // after the free, so it cannot write the block while its old stream still reads it.
  Pool* pending_pool = nullptr;
  Pool::iterator pending;
  for (Lane other : kAllLanes) {
    if (other == stream || other == Lane::host) continue;
    Pool& pool = pools_[lane_index(other)];
    for (auto it = pool.lower_bound(size_class); it != pool.end() && fits(it->first, size_class); ++it) {
      if (source_.passed(it->second.freed)) {
        Block* block = it->second.block;
        source_.handed_over(*block, stream, it->second.freed);
        pool.erase(it);
        return block;
      }
      if (!pending_pool) {
        pending_pool = &pool;
        pending = it;
      }
    }
  }
  if (!pending_pool) return nullptr;
  source_.order_after(stream, pending->second.freed);
  Block* block = pending->second.block;
  source_.handed_over(*block, stream, pending->second.freed);
  pending_pool->erase(pending);
  return block;
}

Block* CachingAllocator::take(std::int64_t bytes, MemTag tag, Lane stream) {
  const std::int64_t size_class = CachingAllocator::size_class(bytes);
  if (Block* block = reuse(size_class, stream)) return hand_out(block, bytes, tag, stream);
  const bool host = stream == Lane::host;
  std::optional<std::byte*> data = source_.obtain(size_class, host);
  if (!data) {
    // Cached blocks of other sizes may be what stands in the way: give them all back and ask once more.
    flush();
    ++flushes_;
    data = source_.obtain(size_class, host);
    if (!data) return nullptr;
  }
  auto block = std::make_unique<Block>();
  block->id = next_id_++;
  block->capacity = size_class;
  block->data = *data;
  reserved_ += size_class;
  Block* taken = block.get();
  blocks_.emplace(taken->id, std::move(block));
  return hand_out(taken, bytes, tag, stream);
}

void CachingAllocator::put(Block* block) noexcept {
  block->live = false;
  --live_;
  try {
    pools_[lane_index(block->stream)].emplace(block->capacity, Cached{block, source_.mark(block->stream)});
  } catch (const std::exception& e) {
    lose(e);  // no mark, so no safe reuse: the block stays out of the cache
  }
}

Block* CachingAllocator::find(BlockId id) const {
  auto it = blocks_.find(id);
  return it == blocks_.end() ? nullptr : it->second.get();
}

void CachingAllocator::flush() {
  for (Pool& pool : pools_) {
    while (!pool.empty()) {
      // Out of the pool before the source is asked: a block whose wait or give-back fails is lost, and a
      // later flush (the destructor's) cannot give it back a second time.
      const auto [capacity, cached] = *pool.begin();
      pool.erase(pool.begin());
      try {
        source_.wait(cached.freed);
        source_.give_back(cached.block->data, cached.block->stream == Lane::host);
      } catch (const std::exception& e) {
        lose(e);
        throw;
      }
      reserved_ -= capacity;
      blocks_.erase(cached.block->id);
    }
  }
}

}  // namespace fsdplab
