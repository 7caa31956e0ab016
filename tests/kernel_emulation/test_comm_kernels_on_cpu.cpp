// The communication kernels' own source (engine/cuda/comm_kernels.cu), run on the CPU by cuda_threads_on_cpu.hpp:
// reduce_peers, LocalComm's reduction when its ranks share a GPU (and NcclComm's bf16 average), must give the bits
// of the host's reduction (rank_order_reduction.hpp, which LocalComm and MpiComm run on the sim device), so that a
// run on one GPU reduces as the sim device does; spin holds a stream for a given time; the emulated link's hold
// counts from the clock its collective started, so that the collective's copies run inside the link's time.
#include "cuda_threads_on_cpu.hpp"

// The kernels, rewritten by kernels_on_cpu.cmake (the global timer's inline PTX: cuda_on_cpu::global_timer_ns).
#include "comm_kernels_on_cpu.inc"

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/rank_order_reduction.hpp"
#include "float_tensors_on_cpu.hpp"

namespace fsdplab {
namespace {

using namespace emulated;

template <class T>
class CommKernelsOnCpu : public ::testing::Test {};
TYPED_TEST_SUITE(CommKernelsOnCpu, emulated::FloatTypes, emulated::FloatTypeNames);

// `count` ranks' buffers of n values each, of mixed magnitudes so that the order of the sum shows in its bits.
template <class T>
std::vector<std::vector<T>> peer_buffers(int count, std::int64_t n) {
  std::vector<std::vector<T>> peers;
  for (int i = 0; i < count; ++i) {
    const float scale = i % 3 == 0 ? 1e4f : i % 3 == 1 ? 1.f : 1e-3f;
    peers.push_back(random_values<T>(static_cast<std::size_t>(n), -scale, scale, static_cast<std::uint32_t>(i + 1)));
  }
  return peers;
}

template <class T>
std::vector<const void*> pointers(const std::vector<std::vector<T>>& peers) {
  std::vector<const void*> out;
  for (const std::vector<T>& p : peers) out.push_back(p.data());
  return out;
}

// What the sim device's LocalComm stores for the same inputs (reduce_in_rank_order, then store_reduced).
template <class T>
std::vector<T> host_reduction(const std::vector<std::vector<T>>& peers, ReduceOp op) {
  std::vector<const std::byte*> inputs;
  for (const std::vector<T>& p : peers) inputs.push_back(reinterpret_cast<const std::byte*>(p.data()));
  const std::int64_t n = static_cast<std::int64_t>(peers.front().size());
  std::vector<T> out(peers.front().size());
  store_reduced(reinterpret_cast<std::byte*>(out.data()), reduce_in_rank_order(inputs, 0, n, dtype_of<T>(), op),
                dtype_of<T>());
  return out;
}

TYPED_TEST(CommKernelsOnCpu, ReducePeersStoresTheHostsRankOrderSumBitForBit) {
  using T = TypeParam;
  // One rank to the most one launch takes; the sum and the average (divided by the peers' count).
  for (const int count : {1, 2, 3, 8, cuda::kMaxReducePeers}) {
    for (const ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
      SCOPED_TRACE(std::to_string(count) + (op == ReduceOp::avg ? " ranks, avg" : " ranks, sum"));
      const std::int64_t n = 1000;
      const auto peers = peer_buffers<T>(count, n);
      auto out = unwritten<T>(n);
      cuda::reduce_peers(nullptr, dtype_of<T>(), out.data(), pointers(peers).data(), count, n,
                         op == ReduceOp::avg ? count : 1);
      EXPECT_TRUE(same_bits(out, host_reduction(peers, op)));
    }
  }
}

// Into one of its inputs, as LocalComm's reduce-scatter may and NcclComm's bf16 average does (its sum divided by
// the group's size in place, one buffer): each element is read before it is written.
TYPED_TEST(CommKernelsOnCpu, ReducePeersMayWriteIntoItsFirstInput) {
  using T = TypeParam;
  const std::int64_t n = 777;
  auto peers = peer_buffers<T>(3, n);
  const std::vector<T> want = host_reduction(peers, ReduceOp::avg);
  cuda::reduce_peers(nullptr, dtype_of<T>(), peers[0].data(), pointers(peers).data(), 3, n, 3);
  EXPECT_TRUE(same_bits(peers[0], want));

  // NcclComm's bf16 average: NCCL's sum in place, then divided by the group's size, rounded once.
  auto sum = random_values<T>(static_cast<std::size_t>(n), -10.f, 10.f, 9);
  std::vector<T> divided(sum.size());
  for (std::size_t i = 0; i < sum.size(); ++i) divided[i] = from_value<T>(value(sum[i]) / 3.f);
  const void* one[] = {sum.data()};
  cuda::reduce_peers(nullptr, dtype_of<T>(), sum.data(), one, 1, n, 3);
  EXPECT_TRUE(same_bits(sum, divided));
}

// More elements than the grid has threads (4,096 blocks of 256): the grid-stride loop takes the rest.
TEST(CommKernelsOnCpu, ReducePeersCoversMoreElementsThanTheGridHasThreads) {
  const std::int64_t n = 4096 * 256 + 37;
  const auto peers = peer_buffers<float>(2, n);
  auto out = unwritten<float>(n);
  cuda::reduce_peers(nullptr, DType::f32, out.data(), pointers(peers).data(), 2, n, 1);
  EXPECT_TRUE(same_bits(out, host_reduction(peers, ReduceOp::sum)));
}

TEST(CommKernelsOnCpu, ReducePeersRefusesWhatItCannotReduce) {
  std::vector<float> a(4), out(4);
  const void* one[] = {a.data()};
  const auto message = [&](int count, int divisor, DType dtype) {
    return refusal_of([&] { cuda::reduce_peers(nullptr, dtype, out.data(), one, count, 4, divisor); });
  };
  EXPECT_NE(message(0, 1, DType::f32).find("reduce over 0 ranks on one GPU; expected 1 to 64"), std::string::npos);
  EXPECT_NE(message(65, 1, DType::f32).find("reduce over 65 ranks on one GPU; expected 1 to 64"), std::string::npos);
  EXPECT_NE(message(1, 0, DType::f32).find("divided by 0; expected a group size >= 1"), std::string::npos);
  EXPECT_NE(message(1, 1, DType::i32).find("i32 cannot be reduced; expected f32 or bf16"), std::string::npos);
}

// The emulated link's hold: the stream is busy for at least the time asked, and nothing is launched for none.
TEST(CommKernelsOnCpu, SpinHoldsTheStreamForTheLinksTime) {
  const auto held_ms = [](std::int64_t nanoseconds) {
    const auto start = std::chrono::steady_clock::now();
    cuda::spin(nullptr, nanoseconds);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  EXPECT_GE(held_ms(3'000'000), 3.0);
  EXPECT_LT(held_ms(0), 3.0);
  EXPECT_LT(held_ms(-5), 3.0);
}

// ---- the emulated link: a clock at the collective's start, a hold after its copies ----

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The clock is the global timer's reading where its kernel ran: between two readings of it around the launch,
// and later for a later start.
TEST(CommKernelsOnCpu, TheLinkClockRecordsTheGlobalTimer) {
  unsigned long long clock = 0;
  const unsigned long long before = cuda_on_cpu::global_timer_ns();
  cuda::start_link_clock(nullptr, &clock);
  const unsigned long long after = cuda_on_cpu::global_timer_ns();
  EXPECT_GE(clock, before);
  EXPECT_LE(clock, after);

  std::this_thread::sleep_for(milliseconds(1));
  const unsigned long long first = clock;
  cuda::start_link_clock(nullptr, &clock);
  EXPECT_GE(clock, first + 1'000'000) << "a second start 1 ms later reads the timer 1 ms later";
}

// The copies (a host sleep of 20 ms here) run inside the link's 25 ms: the collective takes 25 ms from its clock,
// where a hold counting from its own launch would add the two (45 ms, the hold alone 25).
TEST(CommKernelsOnCpu, TheLinksHoldCountsFromTheCollectivesStart) {
  const std::int64_t link_ns = 25'000'000;
  unsigned long long clock = 0;
  const auto start = Clock::now();
  cuda::start_link_clock(nullptr, &clock);
  std::this_thread::sleep_for(milliseconds(20));  // the collective's copies
  const auto hold = Clock::now();
  cuda::hold_link(nullptr, &clock, link_ns);
  const double total = ms_since(start);
  const double held = ms_since(hold);
  EXPECT_GE(total, 25.0) << "the hold lasts until the link's time has passed since the clock started";
  EXPECT_LT(held, 25.0) << "the copies' time counts as the link's: the hold only makes up the rest";
  EXPECT_LT(total, 40.0) << "max(link, copies), not their sum (45 ms)";
}

// Copies that took longer than the link: the hold ends at once, the collective taking the copies' time.
TEST(CommKernelsOnCpu, AHoldWhoseTimeHasPassedEndsAtOnce) {
  unsigned long long clock = 0;
  cuda::start_link_clock(nullptr, &clock);
  std::this_thread::sleep_for(milliseconds(30));  // copies slower than the 20 ms link
  const auto hold = Clock::now();
  cuda::hold_link(nullptr, &clock, 20'000'000);
  EXPECT_LT(ms_since(hold), 20.0) << "a hold counting from its own launch would take the link's 20 ms";
}

// No link time, no hold: not even until the clock itself, here a second in the future (a kernel launched for 0 ns
// would wait for it).
TEST(CommKernelsOnCpu, NoHoldForALinkTimeOfZeroOrLess) {
  const unsigned long long clock = cuda_on_cpu::global_timer_ns() + 1'000'000'000ULL;
  for (const std::int64_t nanoseconds : {std::int64_t{0}, std::int64_t{-5}}) {
    const auto hold = Clock::now();
    cuda::hold_link(nullptr, &clock, nanoseconds);
    EXPECT_LT(ms_since(hold), 500.0) << nanoseconds << " ns";
  }
}

}  // namespace
}  // namespace fsdplab
