// bench_memory.hpp — `fsdplab bench --what memory`: the writeup's memory table (section 4.1), per-rank
// peak memory of the baseline and of FSDP at W = 2, 4, 8 with the per-rank micro-batch fixed, each tag's
// peak as the memory ledger measured it beside the analytic model (engine/fsdp/memory_model.hpp). The
// measurement is its own function so that `fsdplab report` prints the very numbers the bench prints.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "app/byte_unit.hpp"
#include "app/fsdp_cli_options.hpp"
#include "engine/runtime/memory_ledger.hpp"

namespace fsdplab::app {

struct MemoryBenchOptions {
  std::string preset = "gpt2";
  std::int64_t micro_batch = 4;  // rows per rank; the global batch is W times this
  std::int64_t seq = 1024;
};

// One configuration's memory: per tag, the largest peak over its ranks and the formula's.
struct MemoryRow {
  std::string label;
  int world = 1;
  std::int64_t parameters = 0;
  TagBytes measured{};
  std::int64_t peak_total = 0;  // the total's peak: one moment, unlike the sum of the tags' peaks
  TagBytes formula{};
};

// The bench's table: the baseline row first, then FSDP at each W asked for.
struct MemoryTable {
  FsdpOptions fsdp;  // the FSDP rows' strategy and precision (the baseline: no_shard in the same precision)
  std::vector<MemoryRow> rows;

  // The baseline's total is the table's largest figure.
  ByteUnit unit() const { return ByteUnit::for_largest(rows.front().peak_total); }
};

std::int64_t tag_bytes(const TagBytes& bytes, MemTag tag);
// What a tag holds, as the writeup's memory breakdown names it: this bench's and `fsdplab report`'s (4.1) tables.
std::string_view breakdown_label(MemTag tag);
// param_shard + grad_shard + optim_state: what FSDP shards.
std::int64_t sharded_state(const TagBytes& bytes);

// Dry runs of one SYNC step: the baseline (W = 1, no_shard) and FSDP at each of `worlds` with
// `choice.options`' strategy, hybrid group and precision.
MemoryTable measure_memory_table(const MemoryBenchOptions& bench, const FsdpChoice& choice,
                                 std::initializer_list<int> worlds = {2, 4, 8});

// Prints the bench's tables.
void bench_memory(const MemoryBenchOptions& bench, const FsdpChoice& choice);

}  // namespace fsdplab::app
