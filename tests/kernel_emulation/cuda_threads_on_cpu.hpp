// cuda_threads_on_cpu.hpp — CUDA's execution model on the CPU, so that a kernel's own source runs without a GPU
// (kernels_on_cpu.cmake rewrites the .cu file; the tests beside this file run it). A launch runs its blocks one
// after another (x fastest, then y, then z); each CUDA thread of the block is a fiber (a stack of its own, switched
// with swapcontext) that runs until it waits at a barrier or ends, and then the next one runs, in thread order.
// __syncthreads waits for the block, __syncwarp for its warp; warp shuffles and votes go through a slot per lane
// between two warp barriers. Warps are cut from the block's threads numbered as CUDA numbers them (x fastest), so
// a 32 x 8 block's warp w is its row threadIdx.y == w. Each block's dynamic shared memory starts as 0xff bytes,
// which read as NaN in f32 and bf16, so a read before a write shows. A static `__shared__` variable is a
// function-local static: one for all the threads, as for a block's (blocks run one at a time). A barrier some
// threads never reach (one inside a branch only some take) aborts the test and names them, where a GPU would hang
// or go wrong quietly.
//
// What this checks: index arithmetic, masks, tile loops, shared-memory layout and the kernels' own
// synchronisation: under ThreadSanitizer each CUDA thread is a thread of its own to TSan, and the only order
// between two of them is what the kernel's barriers make (see [Note: fibers under the sanitizers]); under the
// asan preset's UBSan, that every load and store is aligned to its type, the vector types to 16 bytes as on the
// GPU, where a misaligned one faults. What it
// cannot: timing, the hardware's memory model beyond those barriers, and real wmma fragment layouts (cuda/mma.h
// spreads an accumulator over the warp in a scrambled order of its own, and keeps an operand's whole matrix in
// every lane). A GPU run is still the test that counts (tests/unit's cuda instances).
//
// [Note: fibers under the sanitizers]
// Fibers rather than a std::thread per CUDA thread: with a thread per CUDA thread, a block of 256 on two cores
// spent its time in the OS scheduler and, under TSan, in the bookkeeping of hundreds of live threads. Measured
// on this file's tests in one process each (2-core VM): 19 s -> 7 s plain, 35 s -> 18 s under ASan, 343 s ->
// 75 s under TSan. TSan is told each switch (__tsan_switch_to_fiber), without synchronisation, so it keeps one
// clock per CUDA thread; a barrier releases each arriving thread's clock into it and each leaving thread
// acquires it: the happens-before a real barrier gives, no more. Each phase of a barrier has its clock apart
// (Barrier::clocks), or a thread already at the next phase would hand its later writes to a thread still
// leaving this one. Around the launch only the host orders: it starts every fiber before any runs kernel code
// (fiber_main), with the one synchronising switch into each, so its writes before the launch happen before
// every thread's; and a thread's last switch, as it ends, synchronises with the host, so everything the threads
// did happens before the host's reads after it. No thread starts after another has ended, so the host never
// carries one thread's clock to another. What the fibers and the host share to schedule (which runs, which
// waits where) is in relaxed atomics, which order nothing. AddressSanitizer is told each switch of stacks
// (__sanitizer_start_switch_fiber, __sanitizer_finish_switch_fiber); it still warns once a process that it
// does not fully support swapcontext.
#pragma once
#include <sys/mman.h>
#include <ucontext.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

struct CUstream_st;

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
inline dim3 gridDim, blockDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __restrict__ __restrict
#define __shared__ static

// Aligned as CUDA's vector types are (vector_types.h): a 16-byte load or store from an address that is not a multiple
// of 16 faults on the GPU ("misaligned address"); here UBSan's alignment check (the asan preset) reports it.
struct alignas(16) uint4 {
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

// Happens-before through a barrier, as TSan is told it (nothing without TSan): see [Note: fibers under the
// sanitizers].
inline void tsan_release(const void* address) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(const_cast<void*>(address));
#else
  (void)address;
#endif
}
inline void tsan_acquire(const void* address) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(const_cast<void*>(address));
#else
  (void)address;
#endif
}

// One CUDA thread: its stack, its saved registers, and where it stands.
struct Fiber {
  enum State { kNotStarted, kRunnable, kWaiting, kEnded };
  ucontext_t context{};
  dim3 thread_index, block_index;
  std::atomic<State> state{kNotStarted};
  std::atomic<const struct Barrier*> waiting_at{nullptr};
  std::atomic<unsigned long long> waiting_phase{0};
  std::atomic<unsigned long long> block_number{0};  // block_index as the host may read it, for a deadlock's message
  const struct ThreadSlot* slot = nullptr;          // its stack, and TSan's state for it (thread_slot)
  void* asan_fake_stack = nullptr;
};

// What the thread numbered t of every launch runs on, made once: its stack, kStackBytes above a page that faults
// so that an overflow stops there (the deepest kernel here touches 12 KiB of it, under either sanitizer), and
// TSan's state for it (a fiber of TSan's costs a thread's worth of memory to make). Reusing them across launches
// orders nothing new: every launch's writes happen before the host's next launch (see switch_to_host).
constexpr std::size_t kStackBytes = 64 * 1024, kGuardBytes = 4096;
struct ThreadSlot {
  char* stack = nullptr;
  void* tsan_fiber = nullptr;
};
inline const ThreadSlot& thread_slot(unsigned t) {
  static std::deque<ThreadSlot> slots;  // a deque: a fiber keeps a slot's address while later ones are added
  while (slots.size() <= t) {
    void* mapping = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (mapping == MAP_FAILED || mprotect(mapping, kGuardBytes, PROT_NONE) != 0) {
      std::fprintf(stderr, "launch: cannot map a stack for thread %zu: %s\n", slots.size(), std::strerror(errno));
      std::abort();
    }
    ThreadSlot& slot = slots.emplace_back();
    slot.stack = static_cast<char*>(mapping) + kGuardBytes;
#if defined(__SANITIZE_THREAD__)
    slot.tsan_fiber = __tsan_create_fiber(0);
#endif
  }
  return slots[t];
}

// The launch running now (launches do not nest) and the fiber of it that runs.
struct Launch {
  std::vector<std::unique_ptr<Fiber>> fibers;
  std::function<void()> each_thread;  // a thread's whole part of the launch: every block's kernel call
  ucontext_t host_context{};
  void* host_tsan_fiber = nullptr;
  void* host_asan_fake_stack = nullptr;
  const void* host_stack_bottom = nullptr;
  std::size_t host_stack_bytes = 0;
};
inline Launch* launching = nullptr;
inline std::atomic<Fiber*> running{nullptr};

// From the running fiber back to the host's loop: to wait (the fiber comes back here when it runs again) or for
// good, as it ends: the one switch back that synchronises, so that all the thread did happens before what the
// host does after the launch.
inline void switch_to_host(Fiber& self, bool ending) {
  Launch& l = *launching;
#if defined(__SANITIZE_THREAD__)
  __tsan_switch_to_fiber(l.host_tsan_fiber, ending ? 0 : __tsan_switch_to_fiber_no_sync);
#endif
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(ending ? nullptr : &self.asan_fake_stack, l.host_stack_bottom, l.host_stack_bytes);
#endif
  (void)ending;
  swapcontext(&self.context, &l.host_context);
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(self.asan_fake_stack, &l.host_stack_bottom, &l.host_stack_bytes);
#endif
}

// From the host's loop into `f`, until it waits or ends. Its first run is the one switch in that synchronises: what
// the host wrote before the launch happens before the thread's first instruction.
inline void switch_to(Fiber& f) {
  Launch& l = *launching;
  running.store(&f, std::memory_order_relaxed);
  const bool first = f.state.load(std::memory_order_relaxed) == Fiber::kNotStarted;
  f.state.store(Fiber::kRunnable, std::memory_order_relaxed);
#if defined(__SANITIZE_THREAD__)
  __tsan_switch_to_fiber(f.slot->tsan_fiber, first ? 0 : __tsan_switch_to_fiber_no_sync);
#endif
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(&l.host_asan_fake_stack, f.slot->stack, kStackBytes);
#endif
  (void)first;
  swapcontext(&l.host_context, &f.context);
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(l.host_asan_fake_stack, nullptr, nullptr);
#endif
}

inline Fiber& running_fiber() { return *running.load(std::memory_order_relaxed); }

// A barrier of `count` threads. Each phase's clocks meet in a byte of their own (phases alternate), so a thread
// already past the barrier and arriving at its next phase adds nothing to what a thread still leaving the last
// phase acquires. `on_completion` runs in the last thread to arrive, before any leaves.
struct Barrier {
  Barrier(const char* name_, unsigned count_, std::function<void()> on_completion_ = {})
      : name(name_), count(count_), on_completion(std::move(on_completion_)) {}
  const char* const name;  // what the kernel called to wait here, for a deadlock's message
  const unsigned count;
  const std::function<void()> on_completion;
  std::atomic<unsigned> arrived{0};
  std::atomic<unsigned long long> phase{0};
  char clocks[2] = {};

  void arrive_and_wait() {
    const unsigned long long my_phase = phase.load(std::memory_order_relaxed);
    const char* clock = &clocks[my_phase % 2];
    tsan_release(clock);
    if (arrived.fetch_add(1, std::memory_order_relaxed) + 1 == count) {
      arrived.store(0, std::memory_order_relaxed);
      tsan_acquire(clock);
      if (on_completion) on_completion();
      tsan_release(clock);
      phase.store(my_phase + 1, std::memory_order_relaxed);
      return;
    }
    Fiber& self = running_fiber();
    self.waiting_at.store(this, std::memory_order_relaxed);
    self.waiting_phase.store(my_phase, std::memory_order_relaxed);
    self.state.store(Fiber::kWaiting, std::memory_order_relaxed);
    switch_to_host(self, false);
    tsan_acquire(clock);
  }
};

// The running thread's index in its block, and its block's in the grid.
#define threadIdx (::cuda_on_cpu::running_fiber().thread_index)
#define blockIdx (::cuda_on_cpu::running_fiber().block_index)

// The running thread's number in its block and its lane in its warp, x fastest, as CUDA numbers them.
inline unsigned thread_in_block() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
inline unsigned lane() { return thread_in_block() % 32; }

// The block running now (blocks run one at a time).
struct Block {
  Barrier* all = nullptr;
  Barrier* warp[kMaxWarps] = {};
  std::uint64_t lane_slot[kMaxWarps][32] = {};  // a lane's value in a shuffle or vote, up to 8 bytes
  std::atomic<int> block_or{0};
  unsigned char* shared = nullptr;
};
inline Block* current = nullptr;

inline unsigned char* block_shared_memory() { return current->shared; }

// getcontext in a function of its own: it returns twice (in principle), which a caller's loop variables would not
// survive (-Wclobbered).
[[gnu::noinline]] inline void fresh_context(ucontext_t& context) { getcontext(&context); }

// A fiber's first instruction. It goes straight back to the host, which starts every fiber so before it runs any:
// a thread's first switch in carries the host's clock to it, and no thread has ended yet whose clock the host
// would carry along (one that ends synchronises with the host). Then its part of the launch.
inline void fiber_main() {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(nullptr, &launching->host_stack_bottom, &launching->host_stack_bytes);
#endif
  Fiber& self = running_fiber();
  switch_to_host(self, false);
  launching->each_thread();
  self.state.store(Fiber::kEnded, std::memory_order_relaxed);
  switch_to_host(self, true);
}

// The grid's block numbered b, x fastest.
inline dim3 block_of(unsigned long long b) {
  return dim3(static_cast<unsigned>(b % gridDim.x), static_cast<unsigned>(b / gridDim.x % gridDim.y),
              static_cast<unsigned>(b / (1ull * gridDim.x * gridDim.y)));
}

// Runs every fiber of the launch until all have ended, each in turn until it waits or ends; a waiting one runs
// again once its barrier's phase has passed. A pass in which none could run is a deadlock: it aborts, naming
// the threads that wait and where.
inline void run_fibers(Launch& l) {
  for (;;) {
    bool ran = false, all_ended = true;
    for (const std::unique_ptr<Fiber>& f : l.fibers) {
      const Fiber::State state = f->state.load(std::memory_order_relaxed);
      if (state == Fiber::kEnded) continue;
      all_ended = false;
      if (state == Fiber::kWaiting &&
          f->waiting_at.load(std::memory_order_relaxed)->phase.load(std::memory_order_relaxed) ==
              f->waiting_phase.load(std::memory_order_relaxed)) {
        continue;
      }
      switch_to(*f);
      ran = true;
    }
    if (all_ended) return;
    if (!ran) {
      std::fprintf(stderr, "launch: a deadlock: these threads wait at a barrier the others never reach\n");
      for (const std::unique_ptr<Fiber>& f : l.fibers) {
        if (f->state.load(std::memory_order_relaxed) != Fiber::kWaiting) continue;
        const Barrier* at = f->waiting_at.load(std::memory_order_relaxed);
        const dim3 block = block_of(f->block_number.load(std::memory_order_relaxed));
        std::fprintf(stderr, "  thread (%u, %u, %u) of block (%u, %u, %u), at %s\n", f->thread_index.x,
                     f->thread_index.y, f->thread_index.z, block.x, block.y, block.z, at->name);
      }
      std::abort();
    }
  }
}

// A fiber for each thread of `block`, each started (see fiber_main), none yet in the kernel.
inline void start_fibers(Launch& l, dim3 block) {
#if defined(__SANITIZE_THREAD__)
  l.host_tsan_fiber = __tsan_get_current_fiber();
#endif
  const unsigned threads = block.x * block.y * block.z;
  for (unsigned t = 0; t < threads; ++t) {
    auto f = std::make_unique<Fiber>();
    f->thread_index = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
    f->slot = &thread_slot(t);
#if defined(__SANITIZE_ADDRESS__)
    // What an earlier launch's thread left poisoned on this stack (the frames it never returned from).
    __asan_unpoison_memory_region(f->slot->stack, kStackBytes);
#endif
    fresh_context(f->context);
    f->context.uc_stack.ss_sp = f->slot->stack;
    f->context.uc_stack.ss_size = kStackBytes;
    f->context.uc_link = nullptr;
    makecontext(&f->context, fiber_main, 0);
    // The stack is set: with none named, AddressSanitizer's swapcontext leaves the stack's shadow as it is, where
    // it would clear it at every switch in (it is told each switch, by switch_to and switch_to_host).
    f->context.uc_stack = {};
    l.fibers.push_back(std::move(f));
  }
  launching = &l;
  for (const std::unique_ptr<Fiber>& f : l.fibers) switch_to(*f);
}

// Under AddressSanitizer, the bytes around a block's dynamic shared memory (the alignment's slack) are unaddressable
// while the launch runs, so a kernel that reads or writes past its shared memory's end (or before its start) is
// reported there, as compute-sanitizer's memcheck would on the GPU.
class SharedMemoryBounds {
 public:
  SharedMemoryBounds(std::vector<unsigned char>& memory, unsigned char* shared, std::size_t shared_bytes)
      : memory_(memory) {
#if defined(__SANITIZE_ADDRESS__)
    __asan_poison_memory_region(memory.data(), static_cast<std::size_t>(shared - memory.data()));
    __asan_poison_memory_region(shared + shared_bytes,
                                memory.size() - static_cast<std::size_t>(shared - memory.data()) - shared_bytes);
#else
    (void)shared;
    (void)shared_bytes;
#endif
  }
  ~SharedMemoryBounds() {
#if defined(__SANITIZE_ADDRESS__)
    __asan_unpoison_memory_region(memory_.data(), memory_.size());
#endif
  }
  SharedMemoryBounds(const SharedMemoryBounds&) = delete;
  SharedMemoryBounds& operator=(const SharedMemoryBounds&) = delete;

 private:
  std::vector<unsigned char>& memory_;
};

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
  Barrier all("__syncthreads", threads);
  std::vector<std::unique_ptr<Barrier>> warp_barriers;
  for (unsigned w = 0; w * 32 < threads; ++w) {
    warp_barriers.push_back(std::make_unique<Barrier>("__syncwarp", threads - w * 32 < 32 ? threads - w * 32 : 32));
    run.warp[w] = warp_barriers.back().get();
  }
  run.all = &all;
  std::vector<unsigned char> memory(shared_bytes + 128);
  run.shared = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(memory.data()) + 127) / 128 * 128);
  const SharedMemoryBounds bounds(memory, run.shared, shared_bytes);
  const auto fresh_shared_memory = [&run, shared_bytes] { std::memset(run.shared, 0xff, shared_bytes); };
  fresh_shared_memory();
  Barrier block_done("the block's end", threads, fresh_shared_memory);
  current = &run;

  Launch l;
  l.each_thread = [&] {
    Fiber& self = running_fiber();
    for (unsigned long long b = 0; b < blocks; ++b) {
      self.block_index = block_of(b);
      self.block_number.store(b, std::memory_order_relaxed);
      kernel(args...);
      block_done.arrive_and_wait();
    }
  };
  start_fibers(l, block);
  run_fibers(l);
  launching = nullptr;
  running.store(nullptr, std::memory_order_relaxed);
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
// The GPU's global timer (PTX %globaltimer, nanoseconds): the host's steady clock. A sleep lets the other fibers of
// nothing run (a fiber runs until it waits at a barrier), so it only passes time, as on the GPU.
namespace cuda_on_cpu {
inline unsigned long long global_timer_ns() {
  return static_cast<unsigned long long>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}
}  // namespace cuda_on_cpu
inline void __nanosleep(unsigned nanoseconds) { std::this_thread::sleep_for(std::chrono::nanoseconds(nanoseconds)); }
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
// Global memory shared between blocks: atomics, the device-wide fence and the loads and stores that bypass an SM's
// L1 (cache-global), which kernels use to pass work or a turn from block to block. Here one memory holds it all,
// and blocks run one after another, so a block only ever waits for one that has run already: a kernel whose block
// waits for a later one never ends here, and may never end on a GPU either.
inline unsigned atomicAdd(unsigned* address, unsigned value) {
  return std::atomic_ref<unsigned>(*address).fetch_add(value);
}
inline unsigned atomicExch(unsigned* address, unsigned value) {
  return std::atomic_ref<unsigned>(*address).exchange(value);
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline float __ldcg(const float* address) { return *address; }
inline void __stcg(float* address, float value) { *address = value; }
