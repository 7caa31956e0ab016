// device_factory.hpp — the one place a rank's Device is made, sim or cuda, from what a run asked for.
//
// `--device auto|sim|cuda`: auto is cuda where this build has the CUDA backend and the machine a usable
// GPU, sim otherwise; a dry run (shapes only) is always sim. Asking for cuda where there is none is an
// Error that says why (built without nvcc, no driver, no GPU).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "engine/runtime/device.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/runtime/race_detector.hpp"
#include "engine/runtime/sm_share.hpp"

namespace fsdplab {

struct DeviceSpec {
  DeviceKind kind = DeviceKind::sim;
  // sim: the device and link it simulates. cuda: the figures its cost model gives (the emulated link's
  // time, the dashboard's expectations); the GPU's own capacity and speed are what they are.
  DevicePreset preset;
  LinkPreset link;
  NodeLayout nodes;                                             // sim only: where the ranks sit
  bool dry_run = false;                                         // sim only
  RaceDetector::Policy races = RaceDetector::Policy::throw_error;  // sim only
  // cuda: ranks sharing one GPU (LocalComm) hold their collective stream for the link's time, so a
  // PCIe workstation's overlap shows on one GPU.
  bool emulate_link = false;
  int gpu = 0;  // cuda: the GPU's index
  // cuda, ranks sharing the GPU: each rank's streams run on its own share of the SMs where `sm_split`
  // (engine/cuda/sm_partition.hpp); the run sets `sm` to its own share (of the runs on the GPU at once) and
  // `sm.required`, and each rank's seat takes its part of that share (SmShare::part).
  bool sm_split = true;
  SmShare sm;
  // cuda: the trace sinks get CUPTI's kernels, copies and host waits (engine/cuda/cupti_tracer.hpp); false,
  // or where CUPTI cannot trace: each op's CUDA-event span.
  bool cupti = true;
};

// Why the cuda device cannot run in this process, or nullopt when it can.
std::optional<std::string> cuda_unavailable();

// How many GPUs this process can use (0 without the CUDA backend or a driver).
int usable_gpu_count();

// "auto", "sim" or "cuda" (anything else is an Error listing them) resolved on this machine.
DeviceKind resolve_device(std::string_view choice, bool dry_run);
std::string_view device_kind_name(DeviceKind kind);

std::unique_ptr<Device> make_device(int rank, const DeviceSpec& spec);

}  // namespace fsdplab
