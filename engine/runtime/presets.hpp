// presets.hpp — device and link presets for the cost model, read from one data file.
//
// The built-in catalogue is engine/runtime/presets.jsonc, compiled into the binary so that it is
// always there; `PresetCatalog::parse` reads another file of the same shape. Every field is required
// and checked: a typo in a preset file is an error naming the preset and the field.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/runtime/dtype.hpp"

namespace fsdplab {

struct DevicePreset {
  std::string name;
  std::string description;
  double matmul_flops_bf16 = 0;  // FLOP/s of GEMMs in bf16 with f32 accumulation (tensor cores)
  double matmul_flops_f32 = 0;   // FLOP/s of GEMMs in f32
  double vector_flops = 0;       // FLOP/s of everything that is not a GEMM
  double memory_bandwidth = 0;   // bytes/s between the device and its memory
  double memory_bytes = 0;       // capacity
  double host_bandwidth = 0;     // bytes/s between host and device (offload copies)
  double launch_overhead_us = 0; // host time to launch one op
  double min_kernel_us = 0;      // the shortest an op can take on the device
  std::string default_link;

  double matmul_flops(DType t) const { return t == DType::bf16 ? matmul_flops_bf16 : matmul_flops_f32; }
};

struct LinkPreset {
  std::string name;
  std::string description;
  double bandwidth = 0;   // bytes/s each direction per rank (the bus bandwidth a ring reaches)
  double latency_us = 0;  // per ring step
};

class PresetCatalog {
 public:
  // The catalogue compiled from engine/runtime/presets.jsonc.
  static const PresetCatalog& builtin();
  // Parses a catalogue (JSON with // comments); `origin` names it in error messages.
  static PresetCatalog parse(std::string_view text, std::string_view origin);
  static PresetCatalog load_file(const std::string& path);
  // A file's catalogue, or the built-in one when `path` is empty (the --presets flag's meaning).
  static PresetCatalog builtin_or_file(const std::string& path);

  // An unknown name is an Error naming the option that gave it: --device-preset, `option` for a link.
  const DevicePreset& device(std::string_view name) const;
  const LinkPreset& link(std::string_view name, std::string_view option = "--link-preset") const;
  // The link called `name`, or `device`'s default link when `name` is empty.
  const LinkPreset& link_for(const DevicePreset& device, std::string_view name) const;
  std::vector<std::string> device_names() const;
  std::vector<std::string> link_names() const;

 private:
  std::map<std::string, DevicePreset, std::less<>> devices_;
  std::map<std::string, LinkPreset, std::less<>> links_;
};

}  // namespace fsdplab
