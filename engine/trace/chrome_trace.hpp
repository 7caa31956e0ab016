// chrome_trace.hpp — the trace as a Chrome trace JSON file, and back.
//
// One format serves three readers: Perfetto (ui.perfetto.dev) draws it, Holistic Trace Analysis
// (HTA) computes its breakdowns from it, and `fsdplab view` replays it. Layout:
//   pid = rank, named "rank N"; tid = the lane: 1 for the host, 7..10 for the compute, all_gather,
//   reduce_scatter and memcpy streams, named "host" and "stream 7 compute" etc.;
//   complete events ("X", ts and dur in microseconds) in Kineto's categories (kernel, gpu_memcpy,
//   cpu_op) with args.stream, args.device and our own args (category, step, unit, phase, bytes,
//   flops, op, deps); memory counters ("C") per rank: "mem <tag>" per tag and "mem total", in bytes;
//   top-level distributedInfo {backend, rank, world_size}, deviceProperties, displayTimeUnit, and
//   fsdplabMode ("sync" or "async") where the whole run used one, so a replay can compare them.
// A file written for one rank (`only_rank`) is what HTA reads: one file per rank, each with its own
// distributedInfo.rank. The file with all ranks is for Perfetto and the dashboard.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "engine/trace/trace_recorder.hpp"

namespace fsdplab {

struct TraceMeta {
  std::string backend = "sim";          // distributedInfo.backend: the device ("sim", "cuda"), or "nccl" on GPUs
  int world_size = 1;
  std::string device_name;              // deviceProperties[].name; none are written when empty
  std::int64_t device_memory_bytes = 0; // deviceProperties[].totalGlobalMem
  std::vector<int> devices;             // device index of each rank; empty: rank r is device r
  std::string mode;                     // fsdplabMode: "sync" or "async" for a run in one mode; empty otherwise

  int device_of(int rank) const { return devices.empty() ? rank : devices.at(static_cast<std::size_t>(rank)); }
};

// Writes `data` (all ranks, or only `only_rank`'s events and samples) to `path`, atomically: to
// `path + ".tmp"`, then renamed, so an interrupted write never leaves half a file (a symbolic link is
// followed, a device or a FIFO written in place: output_file.hpp). Events and samples
// keep their order. An Error naming the path if it cannot be written or the data is inconsistent
// (a rank outside the world, an event that ends before it begins).
void write_chrome_trace(const std::filesystem::path& path, const TraceData& data, const TraceMeta& meta,
                        std::optional<int> only_rank = std::nullopt);

// The file of rank `rank` in a folder of per-rank traces (`fsdplab run --trace-dir DIR`): DIR/rank3.json.
std::filesystem::path rank_trace_file(const std::filesystem::path& dir, int rank);

// What read_chrome_trace reads at most: a million events (the dashboard's goal, `fsdplab bench --what
// ui`) take ~300 MB; the JSON document parsed from a file needs several times its size again.
constexpr std::uint64_t kMaxTraceFileBytes = std::uint64_t{1} << 30;

// Reads a file written by write_chrome_trace: events and samples in file order, and, when `meta` is
// given, the run's description. Anything else (not JSON, truncated, a field missing or of the wrong
// type, a world larger than `fsdplab run --world` takes) is an Error naming the file, the event and
// what was expected; so is a path that is not a regular file (a directory, a FIFO, a device such as
// /dev/zero: refused by its kind without reading from it) or a file over kMaxTraceFileBytes.
TraceData read_chrome_trace(const std::filesystem::path& path, TraceMeta* meta = nullptr);

}  // namespace fsdplab
