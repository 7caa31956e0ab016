// memory_ledger.hpp — live and peak bytes per tag on one rank, as a time series on its device clock.
//
// The ledger is fed by the device's allocator at each allocation and free, in the order the host
// calls them (as a caching allocator sees them: memory is taken from the allocation call until the
// free call). Times are the device clock's host cursor at the call. The peak of the total is kept
// together with the per-tag breakdown at that moment, which is what a memory table needs: the sum of
// per-tag peaks over-counts, since tags peak at different times.
#pragma once
#include <array>
#include <cstdint>
#include <numeric>
#include <vector>

#include "engine/runtime/mem_tag.hpp"
#include "engine/runtime/sim_time.hpp"

namespace fsdplab {

using TagBytes = std::array<std::int64_t, kMemTagCount>;

// The bytes of every tag together.
inline std::int64_t tag_total(const TagBytes& bytes) {
  return std::accumulate(bytes.begin(), bytes.end(), std::int64_t{0});
}

struct LedgerSample {
  SimTime time;
  MemTag tag;
  std::int64_t delta;       // +bytes on allocation, -bytes on free
  std::int64_t tag_live;    // live bytes of `tag` after the change
  std::int64_t total_live;  // live bytes of all tags after the change
};

class MemoryLedger {
 public:
  void on_alloc(MemTag tag, std::int64_t bytes, SimTime time);
  void on_free(MemTag tag, std::int64_t bytes, SimTime time);

  std::int64_t live(MemTag tag) const { return live_[index(tag)]; }
  std::int64_t peak(MemTag tag) const { return peak_[index(tag)]; }
  std::int64_t live_total() const { return live_total_; }
  std::int64_t peak_total() const { return peak_total_; }
  const TagBytes& peak_by_tag() const { return peak_; }
  // Per-tag live bytes at the moment the total peaked.
  const TagBytes& breakdown_at_peak() const { return at_peak_; }
  SimTime peak_time() const { return peak_time_; }

  const std::vector<LedgerSample>& series() const { return series_; }
  // Starts a new peak window (e.g. per step) keeping live bytes; the series is kept.
  void reset_peaks();

 private:
  static std::size_t index(MemTag t) { return static_cast<std::size_t>(t); }
  void apply(MemTag tag, std::int64_t delta, SimTime time);

  TagBytes live_{};
  TagBytes peak_{};
  TagBytes at_peak_{};
  std::int64_t live_total_ = 0;
  std::int64_t peak_total_ = 0;
  SimTime peak_time_ = 0;
  std::vector<LedgerSample> series_;
};

}  // namespace fsdplab
