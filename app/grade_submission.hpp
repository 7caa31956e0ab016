// grade_submission.hpp — `fsdplab grade --submission DIR`: grades a student's folder rather than this tree's
// labs. The running binary holds this tree's student.cpp, so the submission's nine files are built into a
// fsdplab of their own: a separate build tree of this source tree (FSDPLAB_SOURCE_DIR) configured with
// FSDPLAB_STUDENT_DIR=<build>/submission/labs (labs/CMakeLists.txt), whose `fsdplab grade` then does the
// grading. The build tree is configured once and kept: there only the labs compile, linking the libraries this
// fsdplab's build compiled ([Note: a submission's build] in CMakeLists.txt), and later builds only the student.cpp
// that differ from the last submission built there. A tree changed since those libraries were built is refused.
//
// A lab the submission lacks, or whose student.cpp does not compile or link, costs that task only: it is built
// with this tree's skeleton of the lab in its place, and the grade scores each of its checks 0 with the reason
// (GradeRequest::not_built). One grading at a time uses a build folder; another waits for it.
#pragma once
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace fsdplab::app {

// The nine files a submission must hold, relative to its folder: labs/01-meta-init/student.cpp ...
// labs/09-cpu-offload/student.cpp (the lab folders of engine/fsdp/fsdp_tasks.hpp's task_info).
std::vector<std::filesystem::path> submission_files();

// Copies each of the submission's nine files (`labs`/NN-name/student.cpp) to `staging`/NN-name/student.cpp
// when its content differs from the copy there, and returns those that differed (as submission_files names
// them); a file in `from_skeleton` is copied from `skeletons`/NN-name/student.cpp instead (this tree's labs). The
// build compiles the copies: a copy is written now, so ninja, which compares times, recompiles every file whose
// content changed even when the submission keeps older times (cp -p, tar, unzip), and no other.
std::vector<std::filesystem::path> stage_submission(const std::filesystem::path& labs,
                                                    const std::filesystem::path& staging,
                                                    const std::filesystem::path& skeletons = {},
                                                    const std::set<std::filesystem::path>& from_skeleton = {});

// What stopped a build, read from its output lines (ninja's "FAILED: ..." and the compiler's and linker's errors):
// each staged lab file (in `staging`) that failed to compile or link, by submission_files' name, with its first
// error (and how many more the file has), the staged path written as the student's tree names it
// ("labs/03-forward/student.cpp does not compile: labs/03-forward/student.cpp:24:38: error: ..."); and whether
// something else failed too.
struct BuildFailures {
  std::map<std::filesystem::path, std::string> labs;
  bool elsewhere = false;
};
BuildFailures build_failures(const std::vector<std::string>& lines, const std::filesystem::path& staging);

// Refuses (an Error naming what was expected) a build folder where a grading must write nothing: `submission` (its
// canonical path) or a folder inside it, `course_build` (the build whose libraries the submission links), a file,
// or a folder holding files no submission build made. A new or empty folder, or one an earlier --submission built
// in, passes. Nothing is written.
void check_build_folder(const std::filesystem::path& build, const std::filesystem::path& submission,
                        const std::filesystem::path& course_build);

// One grading at a time per build folder (`build`, made if missing): held from construction to destruction, with
// flock on the folder itself, so nothing is written into a folder not yet known to be a build of ours. Another
// grading of the same folder waits, saying so on stderr, and again every `remind_every` while it waits (a TA's
// terminal shows it is waiting, not hung); two would stage and build over each other, and each grade what the other
// built.
class BuildFolderLock {
 public:
  explicit BuildFolderLock(const std::filesystem::path& build,
                           std::chrono::milliseconds remind_every = std::chrono::seconds(30));
  ~BuildFolderLock();
  BuildFolderLock(const BuildFolderLock&) = delete;
  BuildFolderLock& operator=(const BuildFolderLock&) = delete;

 private:
  int fd_ = -1;
};

// What `source` holds now against what `course_build`'s libraries were compiled from: the record the course build
// writes once they are built (fsdplab-compiled-sources.txt in it, by app/compiled_sources.cmake) beside the same
// script's record of the tree now. Each file that differs, in path order: "engine/fsdp/forward.hpp changed",
// "... is new", "... is gone"; none while the libraries are current. An Error when the build has no record or a
// record cannot be read. Writes only a temporary file, removed.
std::vector<std::string> sources_changed_since_build(const std::filesystem::path& source,
                                                     const std::filesystem::path& course_build);
// Runs `source`/app/compiled_sources.cmake, which writes `out`: the SHA-256 and path of each source of `source` the
// course build's libraries are compiled from. An Error when it cannot.
void record_compiled_sources(const std::filesystem::path& source, const std::filesystem::path& out);
// The build tree grade_submission uses unless told another: <folder of the running fsdplab>/../submission-build
// (build/submission-build for build/app/fsdplab).
std::filesystem::path default_submission_build_dir();

// The grade options that tell the submission's own fsdplab which folder it grades, so that its --json names it
// ("submission": {"path", "absolute"}, grade_report.hpp) in the one write of the file: --graded-submission, then
// `submission` as given and its absolute path (cmd_grade.cpp).
std::vector<std::string> graded_submission_args(const std::filesystem::path& submission);

// What a submission's grade reads beside the system's files, and so all its sandbox lets it read: its build folder
// `build` (its fsdplab, and the labs' sources the reference check reads), and the held-out cases folder `cases` (when
// not empty) with the file each case there that is a link leads to.
std::vector<std::filesystem::path> read_by_the_grade(const std::filesystem::path& build,
                                                     const std::filesystem::path& cases);

// Builds target fsdplab of FSDPLAB_SOURCE_DIR in `build_dir` with `submission`/labs/NN-name/student.cpp as
// the labs, staged in `build_dir`/submission/labs (configuring `build_dir` the first time), then runs
// `<build_dir>/app/fsdplab grade <grade_args...> <graded_submission_args(submission)...>`, with `--cases cases` when
// a folder of held-out cases is named, sandboxed (submission_sandbox.hpp: it reads only the system's files, its build
// and `cases`, and writes only in a scratch folder of its own), and returns its exit status; the JSON it writes there
// is written to `json`, when one is named. A lab file missing or that does not build is replaced by this tree's
// skeleton, and named to the grade (--not-built TASK:REASON). `grade_args` are grade's own options, without
// --submission, --cases and --json. The build's output goes to stderr, the grade's to this process's stdout and
// stderr. Never throws: a tree changed since this fsdplab's build
// (sources_changed_since_build: refused before anything is written), a folder holding none of the nine files, a
// missing tool, or a build that fails outside the labs is said on stderr, written to `json` where one is named
// (grading::write_refused_grade_json), and gives a non-zero status.
//
// The submission's fsdplab runs the student's code in its own process too (static initialisers, a lab's code outside
// the checks' processes), so what it says is checked: it must end within `bounds.seconds` (else it is stopped) and
// leave a grade's JSON that is sound for `bounds.tasks` (grading::unsound_grade_json; every task when empty). A
// submission whose grade ends early, hangs or writes an unsound one is not graded, said as above.
struct SubmissionBounds {
  std::vector<int> tasks;              // the tasks the grade covers; every task when empty
  std::chrono::seconds seconds{3600};  // the whole grade's time, its build not counted
};
int grade_submission(const std::filesystem::path& submission, const std::vector<std::string>& grade_args,
                     const std::filesystem::path& build_dir, const std::filesystem::path& cases = {},
                     const std::filesystem::path& json = {}, const SubmissionBounds& bounds = {});

}  // namespace fsdplab::app
