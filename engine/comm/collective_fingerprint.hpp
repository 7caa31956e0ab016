// collective_fingerprint.hpp — what a rank says it is calling, so a group can check that every rank
// called the same collective before any data moves.
//
// Every communicator that can check (LocalComm between threads, MpiComm between processes) compares
// these and names both differing calls in the same words: a mismatch is an error on every rank, never
// a hang or a silent mix of two collectives.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/comm/communicator.hpp"

namespace fsdplab {

enum class CollectiveKind : std::int32_t { all_gather, reduce_scatter, all_reduce, broadcast, barrier, split };

struct CollectiveFingerprint {
  CollectiveKind kind = CollectiveKind::barrier;
  ReduceOp op = ReduceOp::sum;
  DType dtype = DType::f32;
  std::int64_t count = 0;  // elements of the full buffer
  int root = -1;           // group rank, broadcast only
  bool dry = false;        // a dry run's (no data moves)

  bool same_call(const CollectiveFingerprint& o) const {
    return kind == o.kind && op == o.op && dtype == o.dtype && count == o.count && root == o.root && dry == o.dry;
  }
};

// "all_gather #3 of 4096 bf16 elements", "reduce_scatter(avg) #2 of 64 f32 elements", "barrier #5";
// `members` (world ranks in group-rank order) names a broadcast's root as a world rank.
std::string describe(const CollectiveFingerprint& call, std::uint64_t seq, const std::vector<int>& members);

// "[0, 2, 4]".
std::string group_str(const std::vector<int>& members);

// The error every rank of a group throws when rank members[i] called `theirs` and members[0] `first`.
std::string mismatch_message(const std::vector<int>& members, std::size_t i, const CollectiveFingerprint& theirs,
                             const CollectiveFingerprint& first, std::uint64_t seq);

}  // namespace fsdplab
