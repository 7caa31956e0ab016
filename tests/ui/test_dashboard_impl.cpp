// The student's code in the dashboard, headless: --compare impl runs the reference beside the selected
// tasks with the same configuration, an unimplemented task ends its run with the skeleton's message in
// the run's panel while the reference goes on, and step-through breaks on a task's events in one click and
// says what that task's code was supposed to do there.
#include "dashboard_testing.hpp"

#include "app/dashboard/exercise_notes.hpp"

namespace fsdplab::app {
namespace {

SessionSettings compare_impl(int steps, std::string impl) {
  SessionSettings s = tiny_settings(steps);
  s.comparison = Comparison::impl;
  s.fsdp.impl = std::move(impl);
  return s;
}

TEST(DashboardImpl, CompareImplPlansTheReferenceBesideTheSelectedTasksWithOneConfiguration) {
  SessionSettings settings = compare_impl(2, "3=student,6=student");
  settings.fsdp.prefetch = "all";
  const std::vector<SessionSettings::PlannedRun> runs = settings.plan();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].label, "reference");
  EXPECT_EQ(runs[1].label, "student (3, 6)");
  EXPECT_FALSE(runs[0].impl.any_replaced());
  EXPECT_EQ(runs[1].impl, parse_impl("3=student,6=student"));
  for (const auto& p : runs) {
    EXPECT_FALSE(p.sync);
    EXPECT_EQ(p.run.options, runs[0].run.options);
    EXPECT_EQ(p.run.options.mode, OverlapMode::async);
    EXPECT_EQ(p.run.options.prefetch, parse_prefetch("all"));
  }
  EXPECT_EQ(runs[0].run.tasks.forward, &reference_forward());
  EXPECT_NE(runs[1].run.tasks.forward, &reference_forward());
  EXPECT_EQ(runs[1].run.tasks.backward, &reference_backward());  // tasks not named stay the reference's
}

TEST(DashboardImpl, CompareImplRefusesAReferenceOnlyChoiceAndABadImpl) {
  try {
    compare_impl(2, "reference").plan();
    ADD_FAILURE() << "--compare impl with nothing of the student's ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--compare impl runs the reference beside"), std::string::npos) << e.what();
  }
  EXPECT_THROW(compare_impl(2, "3=studnet").plan(), Error);
  EXPECT_THROW(parse_comparison("impls"), Error);
  EXPECT_EQ(parse_comparison("impl"), Comparison::impl);
}

// The skeleton's TODOs throw: that run ends with the message, shown in the Run panel and marked in the
// step-time table, and the reference beside it trains on.
TEST(DashboardImpl, AnUnimplementedTaskEndsOnlyItsRunWithTheSkeletonsMessage) {
  HeadlessImGui imgui;
  Dashboard dashboard(std::make_unique<LiveSession>(compare_impl(3, "3=student")));
  LiveSession& session = *dashboard.session();
  frames_until(imgui, dashboard, [&] { return session.finished(); });
  frames_until(imgui, dashboard, [] { return true; });
  const TraceStore& store = session.store();
  ASSERT_EQ(store.sources().size(), 2u);
  EXPECT_EQ(store.source(0).label, "reference");
  EXPECT_EQ(store.source(1).label, "student (3)");
  EXPECT_EQ(store.source(0).steps.size(), 3u);
  EXPECT_TRUE(store.source(1).steps.empty());
  const std::vector<std::string> errors = session.errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].rfind("student (3): ", 0), 0u) << errors[0];
  // Whichever of the task's methods the engine calls first, the skeleton names it and the exercise.
  EXPECT_NE(errors[0].find("failed: task 3, ForwardTask::"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find(": not implemented yet — see labs/03-forward/README.md (the TODO at "
                           "labs/03-forward/student.cpp:"),
            std::string::npos)
      << errors[0];
  EXPECT_TRUE(session.impl_of(1).replaced(3)) << errors[0];
  EXPECT_FALSE(session.impl_of(0).any_replaced());
  // The step-time table marks the student's run failed (no steps: it would read as slow) and not the reference.
  EXPECT_EQ("student (3): " + store.source(1).failure, errors[0]);
  EXPECT_TRUE(store.source(0).failure.empty());
  const std::vector<StepTimePanel::TableRow>& rows = dashboard.step_times().table_rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_FALSE(rows[0].failed) << rows[0].name;
  EXPECT_TRUE(rows[1].failed) << rows[1].name;
}

TEST(DashboardImpl, TheControlsOfferCompareImplAndAnImplField) {
  HeadlessImGui imgui;
  Dashboard dashboard(std::make_unique<LiveSession>(tiny_settings(1)));
  LiveSession& session = *dashboard.session();
  frames_until(imgui, dashboard, [&] { return session.finished(); });
  ControlsPanel& controls = dashboard.controls();
  EXPECT_GT(controls.impl_field().max.x, controls.impl_field().min.x);  // drawn
  controls.edited().comparison = Comparison::impl;
  controls.edited().fsdp.impl = "reference";
  frames_until(imgui, dashboard, [] { return true; });
  const ControlsPanel::Rect restart = controls.restart_button();
  imgui.click(restart.min, restart.max, [&] { dashboard.frame(); });
  EXPECT_NE(controls.message().find("--compare impl"), std::string::npos) << controls.message();
  controls.edited().fsdp.impl = "3=student";
  frames_until(imgui, dashboard, [] { return true; });
  const ControlsPanel::Rect again = controls.restart_button();
  imgui.click(again.min, again.max, [&] { dashboard.frame(); });
  EXPECT_TRUE(controls.message().empty()) << controls.message();
  ASSERT_EQ(session.store().sources().size(), 2u);
  EXPECT_EQ(session.store().source(1).label, "student (3)");
  EXPECT_EQ(session.settings().fsdp.impl, "3=student");
}

TEST(DashboardImpl, BreakOnMyTasksInOneClickChoosesTheFocusRunsStudentTasks) {
  HeadlessImGui imgui;
  SessionSettings settings = compare_impl(1000, "3=student,6=student");
  settings.steps_per_second = 1;  // the reference's run goes on while the student's has failed
  Dashboard dashboard(std::make_unique<LiveSession>(settings));
  LiveSession& session = *dashboard.session();
  RunControl& control = session.control();
  ASSERT_EQ(control.focus().first, 1);  // the student's run
  control.set_break_on(FsdpEventKind::post_forward, true);
  // Its error shown in the Run panel first: the panels below have moved down by then.
  frames_until(imgui, dashboard, [&] { return session.runs()[1]->finished(); });
  frames_until(imgui, dashboard, [] { return true; });
  const StepThroughPanel::Rect mine = dashboard.step_through().my_tasks_button();
  imgui.click(mine.min, mine.max, [&] { dashboard.frame(); });
  EXPECT_TRUE(control.breaking());
  for (int n = 1; n <= kTaskCount; ++n) EXPECT_EQ(control.breaks_on_task(n), n == 3 || n == 6) << n;
  EXPECT_FALSE(control.breaks_on(FsdpEventKind::post_forward));  // every event of those tasks, any kind
  control.stop();
}

TEST(DashboardImpl, TheTaskButtonOffersTheStudentsOwnTaskUntilOneIsChosen) {
  HeadlessImGui imgui;
  SessionSettings settings = compare_impl(1000, "5=student");
  settings.steps_per_second = 1;  // the reference's run goes on while the student's has failed
  Dashboard dashboard(std::make_unique<LiveSession>(settings));
  LiveSession& session = *dashboard.session();
  RunControl& control = session.control();
  // The skeleton's TODO ends the student's run, and its error in the Run panel moves the panels below: the
  // layout is settled only once that has happened, whenever the run gets there.
  frames_until(imgui, dashboard, [&] { return session.runs()[1]->finished(); });
  control.pause();
  frames_until(imgui, dashboard, [] { return true; });
  const StepThroughPanel::Rect task = dashboard.step_through().task_button();
  imgui.click(task.min, task.max, [&] { dashboard.frame(); });
  for (int n = 1; n <= kTaskCount; ++n) EXPECT_EQ(control.breaks_on_task(n), n == 5) << n;
  dashboard.step_through().set_chosen_task(4);  // a choice outlives the default
  frames_until(imgui, dashboard, [] { return true; });
  const StepThroughPanel::Rect same = dashboard.step_through().task_button();
  EXPECT_EQ(same.min.y, task.min.y);
  imgui.click(same.min, same.max, [&] { dashboard.frame(); });
  for (int n = 1; n <= kTaskCount; ++n) EXPECT_EQ(control.breaks_on_task(n), n == 4) << n;
  control.stop();
}

TEST(DashboardImpl, BreakOnAChosenTaskStopsAtThatTasksEventsOnly) {
  HeadlessImGui imgui;
  Dashboard dashboard(std::make_unique<LiveSession>(tiny_settings(1000)));
  LiveSession& session = *dashboard.session();
  RunControl& control = session.control();
  control.set_focus(1, 0);
  // A reference run: nothing of the student's, so the one-click button is off and a task is chosen instead.
  dashboard.step_through().set_chosen_task(4);
  EXPECT_THROW(dashboard.step_through().set_chosen_task(10), Error);
  control.pause();
  frames_until(imgui, dashboard, [] { return true; });
  const StepThroughPanel::Rect task = dashboard.step_through().task_button();
  imgui.click(task.min, task.max, [&] { dashboard.frame(); });
  EXPECT_TRUE(control.breaks_on_task(4));
  EXPECT_FALSE(control.breaks_on_task(3));
  control.resume();
  for (int stop = 0; stop < 3; ++stop) {
    frames_until(imgui, dashboard, [&] { return control.paused() && control.last_break(); });
    const FsdpEvent at = *control.last_break();
    EXPECT_EQ(at.task, 4) << fsdp_event_name(at.kind) << " " << at.code;
    EXPECT_NE(at.code.find("(in the class at engine/fsdp/backward_reference.cpp:"), std::string::npos) << at.code;
    control.resume();
  }
  control.stop();
}

TEST(ExerciseNotes, EveryTaskAndKindHasAParagraphPointingAtItsLab) {
  for (int task = 1; task <= kTaskCount; ++task) {
    for (std::size_t k = 0; k < kFsdpEventKindCount; ++k) {
      const std::string note = exercise_note(task, static_cast<FsdpEventKind>(k));
      const std::string readme = "Exercise: " + std::string(task_info(task).lab) + "/README.md";
      ASSERT_GT(note.size(), readme.size() + 20) << task << " " << k;
      EXPECT_EQ(note.substr(note.size() - readme.size()), readme) << note;
    }
  }
  // The exact seam's words, not only the task's: wait_for_unshard before the forward, the choice to free after.
  EXPECT_NE(exercise_note(3, FsdpEventKind::pre_forward).find("wait_for_unshard"), std::string::npos);
  EXPECT_NE(exercise_note(3, FsdpEventKind::post_forward).find("reshard_after_forward"), std::string::npos);
  EXPECT_NE(exercise_note(4, FsdpEventKind::post_backward).find("divided by W"), std::string::npos);
  EXPECT_EQ(exercise_note(0, FsdpEventKind::collective_done), "");
  EXPECT_EQ(task_heading(3), "Task 3 \u00b7 forward: all-gather before, free after");
  EXPECT_EQ(task_heading(0), "outside the tasks");
}

}  // namespace
}  // namespace fsdplab::app
