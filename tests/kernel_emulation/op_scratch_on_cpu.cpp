// cuda::op_scratch for kernels run on the CPU: plain host memory, alive until the process ends. Its bytes
// start as 0xff, which read as NaN in f32 and bf16, so a kernel that reads scratch it never wrote shows.
#include "engine/cuda/op_scratch.hpp"

#include <cstring>
#include <memory>
#include <vector>

namespace fsdplab {
namespace {
std::vector<std::unique_ptr<unsigned char[]>> scratch;
}  // namespace

void* cuda::op_scratch(std::int64_t bytes, const char*) {
  scratch.push_back(std::make_unique<unsigned char[]>(static_cast<std::size_t>(bytes)));
  std::memset(scratch.back().get(), 0xff, static_cast<std::size_t>(bytes));
  return scratch.back().get();
}

}  // namespace fsdplab
