// comm_kernels.hpp — the kernels LocalComm needs when its ranks share a GPU: a reduction over the peers'
// buffers, and the emulated link's clock, which holds a collective's stream until the link's time has passed
// since the collective began, so that its copies run inside that time as a link's bytes move within it (NcclComm
// uses the reduction too, to divide a bf16 sum). Plain C++; defined in comm_kernels.cu where the CUDA backend is
// built.
#pragma once
#include <cstdint>

#include "engine/runtime/dtype.hpp"

struct CUstream_st;

namespace fsdplab::cuda {

// The most peers one reduction reads: their pointers travel in the kernel's parameters.
constexpr int kMaxReducePeers = 64;

// out[k] = (sum over i of inputs[i][k]) / divisor, for k < n (divisor 1: the sum; count: the average).
// Accumulates in f32 in the order of `inputs` (group-rank order) and rounds once to `dtype`: bit-identical to
// the sim device's LocalComm, on every rank. `out` may be one of the inputs (each element is read before it is
// written).
void reduce_peers(CUstream_st* stream, DType dtype, void* out, const void* const* inputs, int count, std::int64_t n,
                  int divisor);

// Holds `stream` for `nanoseconds` of GPU time (one thread reading the global timer): a kernel of a known
// length, for the tests and the CUPTI tracer's probe.
void spin(CUstream_st* stream, std::int64_t nanoseconds);

// The emulated link, in two halves around a collective's own work: `start_link_clock` writes the GPU's global
// timer into `*clock` (device memory) where the collective begins; `hold_link`, after its copies, holds `stream`
// until that time + `nanoseconds`, and ends at once where the copies took longer. So the collective takes the
// longer of the link's time and its copies', as a real link's bytes move within its time, where a hold before the
// copies would add the two. Nothing is launched for `nanoseconds` <= 0. The caller must not let two collectives
// that share `clock` overlap (the cuda device gives each rank one word; its collectives take the link one at a
// time).
void start_link_clock(CUstream_st* stream, unsigned long long* clock);
void hold_link(CUstream_st* stream, const unsigned long long* clock, std::int64_t nanoseconds);

}  // namespace fsdplab::cuda
