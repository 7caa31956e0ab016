#include "engine/cuda/copies.hpp"

#include "engine/cuda/cuda_check.hpp"

namespace fsdplab::cuda {

void copy_bytes(CUstream_st* stream, void* dst, const void* src, std::int64_t bytes) {
  if (bytes == 0 || dst == src) return;
  check_cuda(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(bytes), cudaMemcpyDefault, stream), "copying ",
             bytes, " bytes");
}

}  // namespace fsdplab::cuda
