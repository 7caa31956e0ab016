// cuda_threads_on_cpu.hpp — CUDA's execution model on CPU threads, so that a kernel's own source runs without a
// GPU (kernels_on_cpu.cmake rewrites the .cu file; the tests beside this file run it). A launch runs its blocks
// one after another (x fastest, then y, then z) on one std::thread per CUDA thread of the block, with real
// barriers for __syncthreads (the block) and __syncwarp (its warp); warp shuffles and votes go through a slot per
// lane between two warp barriers. Warps are cut from the block's threads numbered as CUDA numbers them (x
// fastest), so a 32 x 8 block's warp w is its row threadIdx.y == w. Each block's dynamic shared memory starts
// as 0xff bytes, which read as NaN in f32 and bf16, so a read before a write shows. A static `__shared__`
// variable is a function-local static: one for all the threads, as for a block's (blocks run one at a time).
//
// What this checks: index arithmetic, masks, tile loops, shared-memory layout and the kernels' own
// synchronisation (ThreadSanitizer sees exactly the barriers the kernel calls). What it cannot: timing, the
// hardware's memory model beyond those barriers, and real wmma fragment layouts (cuda/mma.h spreads an
// accumulator over the warp in a scrambled order of its own, and keeps an operand's whole matrix in every lane).
// A GPU run is still the test that counts (tests/unit's cuda instances).
#pragma once
#include <atomic>
#include <barrier>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

struct CUstream_st;

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 gridDim, blockDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __restrict__ __restrict
#define __shared__ static

struct uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
// Rounded multiply: the host does not contract a multiply into an add unless asked (-ffp-contract), as the
// kernels ask the GPU not to.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }

namespace cuda_on_cpu {

constexpr int kMaxWarps = 32;

// The running thread's number in its block and its lane in its warp, x fastest, as CUDA numbers them.
inline unsigned thread_in_block() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
inline unsigned lane() { return thread_in_block() % 32; }

// The block running on this process's threads now (blocks run one at a time).
struct Block {
  std::barrier<>* all = nullptr;
  std::barrier<>* warp[kMaxWarps] = {};
  std::uint64_t lane_slot[kMaxWarps][32] = {};  // a lane's value in a shuffle or vote, up to 8 bytes
  std::atomic<int> block_or{0};
  unsigned char* shared = nullptr;
};
inline Block* current = nullptr;

inline unsigned char* block_shared_memory() { return current->shared; }

// kernel<<<grid, block, shared_bytes, stream>>>(args...), one block after another on the same block.x * block.y *
// block.z threads: after each block they meet at a barrier whose completion refills the shared memory. A
// configuration the GPU refuses to launch (over 1024 threads a block, a grid's y or z over 65535) aborts here.
template <class Kernel, class... Args>
void launch(Kernel kernel, dim3 grid, dim3 block, std::size_t shared_bytes, CUstream_st*, Args... args) {
  const unsigned threads = block.x * block.y * block.z;
  const unsigned long long blocks = 1ull * grid.x * grid.y * grid.z;
  if (threads == 0 || threads > 1024 || block.z > 64 || blocks == 0 || grid.y > 65535 || grid.z > 65535) {
    std::fprintf(stderr, "launch: the GPU refuses grid (%u, %u, %u) of blocks (%u, %u, %u)\n", grid.x, grid.y, grid.z,
                 block.x, block.y, block.z);
    std::abort();
  }
  gridDim = grid;
  blockDim = block;
  Block run;
  std::barrier<> all(threads);
  std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
  for (unsigned w = 0; w * 32 < threads; ++w) {
    warp_barriers.push_back(std::make_unique<std::barrier<>>(threads - w * 32 < 32 ? threads - w * 32 : 32));
    run.warp[w] = warp_barriers.back().get();
  }
  run.all = &all;
  std::vector<unsigned char> memory(shared_bytes + 128);
  run.shared = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(memory.data()) + 127) / 128 * 128);
  const auto fresh_shared_memory = [&run, shared_bytes]() noexcept { std::memset(run.shared, 0xff, shared_bytes); };
  fresh_shared_memory();
  std::barrier block_done(threads, fresh_shared_memory);
  current = &run;
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      threadIdx = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
      for (unsigned long long b = 0; b < blocks; ++b) {
        blockIdx = dim3(static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
                        static_cast<unsigned>(b / (1ull * grid.x * grid.y)));
        kernel(args...);
        block_done.arrive_and_wait();
      }
    });
  }
  for (std::thread& w : workers) w.join();
  current = nullptr;
}

}  // namespace cuda_on_cpu

inline void __syncthreads() { cuda_on_cpu::current->all->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) {
  cuda_on_cpu::current->warp[cuda_on_cpu::thread_in_block() / 32]->arrive_and_wait();
}

namespace cuda_on_cpu {
// Every lane of the warp puts `v` in its slot; each then reads what lane `source_lane` put.
template <class T>
T exchange(T v, int source_lane) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t));
  Block& b = *current;
  const unsigned w = thread_in_block() / 32;
  std::memcpy(&b.lane_slot[w][lane()], &v, sizeof(T));
  __syncwarp();
  T got;
  std::memcpy(&got, &b.lane_slot[w][source_lane], sizeof(T));
  __syncwarp();
  return got;
}
}  // namespace cuda_on_cpu

template <class T>
T __shfl_sync(unsigned, T v, int source_lane) {
  return cuda_on_cpu::exchange(v, source_lane);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  return __shfl_sync(mask, v, static_cast<int>(cuda_on_cpu::lane()) ^ lane_mask);
}
// A lane past the warp's end keeps its own value, as on the GPU.
template <class T>
T __shfl_down_sync(unsigned, T v, unsigned delta) {
  const unsigned lane = cuda_on_cpu::lane();
  return cuda_on_cpu::exchange(v, static_cast<int>(lane + delta < 32 ? lane + delta : lane));
}
// Bit i set where lane i's predicate holds.
inline unsigned __ballot_sync(unsigned, int predicate) {
  unsigned mask = 0;
  for (int lane = 0; lane < 32; ++lane) {
    const int p = cuda_on_cpu::exchange(predicate, lane);
    if (p) mask |= 1u << lane;
  }
  return mask;
}
// __syncthreads, returning whether any thread of the block passed a non-zero predicate.
inline int __syncthreads_or(int predicate) {
  cuda_on_cpu::Block& b = *cuda_on_cpu::current;
  b.all->arrive_and_wait();  // every thread has read the previous call's answer
  if (cuda_on_cpu::thread_in_block() == 0) b.block_or.store(0);
  b.all->arrive_and_wait();
  if (predicate) b.block_or.store(1);
  b.all->arrive_and_wait();
  return b.block_or.load();
}
inline int __popc(unsigned x) { return std::popcount(x); }
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
