// memory_model.hpp — the analytic per-rank memory of an FSDP step, tag by tag: what the memory ledger
// must read, written down, so a run can be checked against it (tests/integration/test_fsdp_memory.cpp)
// and a student can see where every byte goes (`fsdplab bench --what memory`).
//
// It describes the code as it behaves: the reference tasks, without prefetch. Units u have a
// FlatParameter of P_u elements (padded to a multiple of S) and shards of Z_u = P_u / S elements,
// where S is the shard group (W; hybrid: the group; no_shard: 1). R = P of the root unit (GPT-2: wte,
// wpe, ln_f), 0 without one; Bmax = the largest other unit (a Block) — with nested units (--wrap
// nested), the largest chain of a unit and the units gathered inside it. p = param_dtype bytes, r =
// reduce_dtype bytes, k = optimizer states per element (adamw 2, sgd with momentum 1, sgd 0).
// The root stays gathered from its pre_forward to the end of backward; full and hybrid reshard each
// Block after its forward, so I = R + Bmax units are in flight; grad_op and the replicated strategies
// (no_shard, zero1, zero2) keep every unit gathered from its forward to its backward: I = ΣP. The
// two-buffer pool (--buffers pool) holds two buffers of the largest unit from the first gather on, for
// parameters and for gradients alike: I = R + 2·Bmax, and grad_full p·(R + 2·Bmax).
// Per rank, in bytes:
//
//   param_shard  4·ΣZ                 the f32 masters (no_shard: S = 1, the replica is the shard);
//                                     0 for zero1/zero2 at W > 1 (the replica is param_full, the
//                                     master a view of it)
//   param_full   p·I                  gathered copies; none for replicated strategies in f32, which
//                                     compute in the replica itself
//              + 4·ΣP                 zero1/zero2 at W > 1: the whole f32 replica
//   grad_shard   4·ΣZ                 0 for zero1 at W > 1 (the whole gradient is grad_full)
//   grad_full    p·(R + Bmax)         the root's gradient through the whole backward, one Block's at a
//                                     time; none for no_shard/zero1 in f32 (backward writes the replica);
//                                     p·ΣP under gradient accumulation, every unit's kept between micro-batches
//              + 4·ΣP                 zero1 at W > 1: the whole reduced gradient
//   optim_state  k·4·ΣZ
//                (param_shard, grad_shard and optim_state are 0 on the device under CPU offload: they
//                live in host memory, Device::host_ledger)
//   comm_buffer  max over u of        p·Z_u  bf16 staging of a sharded gather
//                (and the rows' temporaries, FsdpMemoryInput::embedding_rows)
//                                     4·P_u  bf16 gradients widened to f32 before a reduce-scatter
//                                     r·Z_u  a bf16 reduce-scatter's output before the f32 grad shard
//                                     (one at a time: each is freed before the next collective)
//                 + 4·Z_u under CPU offload: the shard's f32 device copy beside the gather's or
//                                     the reduction's staging
//   activation   the model's activation peak on one rank's micro-batch (engine/nn/activation_memory.hpp)
//   workspace    4, the trainer's loss mean over ranks (the models allocate no workspace)
//
// The single-rank baseline (train/trainer.hpp) holds whole f32 parameters and gradients tagged
// param_shard and grad_shard, k·4·Σnumel of optimizer state, the model's activations, and in bf16
// the compute copies of both (param_full, grad_full: baseline_memory).
// Tags peak at different moments (activations at the start of backward, gathered units in the middle
// of it), so the sum of these peaks bounds the peak of the total from above.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/fsdp/sharding.hpp"
#include "engine/nn/activation_memory.hpp"
#include "engine/nn/module.hpp"
#include "engine/runtime/memory_ledger.hpp"

namespace fsdplab {

// One FSDP unit as the memory model sees it.
struct UnitSize {
  std::int64_t padded_numel = 0;  // P_u
  std::int64_t shard_numel = 0;   // Z_u
  bool root = false;              // the root unit: gathered from its pre_forward to the end of backward
  // Units nested in others (not counting the root) are gathered while their enclosing unit is: chain =
  // P_u plus the largest chain among the units directly inside u; `nested` marks those inside one.
  std::int64_t chain_numel = 0;
  bool nested = false;
};

struct FsdpMemoryInput {
  std::vector<UnitSize> units;
  FsdpOptions options;
  int world = 1;
  int optimizer_states = 2;  // k
  ModelMemory model;
  // --embedding-grad rows: the bytes of the exchange's temporaries, held at once at the backward's end
  // (embedding_rows_staging); 0 otherwise.
  std::int64_t embedding_rows = 0;
  // Micro-batches a step (--accumulate): with more than one, every unit's full gradient is kept from one to the next.
  int micro_batches = 1;
  // The bytes of one micro-batch's inputs and targets on a rank (token ids: 8 a token).
  std::int64_t micro_batch_inputs = 0;
};

// --embedding-grad rows' temporaries on each rank ([Note: the embedding's gradient as rows], unit_lifecycle.cpp),
// for `tokens` ids a rank in a micro-batch of `dim`-wide rows and a position table of `position_numel` elements,
// in p-byte elements: the gathered ids 4·W·tokens and rows p·W·tokens·dim, and the position table's sums
// p·position (0 for a model without one, Llama). The token table's sums go straight into the shard
// (embedding_backward_slice).
std::int64_t embedding_rows_staging(int world, std::int64_t tokens, std::int64_t dim, std::int64_t position_numel,
                                    DType param_dtype);

// The units FSDP makes of `model` under `options` on `world` ranks: plan_units, then the reference
// FlatParameter layout over the shard group, with each unit's chain of nested units (UnitSize::chain_numel).
std::vector<UnitSize> plan_unit_sizes(Module& model, std::span<const std::string> unit_kinds,
                                      const FsdpOptions& options, int world);

// Expected per-rank peak bytes of each tag over an FSDP run's steps under the SYNC schedule (the formula above).
TagBytes fsdp_memory(const FsdpMemoryInput& input);
// An upper bound of each tag's per-rank peak under the run's own schedule, for the checks that refuse a run the
// memory cannot hold: the formula under SYNC. Under ASYNC the host issues a whole step, every micro-batch of
// gradient accumulation (m of them, --accumulate) included, before it waits for the device, so it sees no buffer's
// last use end before it allocates the next, and how much is held depends on how far the collectives run behind
// compute; the bound takes the worst the schedule allows, with R' = (m + 1 with the next step's prefetch, else m)·R
// (the root gathered once a micro-batch, once more by that prefetch, the old buffers perhaps still parked):
//   gathered     R' + min(M·Bunit (+ Bmax with nested units), 2m·(ΣP - R)) under the rate limiter (M =
//                --max-inflight); R' + 2m·(ΣP - R) without one (a unit's forward copy may still be parked when
//                its backward gathers it again, and both when the next micro-batch's forward does); R' + 2·Bunit
//                with the two-buffer pool; R' + m·(ΣP - R) where units stay gathered from forward to backward
//   unsharded    ΣP: each unit's gradient is parked until its reduction is done, and compute may be ahead
//   gradients    of every reduction; R + 2·Bunit with the pool
//   comm_buffer  every gather's and reduction's staging of the step at once, and the rows' temporaries
//   activation   the formula's, + one micro-batch's inputs under accumulation (the next arrives while the
//                last one's may still be held)
// where Bunit is the largest unit other than the root. Checked against dry runs in test_fsdp_memory.cpp.
TagBytes fsdp_memory_bound(const FsdpMemoryInput& input);
// Expected peak bytes of each tag of the single-rank baseline training `model` in `compute` (its
// model_memory counted in that dtype too). bf16 is mixed precision: the f32 masters, gradients and optimizer
// state of f32, plus a bf16 copy of every parameter (param_full) and gradient (grad_full) through a step
// (its flat buffers' alignment gaps, under 1% of a model, are not counted).
TagBytes baseline_memory(Module& model, int optimizer_states, const ModelMemory& model_memory, DType compute);

}  // namespace fsdplab
