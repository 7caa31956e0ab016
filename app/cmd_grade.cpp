// `fsdplab grade` — the automated grader: each task's checks against the student's implementation (or any
// --impl), on the sim device, every check in its own process with a time limit (grader/).
//
//   fsdplab grade                          every task of labs/*/student.cpp
//   fsdplab grade --task 3 --task 4        two tasks
//   fsdplab grade --impl 3=mutant:missing-wait
//   fsdplab grade --cases held-out/ --json report.json
//   fsdplab grade --mutants                the grader's own test: every known-wrong implementation caught?
//   fsdplab grade --submission DIR         DIR/labs/*/student.cpp, built against this tree (grade_submission.hpp)
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <thread>

#include "app/build_commit.hpp"
#include "app/cli_checks.hpp"
#include "app/commands.hpp"
#include "app/fsdp_cli_options.hpp"
#include "app/grade_submission.hpp"
#include "app/program_path.hpp"
#include "app/temporary_folders.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/output_file.hpp"
#include "engine/train/model_factory.hpp"
#include "grader/check_catalog.hpp"
#include "grader/grade_report.hpp"
#include "grader/grading.hpp"
#include "grader/grading_cases.hpp"

namespace fsdplab::app {
namespace {

struct GradeFlags {
  std::vector<int> tasks;
  std::string impl = "student";
  std::string cases;
  std::string json;
  std::uint64_t seed = 0;
  bool mutants = false;
  bool impl_given = false;  // --impl on the command line (its default, student, is not a choice --mutants takes)
  double time_limit = 20;
  int jobs = 0;
  std::string submission;
  std::string submission_build;
  std::vector<std::string> graded_submission;  // the folder a submission's own grade grades: as given, absolute
  std::vector<std::string> not_built;          // "N:reason": a submission's labs that did not build (hidden)
};

// --not-built's "N:reason" entries (grade_submission's, never a person's) as GradeRequest::not_built.
std::map<int, std::string> parse_not_built(const std::vector<std::string>& entries) {
  std::map<int, std::string> out;
  for (const std::string& entry : entries) {
    const std::size_t colon = entry.find(':');
    const std::string number = entry.substr(0, colon);
    const bool digits =
        !number.empty() && number.size() <= 2 && number.find_first_not_of("0123456789") == std::string::npos;
    const int task = digits ? std::stoi(number) : 0;
    check(colon != std::string::npos && task >= 1 && task <= kTaskCount, "--not-built ", entry,
          ": expected TASK:REASON with TASK in 1..", kTaskCount);
    out[task] = entry.substr(colon + 1);
  }
  return out;
}

// With --submission only the students' code is graded: an --impl naming the reference or a mutant would grade that
// and file it under the submission's name.
void check_submission_impl(const std::string& impl) {
  const ImplChoice choice = parse_impl(impl);
  bool student = false;
  for (int n = 1; n <= kTaskCount; ++n) {
    const std::string& of = choice.of[static_cast<std::size_t>(n - 1)];
    check(of == "student" || !choice.replaced(n), "--impl ", impl, " with --submission would grade ", of,
          " as the submission's task ", n, "; expected --impl student (the default) or N=student");
    student = student || of == "student";
  }
  check(student, "--impl ", impl, " with --submission grades none of the submission's code; expected --impl student ",
        "(the default) or N=student");
}

// The grade options of `flags` for the submission's own fsdplab.
std::vector<std::string> forwarded_args(const GradeFlags& flags) {
  std::vector<std::string> args;
  for (int task : flags.tasks) args.insert(args.end(), {"--task", std::to_string(task)});
  args.insert(args.end(), {"--impl", flags.impl, "--seed", std::to_string(flags.seed), "--time-limit",
                           std::to_string(flags.time_limit)});
  if (flags.jobs > 0) args.insert(args.end(), {"--jobs", std::to_string(flags.jobs)});
  return args;  // --cases and --json: grade_submission adds them (cases readable in its sandbox, the JSON moved)
}

// The tasks to grade: --task's, else those --impl names one by one ("3=student"), else all nine. A --task that
// a per-task --impl leaves to the reference is refused: it would grade the reference and give it every point.
std::vector<int> tasks_to_grade(const GradeFlags& flags, const ImplChoice& choice) {
  if (flags.impl.find('=') == std::string::npos) return flags.tasks;
  std::vector<int> named;
  std::string named_text;
  for (int n = 1; n <= kTaskCount; ++n) {
    if (!choice.replaced(n)) continue;
    named.push_back(n);
    named_text += (named_text.empty() ? "" : ", ") + std::to_string(n);
  }
  check(!named.empty(), "--impl ", flags.impl,
        " replaces no task (the reference is every task's own): grade the reference with --impl reference, and pick "
        "tasks with --task");
  for (int task : flags.tasks) {
    check(choice.replaced(task), "--task ", task, " is not a task --impl ", flags.impl,
          " replaces, so it would grade the reference; expected a --task among those --impl names (", named_text,
          "), or --impl student or --impl reference");
  }
  return flags.tasks.empty() ? named : flags.tasks;
}

int run_grade(const GradeFlags& flags) {
  check(flags.submission_build.empty() || !flags.submission.empty(), "--submission-build ", flags.submission_build,
        " is the build folder of --submission, which was not given");
  check(flags.not_built.empty() || !flags.graded_submission.empty(),
        "--not-built is how --submission tells the submission's own grade which labs did not build; it goes only with "
        "--graded-submission");
  if (!flags.submission.empty()) {
    check(!flags.mutants, "--mutants grades this tree's mutants; it does not go with --submission");
    check(flags.graded_submission.empty() && flags.not_built.empty(), "--graded-submission and --not-built are how ",
          "--submission talks to the submission's own grade; they do not go with --submission");
    check_submission_impl(flags.impl);
    // Before the build, which may take minutes, what the submission's grade would refuse is said now: a --task
    // --impl leaves to the reference, a held-out case that does not load, a gradebook that cannot be written.
    SubmissionBounds bounds;
    bounds.tasks = tasks_to_grade(flags, parse_impl(flags.impl));
    const std::vector<grading::Check> cases =
        flags.cases.empty() ? std::vector<grading::Check>{} : grading::load_cases(flags.cases);
    if (!flags.json.empty()) check_output_file(flags.json, "--json");
    // The longest a grade can take: every check to its time limit, as many at once as it runs them, and two minutes
    // to start and to end.
    std::size_t checks = 0;
    for (int task : grading::selected_tasks(bounds.tasks)) {
      checks += grading::task_checks(task).size();
      checks += static_cast<std::size_t>(
          std::count_if(cases.begin(), cases.end(), [&](const grading::Check& c) { return c.task == task; }));
    }
    const std::size_t at_once =
        flags.jobs > 0 ? static_cast<std::size_t>(flags.jobs) : std::max(1u, std::thread::hardware_concurrency());
    bounds.seconds = std::chrono::seconds(
        120 + static_cast<long>(std::ceil(static_cast<double>((checks + at_once - 1) / at_once) * flags.time_limit)));
    return grade_submission(
        flags.submission, forwarded_args(flags),
        flags.submission_build.empty() ? default_submission_build_dir() : std::filesystem::path(flags.submission_build),
        flags.cases, flags.json, bounds);
  }
  grading::IsolationLimits limits;
  limits.seconds = flags.time_limit;
  limits.parallel = flags.jobs > 0 ? flags.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::vector<grading::Check> cases =
      flags.cases.empty() ? std::vector<grading::Check>{} : grading::load_cases(flags.cases);
  if (flags.mutants) {
    check(flags.json.empty(), "--mutants prints whether each mutant was caught and writes no gradebook; it does not ",
          "go with --json ", flags.json);
    check(!flags.impl_given, "--mutants grades each mutant in its own task's slot; it does not go with --impl ",
          flags.impl, " (to grade one mutant: --impl N=mutant:NAME without --mutants)");
    const grading::MutantsReport report = grading::grade_mutants(flags.tasks, cases, flags.seed, limits);
    grading::print_mutants(std::cout, report);
    // The grader's own test fails, as a test does, when a known-wrong implementation kept every point.
    return report.caught() == static_cast<int>(report.mutants.size()) ? 0 : 1;
  }
  grading::GradeRequest request;
  request.impl = parse_impl(flags.impl);
  request.tasks = tasks_to_grade(flags, request.impl);
  if (flags.graded_submission.empty()) {  // a submission's own grade runs what was just built from it
    ImplChoice graded;                    // each task is graded with the reference in every other slot
    for (int task : request.tasks)
      graded.of[static_cast<std::size_t>(task - 1)] = request.impl.of[static_cast<std::size_t>(task - 1)];
    warn_of_student_code_not_built(graded);
  }
  request.seed = flags.seed;
  request.limits = limits;
  request.extra = cases;
  // A submission's grade goes back to its student, whose own tree's fsdplab holds their code: its "see it" commands
  // call that one, as the labs' READMEs do; here the build folder's holds it until the next submission is built.
  request.program = flags.graded_submission.empty() ? program_from_source_root() : grading::kShowProgram;
  request.not_built = parse_not_built(flags.not_built);
  if (!flags.json.empty()) check_output_file(flags.json, "--json");
  grading::GradeReport report = grading::grade(request);
  report.fsdplab_commit = build_commit();
  if (!flags.graded_submission.empty())
    report.submission = grading::GradedSubmission{flags.graded_submission[0], flags.graded_submission[1]};
  grading::print_grade(std::cout, report);
  if (!flags.json.empty()) {
    grading::write_grade_json(flags.json, report);
    // A submission's grade writes its JSON in its sandbox; grade_submission moves it where --json asked, and says so.
    if (flags.graded_submission.empty()) std::cout << "json: " << flags.json << "\n";
  }
  return 0;
}

}  // namespace

void add_grade_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "grade",
      "Grade the lab's tasks: each task's checks (equality with the single-rank baseline, the schedule read from "
      "the op graph, memory, races, host syncs, errors) against your labs/*/student.cpp, points per check and a "
      "diagnostic for every point lost. Deterministic (the sim device); every check runs in its own process");
  auto flags = std::make_shared<GradeFlags>();
  cmd->add_option("--task", flags->tasks, "Grade only this task (1-9); repeat for more")
      ->check(CLI::Range(1, kTaskCount));
  CLI::Option* impl =
      cmd->add_option("--impl", flags->impl,
                      "What to grade: student (default: labs/NN-*/student.cpp), reference, or per task, e.g. "
                      "3=student or 3=mutant:missing-wait (then only the tasks named are graded)");
  cmd->add_option("--cases", flags->cases,
                  "A folder of held-out cases (*.json, grader/grading_cases.hpp) graded too; with --submission the "
                  "text, the student's copy, names each case without its settings (the --json has them)")
      ->check(non_empty("a folder"));
  cmd->add_option("--json", flags->json, "Write the grade as JSON for a gradebook")->check(non_empty("a file"));
  cmd->add_option("--seed", flags->seed, "Seed of the models and data the checks train (default 0)")
      ->check([](const std::string& text) { return seed_text_problem(text); });
  cmd->add_flag("--mutants", flags->mutants,
                "Grade every known-wrong implementation (labs/mutants/) in its task, with the task's --cases, and "
                "print whether it was caught; exits 1 when one was not");
  cmd->add_option("--time-limit", flags->time_limit,
                  "Seconds a check may run before it is killed and scores 0 (default 20)")
      ->check(finite_range(0.1, 3600.0, "seconds"));
  cmd->add_option("--jobs", flags->jobs, "Checks at once (default: the CPUs)")->check(CLI::Range(1, 256));
  cmd->add_option("--submission", flags->submission,
                  "Grade a submitted folder's labs/*/student.cpp instead of this tree's: compiled into a fsdplab of its "
                  "own that links this build's engine, grader and dashboard (seconds), whose grade then runs")
      ->check(non_empty("a folder"));
  cmd->add_option("--submission-build", flags->submission_build,
                  "The build folder for --submission (default: submission-build inside this fsdplab's build folder, "
                  "beside app/); one grading at a time uses it, others wait")
      ->check(non_empty("a folder"));
  // Hidden: grade_submission's way to tell the submission's own fsdplab which folder it grades (the path as given
  // and its absolute form), so that the one --json it writes names the submission. A course names the folder with
  // --submission; documenting this too would give two ways to do that, and a way to name a folder not graded.
  cmd->add_option("--graded-submission", flags->graded_submission)->expected(2)->group("");
  // Hidden too: grade_submission's list of the submission's labs that did not build ("N:reason", repeated), graded
  // 0 with their reason while the rest is graded with their skeletons in their place.
  cmd->add_option("--not-built", flags->not_built)->group("");
  cmd->callback([flags, impl] {
    flags->impl_given = impl->count() > 0;
    // `--task 1 --task 1` is task 1, graded once.
    std::sort(flags->tasks.begin(), flags->tasks.end());
    flags->tasks.erase(std::unique(flags->tasks.begin(), flags->tasks.end()), flags->tasks.end());
    // Every scratch folder the grade makes (its checks', a submission's) goes in one of its own, through TMPDIR,
    // removed however the grade ends, Ctrl-C included.
    TemporaryFolders temporary("fsdplab grade");
    const std::filesystem::path scratch = temporary.make_scratch("fsdplab-grade-run-");
    ::setenv("TMPDIR", scratch.c_str(), 1);
    const int status = run_grade(*flags);
    if (status != 0) throw CLI::RuntimeError(status);
  });
}

}  // namespace fsdplab::app
