// The cuda device's caching allocator, on the host: a BlockSource whose memory is host memory and whose
// marks pass when the test says their stream has caught up. What it checks is the allocator's policy:
// same-stream reuse without waiting, cross-stream reuse only after the free's mark (or ordered after it),
// the cache given back when the source refuses, pinned host memory kept apart, and a failing source's frees
// lost rather than thrown.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "engine/runtime/caching_allocator.hpp"
#include "engine/runtime/error.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using testing::contains;
using testing::error_of;

// Host memory with a budget; a mark is the count of work items its stream had when it was made, and it
// has passed once the test advanced that stream's "done" count past it.
class HostSource final : public BlockSource {
 public:
  explicit HostSource(std::int64_t budget) : budget_(budget) {}

  std::optional<std::byte*> obtain(std::int64_t bytes, bool host) override {
    if (held_ + bytes > budget_) return std::nullopt;
    held_ += bytes;
    obtained.push_back({bytes, host});
    auto memory = std::make_unique<std::byte[]>(static_cast<std::size_t>(bytes));
    std::byte* p = memory.get();
    memory_.emplace(p, std::make_pair(std::move(memory), bytes));
    return p;
  }
  void give_back(std::byte* data, bool) override {
    auto it = memory_.find(data);
    ASSERT_NE(it, memory_.end()) << "gave back memory it never obtained";
    held_ -= it->second.second;
    memory_.erase(it);
    ++given_back;
  }
  Mark mark(Lane stream) override {
    if (fail_marks) fail("marking a free: the device has failed");
    ++issued_[stream];
    return std::make_shared<std::pair<Lane, int>>(stream, issued_[stream]);
  }
  bool passed(const Mark& mark) override {
    if (!mark) return true;
    const auto& [lane, n] = *static_cast<const std::pair<Lane, int>*>(mark.get());
    return done_[lane] >= n;
  }
  void order_after(Lane stream, const Mark& mark) override { orders.push_back({stream, mark}); }
  void handed_over(const Block& block, Lane stream, const Mark& mark) override {
    handovers.push_back({block.id, stream, block.stream, passed(mark)});
  }
  void wait(const Mark& mark) override {
    if (fail_waits) fail("waiting for a free: the device has failed");
    if (!mark) return;
    const auto& [lane, n] = *static_cast<const std::pair<Lane, int>*>(mark.get());
    done_[lane] = std::max(done_[lane], n);
    ++host_waits;
  }

  void catch_up(Lane stream) { done_[stream] = issued_[stream]; }
  std::int64_t held() const { return held_; }

  struct Obtained {
    std::int64_t bytes;
    bool host;
  };
  std::vector<Obtained> obtained;
  std::vector<std::pair<Lane, Mark>> orders;
  struct HandOver {
    BlockId block;
    Lane to;
    Lane from;  // the stream it was freed on: still the block's stream when it is handed over
    bool passed;
  };
  std::vector<HandOver> handovers;
  int given_back = 0;
  int host_waits = 0;
  bool fail_marks = false;  // as a CUDA device's calls fail once a kernel has faulted
  bool fail_waits = false;

 private:
  std::int64_t budget_;
  std::int64_t held_ = 0;
  std::map<std::byte*, std::pair<std::unique_ptr<std::byte[]>, std::int64_t>> memory_;
  std::map<Lane, int> issued_, done_;
};

TEST(CachingAllocator, TagsEveryBlockAndRoundsToTheSizeClass) {
  HostSource source(1 << 20);
  CachingAllocator allocator(source);
  Block* b = allocator.take(1000, MemTag::param_full, Lane::all_gather);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->tag, MemTag::param_full);
  EXPECT_EQ(b->stream, Lane::all_gather);
  EXPECT_EQ(b->bytes, 1000);
  EXPECT_EQ(b->capacity, 1024);
  EXPECT_TRUE(b->live);
  EXPECT_EQ(allocator.find(b->id), b);
  EXPECT_EQ(allocator.reserved_bytes(), 1024);
  allocator.put(b);
  EXPECT_FALSE(b->live);
  EXPECT_EQ(allocator.cached_bytes(), 1024);
}

TEST(CachingAllocator, ReusesOnItsOwnStreamAtOnce) {
  HostSource source(1 << 20);
  CachingAllocator allocator(source);
  Block* first = allocator.take(4096, MemTag::activation, Lane::compute);
  allocator.put(first);  // its stream has not caught up: the mark has not passed
  Block* again = allocator.take(4000, MemTag::workspace, Lane::compute);
  EXPECT_EQ(again, first) << "the same stream's order makes the reuse safe";
  EXPECT_EQ(again->tag, MemTag::workspace);
  EXPECT_EQ(again->generation, 2u);
  EXPECT_TRUE(source.orders.empty());
  EXPECT_TRUE(source.handovers.empty()) << "a block that stays on its stream is not handed over";
  EXPECT_EQ(source.obtained.size(), 1u);
}

TEST(CachingAllocator, AnotherStreamWaitsForTheFreeUnlessItPassed) {
  HostSource source(1 << 20);
  CachingAllocator allocator(source);
  Block* gathered = allocator.take(8192, MemTag::param_full, Lane::all_gather);
  allocator.put(gathered);
  // Not passed: the compute stream may take it only ordered after the free.
  Block* reused = allocator.take(8192, MemTag::activation, Lane::compute);
  ASSERT_EQ(reused, gathered);
  ASSERT_EQ(source.orders.size(), 1u);
  EXPECT_EQ(source.orders[0].first, Lane::compute);
  EXPECT_FALSE(source.passed(source.orders[0].second));
  allocator.put(reused);

  // Passed: no ordering needed.
  source.catch_up(Lane::compute);
  Block* again = allocator.take(8192, MemTag::grad_full, Lane::reduce_scatter);
  EXPECT_EQ(again, gathered);
  EXPECT_EQ(source.orders.size(), 1u);

  // Both crossings are told to the source, which a device that checks ordering needs either way.
  ASSERT_EQ(source.handovers.size(), 2u);
  EXPECT_EQ(source.handovers[0].block, gathered->id);
  EXPECT_EQ(source.handovers[0].from, Lane::all_gather);
  EXPECT_EQ(source.handovers[0].to, Lane::compute);
  EXPECT_FALSE(source.handovers[0].passed);
  EXPECT_EQ(source.handovers[1].from, Lane::compute);
  EXPECT_EQ(source.handovers[1].to, Lane::reduce_scatter);
  EXPECT_TRUE(source.handovers[1].passed);
}

TEST(CachingAllocator, PrefersABlockWhoseFreeHasPassed) {
  HostSource source(1 << 20);
  CachingAllocator allocator(source);
  Block* busy = allocator.take(2048, MemTag::activation, Lane::compute);
  Block* idle = allocator.take(2048, MemTag::param_full, Lane::all_gather);
  allocator.put(busy);
  allocator.put(idle);
  source.catch_up(Lane::all_gather);
  Block* taken = allocator.take(2048, MemTag::grad_full, Lane::reduce_scatter);
  EXPECT_EQ(taken, idle);
  EXPECT_TRUE(source.orders.empty());
}

TEST(CachingAllocator, NeverHandsOutABlockFarLargerThanAsked) {
  HostSource source(1 << 20);
  CachingAllocator allocator(source);
  Block* big = allocator.take(64 * 1024, MemTag::activation, Lane::compute);
  allocator.put(big);
  Block* small = allocator.take(1024, MemTag::activation, Lane::compute);
  EXPECT_NE(small, big);
  EXPECT_EQ(small->capacity, 1024);
}

TEST(CachingAllocator, GivesItsCacheBackWhenTheSourceRefusesAndRetries) {
  HostSource source(16 * 1024);
  CachingAllocator allocator(source);
  Block* a = allocator.take(8 * 1024, MemTag::activation, Lane::compute);
  Block* b = allocator.take(4 * 1024, MemTag::activation, Lane::all_gather);
  const BlockId a_id = a->id;
  allocator.put(a);
  allocator.put(b);
  // 12 KiB is cached in sizes that do not fit 12 KiB; the budget has only 4 KiB left.
  Block* c = allocator.take(12 * 1024, MemTag::param_full, Lane::compute);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(allocator.flushes(), 1);
  EXPECT_EQ(source.given_back, 2);
  EXPECT_EQ(source.host_waits, 2) << "each cached block's stream is waited for before its memory goes";
  EXPECT_EQ(allocator.reserved_bytes(), 12 * 1024);
  EXPECT_EQ(allocator.find(a_id), nullptr) << "a block given back is gone";
  EXPECT_NE(c->id, a_id);
}

TEST(CachingAllocator, SaysSoWhenEvenAnEmptyCacheDoesNotHelp) {
  HostSource source(4096);
  CachingAllocator allocator(source);
  Block* held = allocator.take(4096, MemTag::param_shard, Lane::compute);
  EXPECT_EQ(allocator.take(512, MemTag::activation, Lane::compute), nullptr);
  EXPECT_TRUE(held->live) << "live blocks are never given back";
  EXPECT_EQ(allocator.live_blocks(), 1);
}

TEST(CachingAllocator, KeepsPinnedHostMemoryApart) {
  HostSource source(1 << 20);
  CachingAllocator allocator(source);
  Block* host = allocator.take(4096, MemTag::optim_state, Lane::host);
  EXPECT_TRUE(source.obtained.back().host);
  allocator.put(host);
  Block* device = allocator.take(4096, MemTag::optim_state, Lane::compute);
  EXPECT_NE(device, host);
  EXPECT_FALSE(source.obtained.back().host);
  allocator.put(device);
  EXPECT_EQ(allocator.take(4096, MemTag::optim_state, Lane::host), host);
}

TEST(CachingAllocator, GivesEveryCachedBlockBackWhenDestroyed) {
  HostSource source(1 << 20);
  {
    CachingAllocator allocator(source);
    allocator.put(allocator.take(4096, MemTag::activation, Lane::compute));
    allocator.put(allocator.take(512, MemTag::activation, Lane::memcpy));
  }
  EXPECT_EQ(source.held(), 0);
}

// A tensor's destructor frees its block, often while an error unwinds the stack: a free the failed device
// cannot mark must not throw (std::terminate), and without a mark the block is never handed out again.
TEST(CachingAllocator, AFreeTheSourceCannotMarkIsLostNotThrown) {
  HostSource source(1 << 20);
  CachingAllocator allocator(source);
  Block* b = allocator.take(4096, MemTag::activation, Lane::compute);
  source.fail_marks = true;
  EXPECT_NO_THROW(allocator.put(b));
  EXPECT_EQ(allocator.lost_blocks(), 1);
  EXPECT_TRUE(contains(allocator.first_loss(), "marking a free: the device has failed")) << allocator.first_loss();
  EXPECT_EQ(allocator.cached_bytes(), 0);
  EXPECT_EQ(allocator.live_blocks(), 0);
  source.fail_marks = false;
  Block* next = allocator.take(4096, MemTag::activation, Lane::compute);
  EXPECT_NE(next->data, b->data) << "a block freed without a mark was handed out again";
  EXPECT_EQ(source.obtained.size(), 2u);
}

// A flush that fails loses the block it was at, and the destructor's own flush neither gives that block back a
// second time nor throws.
TEST(CachingAllocator, AFailedFlushLosesOneBlockAndTheDestructorNeverThrows) {
  HostSource source(1 << 20);
  EXPECT_NO_THROW({
    CachingAllocator allocator(source);
    Block* first = allocator.take(4096, MemTag::activation, Lane::compute);
    Block* second = allocator.take(4096, MemTag::activation, Lane::memcpy);
    allocator.put(first);
    allocator.put(second);
    source.fail_waits = true;
    EXPECT_TRUE(contains(error_of([&] { allocator.flush(); }), "waiting for a free"));
    EXPECT_EQ(allocator.lost_blocks(), 1);
    EXPECT_EQ(source.given_back, 0);
    source.fail_waits = false;
    allocator.flush();
    EXPECT_EQ(source.given_back, 1);
    allocator.put(allocator.take(512, MemTag::activation, Lane::compute));
    source.fail_waits = true;  // the destructor's flush fails: said on stderr, not thrown
  });
  EXPECT_EQ(source.given_back, 1);
  EXPECT_EQ(source.held(), 4096 + 512);
}

}  // namespace
}  // namespace fsdplab
