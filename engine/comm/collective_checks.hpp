// collective_checks.hpp — what every communicator checks of a collective's operands before it joins
// its peers, so a wrong call is an Error on the rank that made it, named the same way whichever
// communicator (LocalComm, MpiComm, NcclComm) carries it.
#pragma once
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// `rank`: the caller's index in the group. A shard in the full buffer's storage must be exactly chunk `rank` of
// it (in place): any other overlap would have the collective overwrite what it has yet to read, which NCCL
// leaves undefined.
void check_all_gather(const Tensor& shard, const Tensor& full, int world, int rank, const Device& device);
void check_reduce_scatter(const Tensor& full, const Tensor& shard, int world, int rank, const Device& device);
void check_all_reduce(const Tensor& t, const Device& device);
void check_broadcast(const Tensor& t, int root, int world, const Device& device);

}  // namespace fsdplab
