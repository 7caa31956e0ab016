// comm_kernels.hpp — the kernels LocalComm needs when its ranks share a GPU: a reduction over the peers'
// buffers, and a spin that holds a stream for an emulated link's time (NcclComm uses the reduction too, to
// divide a bf16 sum). Plain C++; defined in comm_kernels.cu where the CUDA backend is built.
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

// Holds `stream` for `nanoseconds` of GPU time (one thread reading the global timer): what an emulated
// link's latency and bandwidth cost a collective.
void spin(CUstream_st* stream, std::int64_t nanoseconds);

}  // namespace fsdplab::cuda
