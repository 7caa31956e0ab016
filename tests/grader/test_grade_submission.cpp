// `fsdplab grade --submission` (app/grade_submission.cpp) names the submission in the gradebook JSON, and stages
// the submission's nine files in its build tree: a file whose content changed is staged newer than what the last
// build made from it, even when the new submission carries older times (cp -p, tar, unzip keep them), so ninja
// recompiles it; an unchanged file keeps its time and is not recompiled. (The build itself takes minutes and is
// not run here.)
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "app/grade_submission.hpp"
#include "grader/grade_report.hpp"
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

// The gradebook a submission's grade writes names the folder graded, as given and absolute: a course grading many
// submissions reads which one from the file, not from the file's name. The submission's own fsdplab writes it once,
// told the folder by the options grade_submission adds to its grade.
TEST_F(GradeSubmission, TheSubmissionsGradeIsToldTheFolderAsGivenAndAbsolute) {
  const fs::path given = path("subs") / "alice" / "..";
  EXPECT_EQ(app::graded_submission_args(given / "bob/"),
            (std::vector<std::string>{"--graded-submission", (given / "bob/").string(), path("subs/bob").string()}));
  // A relative path is kept as given beside its absolute form.
  const fs::path here = fs::current_path();
  fs::current_path(dir());
  const std::vector<std::string> relative = app::graded_submission_args("subs/carol");
  fs::current_path(here);
  EXPECT_EQ(relative, (std::vector<std::string>{"--graded-submission", "subs/carol", path("subs/carol").string()}));
}

TEST_F(GradeSubmission, TheGradebookNamesTheSubmission) {
  grading::GradeReport report;
  report.impl = "student";
  report.submission = grading::GradedSubmission{"subs/carol", path("subs/carol").string()};
  grading::write_grade_json(path("grade.json"), report);
  const nlohmann::json grade = nlohmann::json::parse(slurp(path("grade.json")));
  EXPECT_EQ(grade["submission"], (nlohmann::json{{"path", "subs/carol"}, {"absolute", path("subs/carol").string()}}));
  EXPECT_EQ(grade["impl"], "student");
  // This tree's own grade names no submission.
  report.submission.reset();
  grading::write_grade_json(path("grade.json"), report);
  EXPECT_FALSE(nlohmann::json::parse(slurp(path("grade.json"))).contains("submission"));
}

}  // namespace
}  // namespace fsdplab
