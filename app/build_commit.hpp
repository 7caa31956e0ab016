// build_commit.hpp — the commit this fsdplab was built from, which the writeup's header (`fsdplab report`) and
// the gradebook (`fsdplab grade --json`) name: "<sha>", "<sha>-dirty" when tracked files differed from it, or
// "unknown" without git. Written at every build by app/git_commit.cmake, so a rebuild after a pull names the new one.
#pragma once
#include <string>

namespace fsdplab::app {

std::string build_commit();

}  // namespace fsdplab::app
