#include "engine/cuda/copies.hpp"

#include "engine/cuda/cuda_check.hpp"

namespace fsdplab::cuda {

namespace {

// The driver is handed only memory CUDA allocated: a copy engine given any other address may fault inside
// the driver (a SIGSEGV in cuMemcpyAsync, not an error code), and pageable host memory would make the
// "async" copy synchronous. So each end is looked up first: device, managed or pinned host memory passes.
void check_cuda_memory(const void* pointer, const char* end, std::int64_t bytes) {
  cudaPointerAttributes attributes{};
  check_cuda(cudaPointerGetAttributes(&attributes, pointer), "looking up the ", end, " of a copy of ", bytes, " bytes");
  if (attributes.type == cudaMemoryTypeUnregistered)
    fail("copying ", bytes, " bytes: the ", end, " ", pointer, " is not memory CUDA allocated (expected device, "
         "managed or pinned host memory; got an address no CUDA allocation holds)");
}

}  // namespace

void copy_bytes(CUstream_st* stream, void* dst, const void* src, std::int64_t bytes) {
  if (bytes < 0) fail("copying ", bytes, " bytes: expected a count of at least 0");
  if (bytes == 0 || dst == src) return;
  check_cuda_memory(src, "source", bytes);
  check_cuda_memory(dst, "destination", bytes);
  check_cuda(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(bytes), cudaMemcpyDefault, stream), "copying ",
             bytes, " bytes");
}

}  // namespace fsdplab::cuda
