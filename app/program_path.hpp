// program_path.hpp — how the commands fsdplab prints for its user to run (a grade's "see it", the dashboard's
// hints where there is no display) call this fsdplab, so that they run as pasted.
#pragma once
#include <string>

namespace fsdplab::app {

// This fsdplab's path from the root of the source tree it was built from, where the README and the labs run it
// ("build/app/fsdplab"), or its absolute path when it lies outside that tree; quoted where a shell would split it.
std::string program_from_source_root();

}  // namespace fsdplab::app
