// run_device.hpp — what device each rank of a run gets: --device, --comm, --gpu and --emulate-link
// checked against each other and against this machine, before any rank starts.
#pragma once
#include <string_view>

#include "engine/runtime/device_factory.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/train/run_config.hpp"

namespace fsdplab {

// The device spec every rank of `run` is made from (make_device(rank, spec)); an Error naming the flag
// for a request this machine or this build cannot serve.
DeviceSpec run_device_spec(const RunConfig& run, const PresetCatalog& presets, bool dry_run);

// --ranks-per-node against a world of `world` ranks: whole nodes, or an Error naming both. (The world is known
// only once the communicator is, so this is apart from run_device_spec.)
void check_whole_nodes(const NodePlacement& nodes, int world);
// --link-preset (empty: not given) against a world of `world` ranks: a single rank has no link to time, so one
// given there is refused, not ignored.
void check_link_used(const std::string& link_preset, int world);

// `--sm-split auto|on|off` into run.sm_split and run.sm_split_required (anything else: an Error naming the
// three). auto, the command line's default: split where the driver can; on: split or fail; off: share.
void set_sm_split(RunConfig& run, std::string_view choice);

// The cuda device's own options (--cupti, --sm-split), set off their command-line defaults on a run of the sim
// device: an Error naming the option, as --gpu and --emulate-link are refused (run_device_spec), never ignored. For
// the commands a user runs (run, gui); a bench or report that turns CUPTI off for its own reasons does not call it.
void check_cuda_options_unused(const RunConfig& run, DeviceKind kind);

// How ranks sharing a GPU compute under `--sm-split choice`, for a run's header: the request, since the header
// comes before the devices are made; where auto falls back, the device's warning comes first.
std::string_view sm_split_description(std::string_view choice);

}  // namespace fsdplab
