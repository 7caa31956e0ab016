#include "engine/cuda/comm_kernels.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device_floats.cuh"

namespace fsdplab::cuda {
namespace {

struct PeerInputs {
  const void* ptr[kMaxReducePeers];
};

template <class T>
__global__ void reduce_peers_kernel(T* out, PeerInputs inputs, int count, std::int64_t n, int divisor) {
  for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0.f;
    for (int i = 0; i < count; ++i) sum += to_f32(static_cast<const T*>(inputs.ptr[i])[k]);
    if (divisor != 1) sum /= static_cast<float>(divisor);
    out[k] = from_f32<T>(sum);
  }
}

__device__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(unsigned long long nanoseconds) {
  const unsigned long long start = global_timer_ns();
  // A short sleep between reads leaves the SM's issue slots to the kernels the spin overlaps.
  while (global_timer_ns() - start < nanoseconds) __nanosleep(200);
}

__global__ void start_link_clock_kernel(unsigned long long* clock) { *clock = global_timer_ns(); }

__global__ void hold_link_kernel(const unsigned long long* clock, unsigned long long nanoseconds) {
  // Until a time, not for a span from here: the collective's copies before this kernel spent part of the link's
  // time already. As in spin_kernel, the sleep between reads leaves the SM's issue slots to other kernels.
  const unsigned long long until = *clock + nanoseconds;
  while (global_timer_ns() < until) __nanosleep(200);
}

int grid_for(std::int64_t n, int threads) {
  // Enough blocks to fill an H100 several times over; the grid-stride loop covers the rest.
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<int>(blocks < 4096 ? blocks : 4096);
}

}  // namespace

void reduce_peers(CUstream_st* stream, DType dtype, void* out, const void* const* inputs, int count, std::int64_t n,
                  int divisor) {
  check(count >= 1 && count <= kMaxReducePeers, "reduce over ", count, " ranks on one GPU; expected 1 to ",
        kMaxReducePeers);
  check(divisor >= 1, "reduce over ranks: divided by ", divisor, "; expected a group size >= 1");
  if (n == 0) return;
  PeerInputs peers{};
  for (int i = 0; i < count; ++i) peers.ptr[i] = inputs[i];
  constexpr int threads = 256;
  if (dtype == DType::f32) {
    reduce_peers_kernel<<<grid_for(n, threads), threads, 0, stream>>>(static_cast<float*>(out), peers, count, n,
                                                                      divisor);
  } else if (dtype == DType::bf16) {
    reduce_peers_kernel<<<grid_for(n, threads), threads, 0, stream>>>(static_cast<bf16*>(out), peers, count,
                                                                      n, divisor);
  } else {
    fail("reduce over ranks: ", dtype_name(dtype), " cannot be reduced; expected f32 or bf16");
  }
  check_launch("reduce_peers");
}

void spin(CUstream_st* stream, std::int64_t nanoseconds) {
  if (nanoseconds <= 0) return;
  spin_kernel<<<1, 1, 0, stream>>>(static_cast<unsigned long long>(nanoseconds));
  check_launch("spin");
}

void start_link_clock(CUstream_st* stream, unsigned long long* clock) {
  start_link_clock_kernel<<<1, 1, 0, stream>>>(clock);
  check_launch("start_link_clock (emulated link)");
}

void hold_link(CUstream_st* stream, const unsigned long long* clock, std::int64_t nanoseconds) {
  if (nanoseconds <= 0) return;
  hold_link_kernel<<<1, 1, 0, stream>>>(clock, static_cast<unsigned long long>(nanoseconds));
  check_launch("hold_link (emulated link)");
}

}  // namespace fsdplab::cuda
