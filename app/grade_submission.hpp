// grade_submission.hpp — `fsdplab grade --submission DIR`: grades a student's folder rather than this tree's
// labs. The running binary holds this tree's student.cpp, so the submission's nine files are built into a
// fsdplab of their own: a separate build tree of this source tree (FSDPLAB_SOURCE_DIR) configured with
// FSDPLAB_STUDENT_DIR=<build>/submission/labs (labs/CMakeLists.txt), whose `fsdplab grade` then does the
// grading. The build tree is configured once and kept: the first build compiles the whole engine (minutes),
// later ones only the student.cpp that differ from the last submission built there.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace fsdplab::app {

// The nine files a submission must hold, relative to its folder: labs/01-meta-init/student.cpp ...
// labs/09-cpu-offload/student.cpp (the lab folders of engine/fsdp/fsdp_tasks.hpp's task_info).
std::vector<std::filesystem::path> submission_files();

// Copies each of the submission's nine files (`labs`/NN-name/student.cpp) to `staging`/NN-name/student.cpp
// when its content differs from the copy there, and returns those that differed (as submission_files names
// them). The build compiles the copies: a copy is written now, so ninja, which compares times, recompiles
// every file whose content changed even when the submission keeps older times (cp -p, tar, unzip), and no
// other.
std::vector<std::filesystem::path> stage_submission(const std::filesystem::path& labs,
                                                    const std::filesystem::path& staging);

// The build tree grade_submission uses unless told another: <folder of the running fsdplab>/../submission-build
// (build/submission-build for build/app/fsdplab).
std::filesystem::path default_submission_build_dir();

// The grade options that tell the submission's own fsdplab which folder it grades, so that its --json names it
// ("submission": {"path", "absolute"}, grade_report.hpp) in the one write of the file: --graded-submission, then
// `submission` as given and its absolute path (cmd_grade.cpp).
std::vector<std::string> graded_submission_args(const std::filesystem::path& submission);

// Builds target fsdplab of FSDPLAB_SOURCE_DIR in `build_dir` with `submission`/labs/NN-name/student.cpp as
// the labs, staged in `build_dir`/submission/labs (configuring `build_dir` the first time), then runs
// `<build_dir>/app/fsdplab grade <grade_args...> <graded_submission_args(submission)...>` and returns its exit
// status. `grade_args` are grade's own options, without --submission. The build's output goes to stderr, the
// grade's to this process's stdout and stderr. Never throws: a submission lacking a file, a missing tool, or code that
// does not compile is said on stderr ("the submission does not compile: ...") and gives a non-zero status.
int grade_submission(const std::filesystem::path& submission, const std::vector<std::string>& grade_args,
                     const std::filesystem::path& build_dir);

}  // namespace fsdplab::app
