#include "engine/runtime/memory_ledger.hpp"

#include "engine/runtime/error.hpp"

namespace fsdplab {

void MemoryLedger::on_alloc(MemTag tag, std::int64_t bytes, SimTime time) {
  check(bytes >= 0, "memory ledger: allocation of ", bytes, " bytes; expected a size >= 0");
  apply(tag, bytes, time);
}

void MemoryLedger::on_free(MemTag tag, std::int64_t bytes, SimTime time) {
  check(bytes >= 0 && bytes <= live_[index(tag)], "memory ledger: free of ", bytes, " bytes tagged ",
        mem_tag_name(tag), " but only ", live_[index(tag)], " bytes of that tag are live");
  apply(tag, -bytes, time);
}

void MemoryLedger::apply(MemTag tag, std::int64_t delta, SimTime time) {
  const std::size_t i = index(tag);
  live_[i] += delta;
  live_total_ += delta;
  if (live_[i] > peak_[i]) peak_[i] = live_[i];
  if (live_total_ > peak_total_) {
    peak_total_ = live_total_;
    at_peak_ = live_;
    peak_time_ = time;
  }
  series_.push_back({time, tag, delta, live_[i], live_total_});
}

void MemoryLedger::reset_peaks() {
  peak_ = live_;
  at_peak_ = live_;
  peak_total_ = live_total_;
}

}  // namespace fsdplab
