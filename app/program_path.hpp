// program_path.hpp — how the commands fsdplab prints for its user to run (a grade's "see it", the dashboard's
// hints where there is no display) call this fsdplab, so that they run as pasted: a gradebook's from the source
// tree's root, where its reader runs them; a hint from where it was printed.
#pragma once
#include <string>

namespace fsdplab::app {

// This fsdplab's path from the root of the source tree it was built from, where the README and the labs run it
// ("build/app/fsdplab"), or its absolute path when it lies outside that tree; quoted where a shell would split it.
std::string program_from_source_root();

// This fsdplab's path from the current folder where it lies below it ("build/app/fsdplab" at the source tree's root),
// else its absolute path; quoted where a shell would split it.
std::string program_from_here();

}  // namespace fsdplab::app
