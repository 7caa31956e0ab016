// replay.hpp — exported traces back in the dashboard (`fsdplab view a.json [b.json ...]`): each file is
// a source of the trace store, its steps derived from the events' step labels.
//
// A file that cannot be read (not a regular file, over the size limit, not JSON, truncated, a field
// missing or of the wrong type, a claim such as its world beyond what a run has) costs only itself: its error, naming
// the file and what was expected (chrome_trace.hpp), is kept for the window and the caller to show, and the other files
// are still replayed.
#pragma once
#include <string>
#include <vector>

#include "app/dashboard/trace_store.hpp"

namespace fsdplab::app {

struct Replay {
  TraceStore store;
  std::vector<std::string> files;   // the files that loaded, by source id
  std::vector<std::string> errors;  // one per file that did not
};

Replay load_replay(const std::vector<std::string>& paths);

}  // namespace fsdplab::app
