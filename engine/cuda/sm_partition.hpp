// sm_partition.hpp — a rank's own share of a GPU's streaming multiprocessors, for ranks sharing one GPU.
//
// Two ranks on one GPU emulate a two-GPU workstation. Sharing every SM, they are not two GPUs: a kernel of
// rank 1 waits while rank 0's LM-head GEMM holds every SM, and that wait serialises the ranks in a way no
// pair of real GPUs does. Split, each rank's streams run on a disjoint set of SMs (a CUDA green context),
// like a GPU of its own with 1/N of the SMs; memory, copy engines and the L2 are still shared.
// See [Note: ranks sharing a GPU] in sm_partition.cpp.
#pragma once
#include <cuda_runtime.h>

#include <memory>

namespace fsdplab::cuda {

class SmPartition {
 public:
  // The `index`-th of `shares` disjoint, equal shares of GPU `gpu`'s SMs (the GPU current on this thread,
  // its primary context initialised). An Error names what the driver refused, or that the GPU has too few
  // SMs for `shares` shares.
  SmPartition(int gpu, int index, int shares, int rank);
  ~SmPartition();
  SmPartition(const SmPartition&) = delete;
  SmPartition& operator=(const SmPartition&) = delete;

  // A non-blocking stream whose kernels run on this share's SMs only (priority as cudaStreamCreateWithPriority).
  cudaStream_t create_stream(int priority) const;
  int sm_count() const { return sm_count_; }

 private:
  struct Context;
  std::unique_ptr<Context> context_;
  int sm_count_ = 0;
  int rank_ = 0;
};

}  // namespace fsdplab::cuda
