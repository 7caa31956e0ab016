// copies.hpp — bytes moved by the copy engines on a stream: device to device, and between device memory
// and pinned host memory (CPU offload). Plain C++: op front-ends include it; it is defined only where the
// CUDA backend is built.
#pragma once
#include <cstdint>

struct CUstream_st;

namespace fsdplab::cuda {

// cudaMemcpyAsync with the direction taken from the pointers (unified addressing); returns at once.
void copy_bytes(CUstream_st* stream, void* dst, const void* src, std::int64_t bytes);

}  // namespace fsdplab::cuda
