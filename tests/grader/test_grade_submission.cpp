// `fsdplab grade --submission` (app/grade_submission.cpp) stages the submission's nine files in its build tree:
// a file whose content changed is staged newer than what the last build made from it, even when the new
// submission carries older times (cp -p, tar, unzip keep them), so ninja recompiles it; an unchanged file
// keeps its time and is not recompiled. (The build itself takes minutes and is not run here.)
#include <gtest/gtest.h>

#include <chrono>

#include "app/grade_submission.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

namespace fs = std::filesystem;

class GradeSubmission : public testing::TempDirTest {};

TEST_F(GradeSubmission, AChangedFileIsRecompiledEvenWhenItsTimeIsOlder) {
  const std::vector<fs::path> files = app::submission_files();
  for (const fs::path& file : files) {
    fs::create_directories(path("submission") / file.parent_path());
    spit(path("submission") / file, "// first submission: " + file.string() + "\n");
  }
  const fs::path labs = path("submission/labs");
  const fs::path staging = path("build/submission/labs");
  EXPECT_EQ(app::stage_submission(labs, staging), files);
  // The first build ran an hour ago and left objects as new as their staged sources.
  const fs::file_time_type built = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const fs::path& file : files) fs::last_write_time(staging / file.lexically_relative("labs"), built);

  const fs::path changed = files.at(2);
  spit(path("submission") / changed, "// second submission, unpacked with its old time\n");
  fs::last_write_time(path("submission") / changed, fs::file_time_type::clock::now() - std::chrono::days(2000));
  EXPECT_EQ(app::stage_submission(labs, staging), std::vector<fs::path>{changed});

  const fs::path staged = staging / changed.lexically_relative("labs");
  EXPECT_EQ(slurp(staged), "// second submission, unpacked with its old time\n");
  EXPECT_GT(fs::last_write_time(staged), built) << "ninja would keep the first submission's object";
  EXPECT_EQ(fs::last_write_time(staging / files.at(0).lexically_relative("labs")), built)
      << "an unchanged file would be recompiled";
  EXPECT_TRUE(app::stage_submission(labs, staging).empty());
}

}  // namespace
}  // namespace fsdplab
