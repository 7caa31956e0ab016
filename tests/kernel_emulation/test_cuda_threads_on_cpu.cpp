// The emulator itself (cuda_threads_on_cpu.hpp): a barrier orders what it should, a missing one shows (under
// ThreadSanitizer as a report, elsewhere as the fresh block's unwritten bytes), a barrier only some threads reach
// stops the test, naming them, where a GPU would hang, and under the asan preset an access past the shared memory
// or a misaligned vector load is reported, where a GPU would fault.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "cuda_threads_on_cpu.hpp"

namespace fsdplab {
namespace {

constexpr unsigned kThreads = 32;

// Each thread writes its slot of shared memory, then reads its neighbour's (thread t reads slot t + 1, the last
// thread slot 0), with or without a __syncthreads between.
__global__ void neighbour_kernel(float* out, bool barrier) {
  float* tile = reinterpret_cast<float*>(cuda_on_cpu::block_shared_memory());
  tile[threadIdx.x] = static_cast<float>(threadIdx.x + 1);
  if (barrier) __syncthreads();
  out[threadIdx.x] = tile[(threadIdx.x + 1) % blockDim.x];
}

std::vector<float> neighbour_reads(bool barrier) {
  std::vector<float> out(kThreads, 0.f);
  cuda_on_cpu::launch([](auto... a) { neighbour_kernel(a...); }, dim3(1), dim3(kThreads), kThreads * sizeof(float),
                      nullptr, out.data(), barrier);
  return out;
}

// Overwrites its slot after the barrier its neighbour's read waits for, with no second barrier before the write:
// a thread already past the first __syncthreads, and waiting at the second, must not order its write before the
// neighbour's read (the two phases of one barrier keep their clocks apart).
__global__ void overwrite_kernel(float* out) {
  float* tile = reinterpret_cast<float*>(cuda_on_cpu::block_shared_memory());
  tile[threadIdx.x] = 1.f;
  __syncthreads();
  out[threadIdx.x] = tile[(threadIdx.x + 1) % blockDim.x];
  tile[threadIdx.x] = 2.f;
  __syncthreads();
}

// In block 1, half the threads wait at a __syncthreads the other half skip.
__global__ void divergent_barrier_kernel(float* out) {
  if (blockIdx.x == 1 && threadIdx.x < kThreads / 2) __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1.f;
}

TEST(CudaThreadsOnCpu, WithABarrierEveryThreadReadsItsNeighboursWrite) {
  const std::vector<float> got = neighbour_reads(true);
  for (unsigned t = 0; t < kThreads; ++t) EXPECT_EQ(got[t], static_cast<float>((t + 1) % kThreads + 1)) << t;
}

TEST(CudaThreadsOnCpu, WarpShufflesSumTheWarp) {
  std::vector<float> out(kThreads, 0.f);
  cuda_on_cpu::launch(
      [](float* o) {
        float v = static_cast<float>(threadIdx.x);
        for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
        o[threadIdx.x] = v;
      },
      dim3(1), dim3(kThreads), 0, nullptr, out.data());
  for (unsigned t = 0; t < kThreads; ++t) EXPECT_EQ(out[t], 496.f) << t;  // 0 + 1 + ... + 31
}

#if defined(__SANITIZE_THREAD__)
// A race ThreadSanitizer reports makes the process exit 66 at its end; each runs in a child of its own.
TEST(CudaThreadsOnCpu, ThreadSanitizerReportsAReadNoBarrierOrdersAfterAnotherThreadsWrite) {
  EXPECT_EXIT(
      {
        neighbour_reads(false);
        std::exit(0);
      },
      testing::ExitedWithCode(66), "ThreadSanitizer: data race");
}

TEST(CudaThreadsOnCpu, ThreadSanitizerReportsAWriteAfterABarrierBeforeTheNextOne) {
  EXPECT_EXIT(
      {
        std::vector<float> out(kThreads);
        cuda_on_cpu::launch([](auto... a) { overwrite_kernel(a...); }, dim3(1), dim3(kThreads),
                            kThreads * sizeof(float), nullptr, out.data());
        std::exit(0);
      },
      testing::ExitedWithCode(66), "ThreadSanitizer: data race");
}
#else
// Threads run in turn, each until it waits: without the barrier, thread t reads slot t + 1 before thread t + 1 has
// run, and finds the fresh block's 0xff bytes (NaN); the last thread finds thread 0's write.
TEST(CudaThreadsOnCpu, WithoutTheBarrierAThreadReadsTheUnwrittenBytes) {
  const std::vector<float> got = neighbour_reads(false);
  for (unsigned t = 0; t + 1 < kThreads; ++t) EXPECT_TRUE(std::isnan(got[t])) << t << ": " << got[t];
  EXPECT_EQ(got[kThreads - 1], 1.f);
}

// The last thread to reach the first barrier goes on at once and overwrites its slot before any other thread
// leaves the barrier, so its neighbour reads 2 where a GPU may read either; every other thread reads 1.
TEST(CudaThreadsOnCpu, AWriteAfterTheBarrierIsSeenByTheThreadsThatRunLater) {
  std::vector<float> out(kThreads);
  cuda_on_cpu::launch([](auto... a) { overwrite_kernel(a...); }, dim3(1), dim3(kThreads), kThreads * sizeof(float),
                      nullptr, out.data());
  for (unsigned t = 0; t < kThreads; ++t) EXPECT_EQ(out[t], t == kThreads - 2 ? 2.f : 1.f) << t;
}
#endif

#if defined(__SANITIZE_ADDRESS__)
// Thread 0 also writes the float just past the block's dynamic shared memory: on the GPU compute-sanitizer's memcheck
// reports it, here AddressSanitizer (the alignment's slack around the shared memory is unaddressable).
__global__ void past_the_shared_memory_kernel() {
  float* tile = reinterpret_cast<float*>(cuda_on_cpu::block_shared_memory());
  tile[threadIdx.x] = 1.f;
  if (threadIdx.x == 0) tile[blockDim.x] = 2.f;
}

// A 16-byte load from an address 4 bytes past a 16-byte boundary: "misaligned address" on the GPU, and here (the
// asan preset builds with UBSan too) a misaligned reference to uint4, which CUDA aligns to 16 bytes.
__global__ void misaligned_vector_kernel(const unsigned* in, unsigned* out) {
  *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(in + 1);
}

TEST(CudaThreadsOnCpu, AddressSanitizerReportsAnAccessPastTheSharedMemorysEnd) {
  EXPECT_DEATH(cuda_on_cpu::launch([](auto... a) { past_the_shared_memory_kernel(a...); }, dim3(1), dim3(kThreads),
                                   kThreads * sizeof(float), nullptr),
               "AddressSanitizer: use-after-poison");
}

TEST(CudaThreadsOnCpu, UndefinedBehaviorSanitizerReportsAMisalignedVectorLoad) {
  alignas(16) unsigned in[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  alignas(16) unsigned out[4] = {};
  EXPECT_DEATH(cuda_on_cpu::launch([](auto... a) { misaligned_vector_kernel(a...); }, dim3(1), dim3(1), 0, nullptr,
                                   static_cast<const unsigned*>(in), static_cast<unsigned*>(out)),
               "misaligned address .* for type 'const struct uint4', which requires 16 byte alignment");
}
#endif

TEST(CudaThreadsOnCpu, ABarrierOnlySomeThreadsReachStopsTheTestNamingThem) {
  const auto run = [] {
    std::vector<float> out(2 * kThreads);
    cuda_on_cpu::launch([](auto... a) { divergent_barrier_kernel(a...); }, dim3(2), dim3(kThreads), 0, nullptr,
                        out.data());
  };
  EXPECT_DEATH(run(), "a deadlock");
  EXPECT_DEATH(run(), "thread \\(15, 0, 0\\) of block \\(1, 0, 0\\), at __syncthreads");
  EXPECT_DEATH(run(), "thread \\(16, 0, 0\\) of block \\(1, 0, 0\\), at the block's end");
}

}  // namespace
}  // namespace fsdplab
