#include "app/dashboard/replay.hpp"

#include <algorithm>
#include <filesystem>
#include <new>
#include <system_error>

#include "engine/runtime/error.hpp"
#include "engine/trace/chrome_trace.hpp"

namespace fsdplab::app {

Replay load_replay(const std::vector<std::string>& paths) {
  Replay replay;
  for (const std::string& path : paths) {
    // --trace-dir's folder: its files are the traces (one per rank), which the shell lists.
    if (std::error_code ec; std::filesystem::is_directory(path, ec)) {
      replay.errors.push_back("'" + path + "' is a folder; expected trace files (its traces: fsdplab view " +
                              (std::filesystem::path(path) / "*.json").string() + ")");
      continue;
    }
    TraceMeta meta;
    TraceData data;
    try {
      data = read_chrome_trace(path, &meta);
    } catch (const Error& e) {
      replay.errors.push_back(e.what());
      continue;
    } catch (const std::bad_alloc&) {  // a file within the size limit whose JSON still does not fit
      replay.errors.push_back("cannot read trace '" + path + "': out of memory");
      continue;
    }
    const std::string label = std::filesystem::path(path).filename().string();
    const int source = replay.store.add_source(label, meta.world_size, meta.mode == "sync");
    replay.store.set_wall_clock(source, meta.backend != "sim");  // "cuda", or "nccl" on GPUs
    replay.store.set_device(source, meta.device_name, meta.device_memory_bytes);
    try {
      replay.store.add_trace(source, data);
    } catch (const Error& e) {  // consistent JSON that still makes no trace (an event ending before it begins)
      replay.errors.push_back(path + ": " + e.what());
    } catch (const std::bad_alloc&) {
      replay.errors.push_back(path + ": out of memory storing its events");
    }
    replay.store.derive_steps(source);
    // A trace is written when its run ends: its last step is the run's.
    int last = -1;
    for (const StepTime& s : replay.store.source(source).steps) last = std::max(last, s.step);
    replay.store.set_last_step(source, last);
    replay.files.push_back(path);
  }
  return replay;
}

}  // namespace fsdplab::app
