// `fsdplab grade --submission` (app/grade_submission.cpp) names the submission in the gradebook JSON, and stages
// the submission's nine files in its build tree: a file whose content changed is staged newer than what the last
// build made from it, even when the new submission carries older times (cp -p, tar, unzip keep them), so ninja
// recompiles it; an unchanged file keeps its time and is not recompiled. A lab that does not build is told from the
// build's output and staged as its skeleton; its task is graded 0 with the reason, the rest as usual. One grading at
// a time holds a build folder; a course tree changed since its build is named; the submission's code reads only the
// system's files and its grade's inputs, and writes only in its scratch folder. (The build itself takes minutes and
// is not run here.)
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "app/grade_submission.hpp"
#include "app/submission_sandbox.hpp"
#include "grader/grade_report.hpp"
#include "grader/grading.hpp"
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

TEST_F(GradeSubmission, ALabMissingOrThatDoesNotBuildIsStagedAsItsSkeleton) {
  const std::vector<fs::path> files = app::submission_files();
  for (const fs::path& file : files) {
    fs::create_directories(path("submission") / file.parent_path());
    spit(path("submission") / file, "// the student's " + file.string() + "\n");
    fs::create_directories(path("tree") / file.parent_path());
    spit(path("tree") / file, "// the skeleton of " + file.string() + "\n");
  }
  const fs::path staging = path("build/submission/labs");
  EXPECT_EQ(app::stage_submission(path("submission/labs"), staging), files);
  const std::set<fs::path> broken = {files.at(2), files.at(4)};
  EXPECT_EQ(app::stage_submission(path("submission/labs"), staging, path("tree/labs"), broken),
            (std::vector<fs::path>{files.at(2), files.at(4)}));
  EXPECT_EQ(slurp(staging / files.at(2).lexically_relative("labs")),
            "// the skeleton of " + files.at(2).string() + "\n");
  EXPECT_EQ(slurp(staging / files.at(3).lexically_relative("labs")), "// the student's " + files.at(3).string() + "\n");
}

// What failed is read from the build's lines as ninja, the compiler and the linker print them: a lab's object in
// ninja's FAILED line with its first error in the lab's own file (and how many more), named as the student's tree names
// it (or, when the error is an engine header's, the lab's line that led there and that error); a link error blames the
// file it is reported in, or, for a lab's entry point undefined (a file left empty), that lab; anything else is a
// failure the labs do not account for.
TEST_F(GradeSubmission, WhatFailedIsReadFromTheBuildsOutput) {
  const std::string staged = "/b/submission-build/submission/labs/";
  const fs::path staging = "/b/submission-build/submission/labs";
  const app::BuildFailures two = app::build_failures(
      {"[1/8] Building CXX object "
       "labs/CMakeFiles/fsdplab_labs.dir/__/submission/labs/05-sharded-optimizer/student.cpp.o",
       "FAILED: labs/CMakeFiles/fsdplab_labs.dir/__/submission/labs/05-sharded-optimizer/student.cpp.o ",
       "/usr/bin/c++ -I/work -c " + staged + "05-sharded-optimizer/student.cpp",
       staged + "05-sharded-optimizer/student.cpp: In member function 'void step()':",
       staged + "05-sharded-optimizer/student.cpp:26:13: error: 'x' was not declared",
       staged + "05-sharded-optimizer/student.cpp:31:2: error: expected ';' before '}' token",
       "[2/8] Building CXX object labs/CMakeFiles/fsdplab_labs.dir/__/submission/labs/03-forward/student.cpp.o",
       "FAILED: labs/CMakeFiles/fsdplab_labs.dir/__/submission/labs/03-forward/student.cpp.o ",
       "In file included from " + staged + "03-forward/student.cpp:3:",
       "/work/engine/runtime/error.hpp:20:14: error: no match for 'operator<<'",
       staged + "03-forward/student.cpp:25:10:   required from here",
       "ninja: build stopped: cannot make progress due to previous errors."},
      staging);
  EXPECT_FALSE(two.elsewhere);
  EXPECT_EQ(two.labs,
            (std::map<fs::path, std::string>{
                {"labs/03-forward/student.cpp",
                 "labs/03-forward/student.cpp does not compile: labs/03-forward/student.cpp:25:10:   "
                 "required from here — /work/engine/runtime/error.hpp:20:14: error: no match for 'operator<<'"},
                {"labs/05-sharded-optimizer/student.cpp",
                 "labs/05-sharded-optimizer/student.cpp does not compile: "
                 "labs/05-sharded-optimizer/student.cpp:26:13: error: 'x' was not declared (and 1 more error in the "
                 "file: the build's messages on stderr)"}}));
  // A message of the compiler's own (the build sandbox's memory limit), not the command ninja echoes.
  const app::BuildFailures limit =
      app::build_failures({"FAILED: labs/CMakeFiles/fsdplab_labs.dir/__/submission/labs/01-meta-init/student.cpp.o ",
                           "/usr/bin/c++ -I/work -o labs/x.o -c " + staged + "01-meta-init/student.cpp", "",
                           "cc1plus: out of memory allocating 8589934608 bytes after a total of 610304 bytes",
                           "ninja: build stopped: cannot make progress due to previous errors."},
                          staging);
  EXPECT_EQ(limit.labs.at("labs/01-meta-init/student.cpp"),
            "labs/01-meta-init/student.cpp does not compile: cc1plus: out of memory allocating 8589934608 bytes after "
            "a total of 610304 bytes");
  const app::BuildFailures link = app::build_failures(
      {"FAILED: app/fsdplab ", staged + "01-meta-init/student.cpp:42: undefined reference to `helper()'",
       "/usr/bin/ld: " + staged +
           "04-backward/student.cpp:54: multiple definition of `fsdplab::student_meta_init()'; "
           "labs/CMakeFiles/fsdplab_labs.dir/__/submission/labs/01-meta-init/student.cpp.o:" +
           staged + "01-meta-init/student.cpp:40: first defined here",
       "collect2: error: ld returned 1 exit status"},
      staging);
  EXPECT_FALSE(link.elsewhere);
  EXPECT_EQ(link.labs.at("labs/01-meta-init/student.cpp"),
            "labs/01-meta-init/student.cpp does not link: labs/01-meta-init/student.cpp:42: undefined "
            "reference to `helper()'");
  EXPECT_TRUE(
      testing::contains(link.labs.at("labs/04-backward/student.cpp"),
                        "labs/04-backward/student.cpp does not link: it defines fsdplab::student_meta_init(), "
                        "which labs/01-meta-init/student.cpp defines too: a lab's own helpers go in an "
                        "anonymous namespace (or are static), so that two labs' helpers never clash at the link "
                        "(/usr/bin/ld: labs/04-backward/student.cpp:54: multiple definition"))
      << link.labs.at("labs/04-backward/student.cpp");
  // The object files the linker names are the build's: only the student's files and lines are quoted.
  EXPECT_TRUE(
      testing::contains(link.labs.at("labs/04-backward/student.cpp"),
                        "`fsdplab::student_meta_init()'; labs/01-meta-init/student.cpp:40: first defined here)"))
      << link.labs.at("labs/04-backward/student.cpp");
  // A lab whose entry point is missing: the linker blames the course tree's labs/student_tasks.cpp, which calls it.
  const std::vector<std::string> entry_points = {"meta_init",   "flat_parameter",    "forward",
                                                 "backward",    "sharded_optimizer", "overlap",
                                                 "integration", "hybrid_shard",      "cpu_offload"};
  for (std::size_t t = 0; t < entry_points.size(); ++t) {
    const app::BuildFailures empty = app::build_failures(
        {"FAILED: app/fsdplab ",
         "/work/labs/student_tasks.cpp:10: undefined reference to `fsdplab::student_" + entry_points[t] + "()'"},
        staging);
    EXPECT_FALSE(empty.elsewhere) << entry_points[t];
    ASSERT_EQ(empty.labs.size(), 1u) << entry_points[t];
    EXPECT_EQ(empty.labs.begin()->first, app::submission_files().at(t)) << entry_points[t];
    EXPECT_TRUE(testing::contains(empty.labs.begin()->second,
                                  "does not link: it defines no fsdplab::student_" + entry_points[t] + "()"))
        << empty.labs.begin()->second;
    // The course tree's path is not the student's: their own tree's file is named.
    EXPECT_FALSE(testing::contains(empty.labs.begin()->second, "/work/labs")) << empty.labs.begin()->second;
    EXPECT_TRUE(testing::contains(empty.labs.begin()->second, "which labs/student_tasks.cpp calls"))
        << empty.labs.begin()->second;
  }
  EXPECT_TRUE(
      app::build_failures({"FAILED: engine/CMakeFiles/fsdplab_engine.dir/tensor/tensor.cpp.o "}, staging).elsewhere);
  EXPECT_TRUE(
      app::build_failures({"FAILED: app/fsdplab ", "collect2: error: ld returned 1 exit status"}, staging).elsewhere);
}

// A build folder where a grading must write nothing is refused before anything is written there: the submission or a
// folder inside it, the course's build, a file, a folder holding someone's files. A new or empty folder, or an earlier
// submission build (configured, or staged by a first build stopped before it configured), is taken.
TEST_F(GradeSubmission, ABuildFolderThatIsNotOneOfOursIsRefusedUntouched) {
  const fs::path submission = path("subs/hank");
  fs::create_directories(submission / "labs");
  const fs::path graded = fs::canonical(submission);
  fs::create_directories(path("course-build"));
  spit(path("course-build/CMakeCache.txt"), "");
  const fs::path course = path("course-build");
  const auto refusal = [&](const fs::path& build) {
    return testing::error_of([&] { app::check_build_folder(build, graded, course); });
  };
  EXPECT_TRUE(testing::contains(refusal(submission), "is inside the submission")) << refusal(submission);
  EXPECT_TRUE(testing::contains(refusal(submission / "build"), "is inside the submission"));
  EXPECT_TRUE(testing::contains(refusal(submission / "build"),
                                "expected a folder outside it, e.g. --submission-build /tmp/submission-build"));
  EXPECT_FALSE(fs::exists(submission / "build"));
  spit(path("afile"), "x");
  EXPECT_TRUE(testing::contains(refusal(path("afile")), "is not a folder; expected a new folder"));
  fs::create_directories(path("notes"));
  spit(path("notes/notes.txt"), "mine");
  EXPECT_TRUE(testing::contains(refusal(path("notes")), "holds files and is not a submission's build"));
  EXPECT_EQ(slurp(path("notes/notes.txt")), "mine");
  EXPECT_EQ(std::distance(fs::directory_iterator(path("notes")), fs::directory_iterator()), 1);
  EXPECT_TRUE(testing::contains(refusal(course), "is the build of this fsdplab")) << refusal(course);
  EXPECT_TRUE(testing::contains(refusal(path("course-build/../course-build")), "is the build of this fsdplab"));
  EXPECT_EQ(std::distance(fs::directory_iterator(course), fs::directory_iterator()), 1);

  EXPECT_NO_THROW(app::check_build_folder(path("new"), graded, course));
  EXPECT_FALSE(fs::exists(path("new")));
  fs::create_directories(path("empty"));
  EXPECT_NO_THROW(app::check_build_folder(path("empty"), graded, course));
  fs::create_directories(path("configured"));
  spit(path("configured/CMakeCache.txt"), "");
  EXPECT_NO_THROW(app::check_build_folder(path("configured"), graded, course));
  fs::create_directories(path("staged/submission/labs"));
  EXPECT_NO_THROW(app::check_build_folder(path("staged"), graded, course));
  EXPECT_NO_THROW(app::check_build_folder(path("subs/hank-build"), graded, course))
      << "a sibling whose name begins as the submission's";
}

// A course build records what its libraries were compiled from (app/compiled_sources.cmake, run once they are
// built); a tree that differs from that record is named file by file (an edit, a new file, one gone), so that
// no submission is built against headers its libraries were not compiled from. A lab's student.cpp, its notes,
// and a file edited and put back as it was, are no change.
TEST_F(GradeSubmission, ACourseTreeChangedSinceItsBuildIsNamedFileByFile) {
  const fs::path source = path("course");
  const fs::path course_build = path("course/build");
  for (const char* folder : {"app", "engine/fsdp", "labs/03-forward", "grader"})
    fs::create_directories(source / folder);
  fs::copy_file(fs::path(FSDPLAB_SOURCE_DIR) / "app" / "compiled_sources.cmake",
                source / "app" / "compiled_sources.cmake");
  spit(source / "CMakeLists.txt", "project(course)\n");
  spit(source / "engine/fsdp/fsdp_tasks.hpp", "struct Task { int a; };\n");
  spit(source / "engine/fsdp/forward.cpp", "int forward() { return 1; }\n");
  spit(source / "grader/grading.cpp", "int grade() { return 2; }\n");
  spit(source / "labs/03-forward/student.cpp", "// the skeleton\n");
  spit(source / "labs/03-forward/README.md", "# the lab\n");

  EXPECT_TRUE(testing::contains(testing::error_of([&] { app::sources_changed_since_build(source, course_build); }),
                                "has no 'fsdplab-compiled-sources.txt'"));
  fs::create_directories(course_build);
  app::record_compiled_sources(source, course_build / "fsdplab-compiled-sources.txt");
  EXPECT_TRUE(
      testing::contains(slurp(course_build / "fsdplab-compiled-sources.txt"), "  engine/fsdp/fsdp_tasks.hpp\n"));
  EXPECT_EQ(app::sources_changed_since_build(source, course_build), std::vector<std::string>{});

  spit(source / "labs/03-forward/student.cpp", "// a TA's own attempt\n");
  spit(source / "labs/03-forward/README.md", "# the lab, reworded\n");
  spit(source / "engine/fsdp/.fsdp_tasks.hpp.swp", "an editor's\n");
  EXPECT_EQ(app::sources_changed_since_build(source, course_build), std::vector<std::string>{});

  spit(source / "engine/fsdp/fsdp_tasks.hpp", "struct Task { int a; int b; };\n");
  spit(source / "engine/fsdp/backward.cpp", "int backward() { return 3; }\n");
  fs::remove(source / "grader/grading.cpp");
  EXPECT_EQ(app::sources_changed_since_build(source, course_build),
            (std::vector<std::string>{"engine/fsdp/backward.cpp is new", "engine/fsdp/fsdp_tasks.hpp changed",
                                      "grader/grading.cpp is gone"}));

  spit(source / "engine/fsdp/fsdp_tasks.hpp", "struct Task { int a; };\n");
  EXPECT_EQ(app::sources_changed_since_build(source, course_build),
            (std::vector<std::string>{"engine/fsdp/backward.cpp is new", "grader/grading.cpp is gone"}));

  spit(course_build / "fsdplab-compiled-sources.txt", "not a record\n");
  EXPECT_TRUE(testing::contains(testing::error_of([&] { app::sources_changed_since_build(source, course_build); }),
                                "expected 'SHA256  PATH'"));
}

// The submission's fsdplab runs under Landlock ([Note: what a submission's code may do]): it and what it starts write
// in its scratch folder and /dev/null and nowhere else (another student's grade is neither changed nor removed), and,
// where the kernel's ABI scopes signals, cannot signal the grader that waits for it. Its environment carries the
// settings asked for. On a kernel without Landlock the summary says the code runs with the TA's rights.
// [Note: what a submission's code may do]: a script started in the sandbox (and what it starts) reads the system's
// files and its readable inputs, writes in its scratch folder and /dev/null, and nothing else; signals stay inside.
TEST_F(GradeSubmission, TheSubmissionsCodeReadsOnlyItsInputsAndWritesOnlyInItsScratchFolder) {
  EXPECT_TRUE(testing::contains(app::sandbox_summary({0, "no Landlock here"}, {path("scratch"), {}}),
                                "the submission's code runs with your rights: no Landlock here"));
  const app::SandboxSupport support = app::sandbox_support();
  if (support.abi == 0) GTEST_SKIP() << "the sandbox needs Landlock: " << support.why_not;
  for (const fs::path& system : app::system_files())
    ASSERT_TRUE(dir().lexically_relative(system).string().starts_with("..")) << dir() << " is a system folder";
  fs::create_directories(path("scratch"));
  fs::create_directories(path("grades"));
  fs::create_directories(path("cases"));
  fs::create_directories(path("build"));
  spit(path("grades/bob.json"), "bob's grade");
  spit(path("cases/w4.json"), "a held-out case");
  spit(path("elsewhere.json"), "a case kept elsewhere");
  fs::create_symlink(path("elsewhere.json"), path("cases/linked.json"));
  const std::string grades = path("grades").string();
  const std::string script =
      "echo mine > \"$TMPDIR/inside\"; echo forged > " + grades + "/bob.json; rm -f " + grades + "/bob.json; mkdir " +
      grades + "/planted; sh -c 'echo deeper > " + grades + "/deeper'; echo quiet > /dev/null && " + "cat " +
      path("cases/w4.json").string() + " " + path("cases/linked.json").string() + " > \"$TMPDIR/cases\"; " + "if cat " +
      grades + "/bob.json > /dev/null 2>&1 || ls " + grades + " > /dev/null 2>&1; then echo read; " +
      "else echo refused; fi > \"$TMPDIR/others\"; if kill -0 " + std::to_string(::getpid()) +
      " 2>/dev/null; then echo reached; else echo refused; fi > \"$TMPDIR/signal\"; echo done > \"$TMPDIR/end\"";
  // The rules grade_submission gives a submission's grade with held-out cases, one of them a link to elsewhere.
  const app::SandboxRules rules{path("scratch"), app::read_by_the_grade(path("build"), path("cases"))};
  EXPECT_EQ(rules.readable, (std::vector<fs::path>{path("build"), path("cases"), path("elsewhere.json")}));
  const pid_t pid =
      app::start_sandboxed(support, {"/bin/sh", "-c", script}, rules, {"TMPDIR=" + path("scratch").string()});
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(slurp(path("scratch/inside")), "mine\n");
  EXPECT_EQ(slurp(path("scratch/end")), "done\n") << "a refused write stopped the script, or /dev/null was refused";
  EXPECT_EQ(slurp(path("scratch/cases")), "a held-out casea case kept elsewhere");
  EXPECT_EQ(slurp(path("scratch/others")), "refused\n") << "another student's grade was readable";
  EXPECT_EQ(slurp(path("grades/bob.json")), "bob's grade");
  EXPECT_FALSE(fs::exists(path("grades/planted")));
  EXPECT_FALSE(fs::exists(path("grades/deeper"))) << "a process the sandboxed one started wrote outside";
  EXPECT_EQ(slurp(path("scratch/signal")), support.abi >= 6 ? "refused\n" : "reached\n");
  const std::string summary = app::sandbox_summary(support, rules);
  EXPECT_TRUE(testing::contains(summary, "may read only the system's files, '" + path("build").string() + "', '" +
                                             path("cases").string() + "' and '" + path("elsewhere.json").string() +
                                             "', write only in '" + path("scratch").string() + "'"))
      << summary;
}

// A second grading of one build folder waits until the first is done, saying so, and again while it waits.
TEST_F(GradeSubmission, OneGradingAtATimeHoldsABuildFolder) {
  std::optional<app::BuildFolderLock> first(std::in_place, path("build"));
  std::atomic<bool> second_holds{false};
  ::testing::internal::CaptureStderr();
  std::thread second([&] {
    const app::BuildFolderLock lock(path("build"), std::chrono::milliseconds(100));
    second_holds = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  EXPECT_FALSE(second_holds) << "two gradings hold one build folder";
  first.reset();
  second.join();
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(second_holds);
  EXPECT_NE(said.find("waiting for another grading that uses the build folder"), std::string::npos) << said;
  EXPECT_NE(said.find("still waiting for the build folder '" + path("build").string() + "' (0 s so far)"),
            std::string::npos)
      << said;
}

// A lab that did not build scores 0 in each of its checks, none run, with the reason, in the text and the gradebook.
TEST_F(GradeSubmission, ALabThatDidNotBuildScoresZeroWithItsReason) {
  grading::GradeRequest request;
  request.impl = parse_impl("student");
  request.tasks = {1};
  request.not_built = {{1, "labs/01-meta-init/student.cpp does not compile: x.cpp:1:1: error: y"}};
  const grading::GradeReport report = grading::grade(request);
  ASSERT_EQ(report.tasks.size(), 1u);
  EXPECT_EQ(report.earned(), 0);
  EXPECT_EQ(report.possible(), 16);
  EXPECT_TRUE(testing::contains(report.tasks[0].where, "not built (labs/01-meta-init/student.cpp:"))
      << report.tasks[0].where;
  for (const grading::GradedCheck& g : report.tasks[0].checks) {
    EXPECT_EQ(g.run.end, grading::CheckEnd::not_built) << g.check.id;
    EXPECT_EQ(g.run.outcome.got, request.not_built[1]) << g.check.id;
  }
  std::ostringstream text;
  grading::print_grade(text, report);
  EXPECT_TRUE(testing::contains(text.str(), "    NOT BUILT  labs/01-meta-init/student.cpp does not compile: x.cpp"))
      << text.str();
  grading::write_grade_json(path("grade.json"), report);
  const nlohmann::json grade = nlohmann::json::parse(slurp(path("grade.json")));
  EXPECT_EQ(grade["tasks"][0]["not_built"], request.not_built[1]);
  EXPECT_EQ(grade["tasks"][0]["checks"][0]["end"], "not built");
  EXPECT_EQ(grade["tasks"][0]["points"], 0);
}

// A submission's text goes back to its student: a held-out case there is its name and its points, not its settings,
// diagnostic, budget or command ([Note: held-out cases in the student's text]); the gradebook keeps them. This
// tree's own grade (a TA's, no submission) prints them.
TEST_F(GradeSubmission, TheStudentsTextNamesAHeldOutCaseWithoutItsSettings) {
  const auto graded = [](const std::string& id, const std::string& title, double earned) {
    grading::Check check;
    check.task = 3;
    check.id = id;
    check.title = title;
    check.points = 5;
    grading::CheckOutcome outcome =
        earned < 5 ? grading::CheckOutcome::fail("equal to the baseline",
                                                 "differs by 1e-2 (yours: fsdplab run --model llama --world 4)",
                                                 "look for what depends on W")
                   : grading::CheckOutcome{};
    if (check.is_held_out_case()) outcome.budget = {{"all-gathers", 24, 24, ""}};
    return grading::GradedCheck{
        check, {grading::CheckEnd::finished, outcome}, earned, "build/app/fsdplab gui --model llama --world 4"};
  };
  grading::GradeReport report;
  report.impl = "student";
  report.tasks.push_back({3, "student", "labs/03-forward/student.cpp:10", {}});
  report.tasks[0].checks = {graded("padding", "public check: gpt2 W=3", 5),
                            graded("case:big one", "held-out case 'big one': llama W=4 full equals the baseline", 0),
                            graded("case:small", "held-out case 'small': gpt2 W=2 hybrid equals the baseline", 5)};
  report.submission = grading::GradedSubmission{"subs/carol", path("subs/carol").string()};
  std::ostringstream text;
  grading::print_grade(text, report);
  for (const char* hidden : {"llama", "W=4", "--world 4", "differs by", "look for", "all-gathers", "hybrid"})
    EXPECT_FALSE(testing::contains(text.str(), hidden)) << hidden << " in\n" << text.str();
  EXPECT_TRUE(testing::contains(text.str(), "LOST  case:big one")) << text.str();
  EXPECT_TRUE(testing::contains(text.str(), "held-out case 'big one'")) << text.str();
  EXPECT_TRUE(testing::contains(text.str(), "its settings, diagnostic and command stay with the course"));
  EXPECT_TRUE(testing::contains(text.str(), "pass  case:small")) << text.str();
  EXPECT_TRUE(testing::contains(text.str(), "public check: gpt2 W=3")) << "a public check is shown whole";
  grading::write_grade_json(path("grade.json"), report);
  const nlohmann::json grade = nlohmann::json::parse(slurp(path("grade.json")));
  EXPECT_EQ(grade["tasks"][0]["checks"][1]["title"], report.tasks[0].checks[1].check.title);
  EXPECT_EQ(grade["tasks"][0]["checks"][1]["show"], "build/app/fsdplab gui --model llama --world 4");

  report.submission.reset();
  std::ostringstream own;
  grading::print_grade(own, report);
  EXPECT_TRUE(testing::contains(own.str(), "held-out case 'big one': llama W=4 full")) << own.str();
  EXPECT_TRUE(testing::contains(own.str(), "see it    build/app/fsdplab gui --model llama --world 4")) << own.str();
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
