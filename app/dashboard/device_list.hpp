// device_list.hpp — the devices a run can use, one line each: the sim device always, and the CUDA GPUs
// this process sees (or why none), as `fsdplab devices` prints them and the dashboard's Run panel lists them.
#pragma once
#include <string>
#include <vector>

namespace fsdplab::app {

// Probes the GPUs (without a CUDA context, and without the driver library linked): call once, not per frame.
std::vector<std::string> available_devices();

}  // namespace fsdplab::app
