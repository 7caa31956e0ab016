// op_scratch.hpp — what the kernels of the op being launched work with: scratch memory (cuBLAS's workspace, a
// reduction's partial sums), so that every byte on the GPU goes through the device's caching allocator:
// tagged `workspace` in the rank's ledger, reused from the op's stream pool, freed behind the op on its
// stream; and the number of SMs its stream runs on. Callable only inside a CUDA body, on the launching thread
// (CudaDevice::launch sets the op up).
#pragma once
#include <cstdint>

namespace fsdplab::cuda {

// `bytes` of device memory for the current op; `what` names it in errors.
void* op_scratch(std::int64_t bytes, const char* what);

// The SMs the current op's stream runs on: its rank's share of the GPU under an SM split (sm_partition.hpp), 0
// where it runs on every SM. cuBLAS picks its tiles and split-K for the SMs it is told of; told the whole GPU,
// it would plan waves for SMs that a share does not have.
int op_sm_count();

}  // namespace fsdplab::cuda
