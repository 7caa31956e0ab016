// median.hpp — the median of a benchmark's samples, as every `fsdplab bench` table reports a time: robust to the
// odd frame or step that a page fault or another process slows, where a mean is not.
#pragma once
#include <algorithm>
#include <vector>

namespace fsdplab::app {

// The middle sample, or the mean of the two middle ones for an even count; `samples` is not empty.
inline double median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  return n % 2 == 1 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}

}  // namespace fsdplab::app
