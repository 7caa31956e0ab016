#include "grader/grade_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <span>

#include "engine/runtime/output_file.hpp"
#include "grader/budget_line_json.hpp"
#include "grader/check_catalog.hpp"
#include "grader/diagnostic_text.hpp"
#include "labs/student_tasks.hpp"

namespace fsdplab::grading {
namespace {

// "106.16/121", "13/13": points are rounded to hundredths (grading.cpp), and printed to the hundredth the JSON
// carries, so the text and the gradebook agree; trailing zeros are dropped.
std::string points_text(double earned, int possible) {
  char text[48];
  std::snprintf(text, sizeof text, "%.2f", earned);
  std::string points = text;
  points.erase(points.find_last_not_of('0') + 1);
  if (points.back() == '.') points.pop_back();
  return points + "/" + std::to_string(possible);
}

std::string percent_text(double earned, int possible) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", possible > 0 ? 100.0 * earned / possible : 0.0);
  return text;
}

std::string budget_text(const std::vector<BudgetLine>& budget) {
  std::string text;
  for (const BudgetLine& b : budget) {
    char line[160];
    if (b.unit.empty()) {
      std::snprintf(line, sizeof line, "%s %.0f (reference %.0f)", b.what.c_str(), b.graded, b.reference);
    } else {
      const FiguresApart f = figures_apart(b.graded, b.reference);
      std::snprintf(line, sizeof line, "%s %s %s (reference %s)", b.what.c_str(), f.graded.c_str(), b.unit.c_str(),
                    f.reference.c_str());
    }
    text += (text.empty() ? "" : ", ") + std::string(line);
  }
  return text;
}

// Continuation lines of a diagnostic indented under its label.
std::string indented(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\n') out += "                ";
  }
  return out;
}

// How the text and the JSON name a task whose checks were not run (TaskGrade::not_run): the text's label, the
// JSON's key for the reason, and what the text adds to "every check scores 0".
struct NotRunNames {
  std::string_view label, json_key, rest;
};

NotRunNames names_of(CheckEnd end) {
  if (end == CheckEnd::not_built)
    return {"NOT BUILT", "not_built", "; the rest was graded with this lab's skeleton in its place"};
  return {"REFERENCE", "uses_reference", ""};
}

// A task's diagnostics printed so far, (label, text) -> the check that printed it first: one mistake that fails
// several checks (a race stops every training) is told once, and the later checks point at it.
using Told = std::map<std::pair<std::string, std::string>, std::string>;

// `text` under `label`, or where an earlier check of the task said the very same, a pointer to it.
void print_once(std::ostream& out, const char* label, const std::string& text, const std::string& check, Told& told) {
  const auto [first, new_text] = told.emplace(std::pair<std::string, std::string>(label, text), check);
  out << "          " << label << (new_text ? indented(text) : "as " + first->second + "'s above") << "\n";
}

// A check's line, and for one that lost points its diagnostic and "see it" command; a held-out case's settings
// hidden (`hide_held_out`, a submission's text: [Note: held-out cases in the student's text]) leave only its name.
void print_check(std::ostream& out, const GradedCheck& g, Told& told, bool hide_held_out) {
  const bool lost = g.earned < g.check.points;
  const bool hidden = hide_held_out && g.check.is_held_out_case();
  const std::string title =
      hidden ? held_out_case_title(std::string_view(g.check.id).substr(kHeldOutCaseIdPrefix.size())) : g.check.title;
  out << "    " << (lost ? "LOST" : "pass") << "  " << std::left << std::setw(22) << g.check.id << " " << std::setw(72)
      << title << " " << points_text(g.earned, g.check.points) << "\n";
  if (hidden) {
    if (lost) out << "          its settings, diagnostic and command stay with the course\n";
    return;
  }
  if (lost) {
    out << "          expected  " << indented(g.run.outcome.expected) << "\n";
    print_once(out, "got       ", g.run.outcome.got, g.check.id, told);
    if (!g.run.outcome.cause.empty()) print_once(out, "cause     ", g.run.outcome.cause, g.check.id, told);
    if (!g.show.empty()) out << "          see it    " << g.show << "\n";
  }
  if (!g.run.outcome.budget.empty()) out << "          budget    " << budget_text(g.run.outcome.budget) << "\n";
}

// The checks of `tasks` that are (or are not) a course's held-out cases, and their points: a gradebook weighs the
// public checks and the held-out ones apart ({"points", "max"}), and a submission's text says when it has any.
struct Subtotal {
  int checks = 0;
  double earned = 0;
  int possible = 0;
};

Subtotal subtotal(std::span<const TaskGrade> tasks, bool held_out) {
  Subtotal sum;
  for (const TaskGrade& t : tasks) {
    for (const GradedCheck& g : t.checks) {
      if (g.check.is_held_out_case() != held_out) continue;
      ++sum.checks;
      sum.earned += g.earned;
      sum.possible += g.check.points;
    }
  }
  return sum;
}

nlohmann::json subtotal_json(std::span<const TaskGrade> tasks, bool held_out) {
  const Subtotal sum = subtotal(tasks, held_out);
  return {{"points", round_points(sum.earned)}, {"max", sum.possible}};
}

nlohmann::json check_json(const GradedCheck& g) {
  return {{"check", g.check.id},           {"title", g.check.title},           {"points", g.earned},
          {"max", g.check.points},         {"end", check_end_name(g.run.end)}, {"expected", g.run.outcome.expected},
          {"got", g.run.outcome.got},      {"cause", g.run.outcome.cause},     {"show", g.show},
          {"budget", g.run.outcome.budget}};
}

}  // namespace

// [Note: held-out cases in the student's text]
// A course's held-out cases (--cases) are configurations the public checks do not cover, kept from the students so
// that code fitted to the public checks shows. A submission's text (`grade --submission`) goes back to its student,
// so there a held-out case is its name, its points and whether it lost them: its title, diagnostic, budget and
// "see it" command name its model, W, strategy and options. The JSON, the course's, keeps all of it.
void print_grade(std::ostream& out, const GradeReport& report) {
  out << "fsdplab grade: --impl " << report.impl << ", seed " << report.seed
      << ", on the sim device (deterministic: the same code gets the same points everywhere)\n";
  const bool hide_held_out = report.submission.has_value();
  if (report.submission)
    out << "submission: " << report.submission->path << " (each \"see it\" runs in the student's own tree)\n";
  if (hide_held_out && subtotal(report.tasks, true).checks > 0)
    out << "held-out cases: the course's own configurations, each named with its points (their settings are the "
           "course's)\n";
  for (const TaskGrade& t : report.tasks) {
    const TaskInfo& info = task_info(t.task);
    out << "\ntask " << t.task << (info.bonus ? " (bonus)" : "") << "  " << info.title << "   " << t.impl << ": "
        << t.where << "   " << points_text(t.earned(), t.possible()) << " points\n";
    if (t.not_run) {  // one line, not the same reason under each check
      const NotRunNames names = names_of(t.not_run->end);
      out << "    " << names.label << "  " << indented(t.not_run->reason) << "\n"
          << "               every check scores 0" << names.rest << "\n";
      continue;
    }
    // A task still at its skeleton: one line, not the same TODO under each of its checks (--json keeps them all).
    if (!t.checks.empty() && std::all_of(t.checks.begin(), t.checks.end(), [](const GradedCheck& g) {
          return g.earned == 0 && g.run.outcome.cause == kTodoLeft;
        })) {
      std::string todo = t.checks.front().run.outcome.got;
      if (todo.starts_with("a TODO is left: ")) todo.erase(0, std::string_view("a TODO is left: ").size());
      out << "    TODO LEFT  all " << t.checks.size() << " checks stopped at it: " << indented(todo) << "\n";
      continue;
    }
    Told told;
    for (const GradedCheck& g : t.checks) print_check(out, g, told, hide_held_out);
  }
  out << "\n";
  for (const TaskGrade& t : report.tasks)
    out << "  task " << t.task << "  " << std::left << std::setw(10) << points_text(t.earned(), t.possible()) << " "
        << percent_text(t.earned(), t.possible()) << "\n";
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f", report.seconds);
  out << "total: " << points_text(report.earned(), report.possible()) << " points ("
      << percent_text(report.earned(), report.possible()) << ") in " << seconds << " s\n";
}

void write_grade_json(const std::filesystem::path& path, const GradeReport& report) {
  nlohmann::json tasks = nlohmann::json::array();
  for (const TaskGrade& t : report.tasks) {
    nlohmann::json checks = nlohmann::json::array();
    for (const GradedCheck& g : t.checks) checks.push_back(check_json(g));
    nlohmann::json task = {{"task", t.task},
                           {"title", task_info(t.task).title},
                           {"bonus", task_info(t.task).bonus},
                           {"impl", t.impl},
                           {"where", t.where},
                           {"points", t.earned()},
                           {"max", t.possible()},
                           {"held_out_cases", subtotal_json({&t, 1}, true)},
                           {"checks", checks}};
    if (t.not_run) task[std::string(names_of(t.not_run->end).json_key)] = t.not_run->reason;
    // The student's file this fsdplab compiled and graded (a lab not built was graded as its skeleton: no hash).
    const bool built = !t.not_run || t.not_run->end != CheckEnd::not_built;
    if (t.impl == "student" && built) task["sha256"] = std::string(student_file_sha256(t.task));
    tasks.push_back(std::move(task));
  }
  nlohmann::json j = {{"graded", true},
                      {"fsdplab_commit", report.fsdplab_commit},
                      {"impl", report.impl},
                      {"seed", report.seed},
                      {"points", report.earned()},
                      {"max", report.possible()},
                      {"built_in", subtotal_json(report.tasks, false)},
                      {"held_out_cases", subtotal_json(report.tasks, true)},
                      {"seconds", report.seconds},
                      {"tasks", tasks}};
  if (report.submission)
    j["submission"] = {{"path", report.submission->path}, {"absolute", report.submission->absolute}};
  write_output_file(path, "--json", [&](std::ostream& o) { o << j.dump(2) << "\n"; });
}

void write_refused_grade_json(const std::filesystem::path& path, const GradedSubmission& submission,
                              const std::string& reason) {
  const nlohmann::json j = {{"graded", false},
                            {"reason", reason},
                            {"submission", {{"path", submission.path}, {"absolute", submission.absolute}}}};
  write_output_file(path, "--json", [&](std::ostream& o) { o << j.dump(2) << "\n"; });
}

std::string unsound_grade_json(const std::string& text, const std::vector<int>& tasks) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "it is not JSON";
  if (j.value("graded", false) != true) return "it does not say graded";
  // Sums of points as written (two decimals at most each): equal to a millionth.
  const auto number = [](const nlohmann::json& o, const char* key) {
    const auto it = o.find(key);
    return it != o.end() && it->is_number() ? it->get<double>() : -1.0;
  };
  const auto same = [](double a, double b) { return std::abs(a - b) <= 1e-6; };
  const std::vector<int> expected = selected_tasks(tasks);
  const auto found = j.find("tasks");
  if (found == j.end() || !found->is_array() || found->size() != expected.size())
    return "it holds " + std::to_string(found != j.end() && found->is_array() ? found->size() : 0) + " tasks, not " +
           std::to_string(expected.size());
  double points = 0, max = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const nlohmann::json& t = (*found)[i];
    const std::string task = "task " + std::to_string(expected[i]);
    if (!t.is_object() || t.value("task", 0) != expected[i])
      return "its task " + std::to_string(i + 1) + " is not " + task;
    const auto checks = t.find("checks");
    if (checks == t.end() || !checks->is_array()) return task + " has no checks";
    double task_points = 0, task_max = 0;
    std::map<std::string, double> max_of;
    for (const nlohmann::json& c : *checks) {
      const double earned = c.is_object() ? number(c, "points") : -1, of = c.is_object() ? number(c, "max") : -1;
      if (earned < 0 || of < 0 || earned > of + 1e-9) return task + " has a check whose points are not 0 to its max";
      max_of[c.value("check", std::string())] = of;
      task_points += earned;
      task_max += of;
    }
    for (const Check& c : task_checks(expected[i])) {
      const auto it = max_of.find(c.id);
      if (it == max_of.end() || !same(it->second, c.points))
        return task + "'s check " + c.id + " is missing or not worth its " + std::to_string(c.points) + " points";
    }
    if (!same(number(t, "points"), task_points) || !same(number(t, "max"), task_max))
      return task + "'s points are not the sum of its checks'";
    points += task_points;
    max += task_max;
  }
  if (!same(number(j, "points"), points) || !same(number(j, "max"), max))
    return "its points are not the sum of its tasks'";
  return "";
}

void print_mutants(std::ostream& out, const MutantsReport& report) {
  if (mutant_catalog().empty()) {
    out << "fsdplab grade --mutants: this build has no mutants (a handout leaves them to the course's grader)\n";
    return;
  }
  out << "fsdplab grade --mutants: every known-wrong implementation graded in its own task; each must lose points\n\n";
  out << "| task | mutant | points | caught by | diagnostic |\n|---|---|---|---|---|\n";
  for (const MutantGrade& m : report.mutants) {
    const GradedCheck* by = m.caught_by();
    std::string got = by ? by->run.outcome.got : "";
    if (const std::size_t nl = got.find('\n'); nl != std::string::npos) got.resize(nl);
    if (got.size() > 150) got = got.substr(0, 147) + "...";
    out << "| " << m.mutant.task << " | " << m.mutant.name << " | " << points_text(m.grade.earned(), m.grade.possible())
        << " | " << (by ? by->check.id : "NOT CAUGHT") << " | " << got << " |\n";
  }
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f", report.seconds);
  out << "\ncaught: " << report.caught() << " of " << report.mutants.size() << " mutants in " << seconds << " s: ";
  if (report.caught() == static_cast<int>(report.mutants.size())) {
    out << "all " << report.mutants.size() << " mutants caught\n";
    return;
  }
  out << "NOT CAUGHT:";
  for (const MutantGrade& m : report.mutants)
    if (!m.caught()) out << " " << m.mutant.task << "=mutant:" << m.mutant.name;
  out << "\n";
}

}  // namespace fsdplab::grading
