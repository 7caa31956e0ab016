#include "app/build_commit.hpp"

#include "build_commit_generated.hpp"  // FSDPLAB_GIT_COMMIT, generated at build time by app/git_commit.cmake

namespace fsdplab::app {

std::string build_commit() { return FSDPLAB_GIT_COMMIT; }

}  // namespace fsdplab::app
