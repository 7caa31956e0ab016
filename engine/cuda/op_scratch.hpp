// op_scratch.hpp — scratch memory for the kernels of the op being launched (cuBLAS's workspace, a
// reduction's partial sums), so that every byte on the GPU goes through the device's caching allocator:
// tagged `workspace` in the rank's ledger, reused from the op's stream pool, freed behind the op on its
// stream. Callable only inside a CUDA body, on the launching thread (CudaDevice::launch sets the op up).
#pragma once
#include <cstdint>

namespace fsdplab::cuda {

// `bytes` of device memory for the current op; `what` names it in errors.
void* op_scratch(std::int64_t bytes, const char* what);

}  // namespace fsdplab::cuda
