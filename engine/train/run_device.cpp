#include "engine/train/run_device.hpp"

#include "engine/runtime/error.hpp"

namespace fsdplab {

DeviceSpec run_device_spec(const RunConfig& run, const PresetCatalog& presets, bool dry_run) {
  DeviceSpec spec;
  spec.kind = resolve_device(run.device, dry_run);
  spec.preset = presets.device(run.device_preset);
  spec.link = presets.link_for(spec.preset, run.link_preset);
  spec.dry_run = dry_run;
  spec.gpu = run.gpu;
  spec.emulate_link = run.emulate_link;
  if (spec.kind == DeviceKind::sim) {
    check(!run.emulate_link, "--emulate-link holds a real GPU's collective streams for the link's time; the sim "
          "device always runs its link on the virtual clock (--link-preset picks it); use --device cuda");
    check(run.gpu == 0, "--gpu ", run.gpu, " picks a GPU for the cuda device; this run is on the sim device");
  }
  return spec;
}

}  // namespace fsdplab
