// exposed_communication.hpp — prints where a rank's communication went unhidden, collective by collective
// (exposed_communication in engine/trace/trace_metrics.hpp): under the tables of `bench --what overlap` (one
// dry-run step) and `bench --what train` (the mean of its measured steps, on cuda from the CUDA events' op spans),
// so that what keeps eta below 1 is one command away.
#pragma once
#include <string>

#include "engine/trace/trace_metrics.hpp"

namespace fsdplab::app {

// "<heading>, X ms in all; the largest parts (time from the step's start):" and a line for each part.
void print_exposed_communication(const ExposedCommunication& exposed, const std::string& heading);

}  // namespace fsdplab::app
