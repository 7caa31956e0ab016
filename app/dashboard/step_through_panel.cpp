#include "app/dashboard/step_through_panel.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>

#include "app/dashboard/exercise_notes.hpp"
#include "app/dashboard/printable_text.hpp"
#include "app/dashboard/timeline_format.hpp"
#include "engine/fsdp/sharding.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab::app {

namespace {

constexpr float kTooltipEms = 40;  // an event's tooltip is this many font sizes wide at most

constexpr std::array<FsdpEventKind, kFsdpEventKindCount> kKinds = {
    FsdpEventKind::pre_forward,      FsdpEventKind::post_forward,    FsdpEventKind::pre_backward,
    FsdpEventKind::post_backward,    FsdpEventKind::collective_issued, FsdpEventKind::collective_done,
    FsdpEventKind::optimizer_step};

std::string headline(const FsdpEvent& e) {
  char text[256];
  // Steps numbered from 1, as `fsdplab run` counts them; FsdpEvent::step is the index from 0.
  std::snprintf(text, sizeof text, "rank %d, step %d: %s%s%s", e.rank, e.step + 1,
                std::string(fsdp_event_name(e.kind)).c_str(), e.unit >= 0 ? " of unit " : "",
                e.unit >= 0 ? (std::to_string(e.unit) + " '" + e.unit_name + "'").c_str() : "");
  return text;
}

// The student's code lives in labs/ (FsdpTask::where() names the implementing class's file and line).
bool students_code(const FsdpEvent& e) { return e.code.find("the class at labs/") != std::string::npos; }

// Wrapped at spaces (never inside a unit's name, a file's path or a number) within `width` pixels, or the
// panel's width where 0.
void describe(const FsdpEvent& e, float width = 0) {
  text_wrapped_at_spaces(printable(headline(e)), width);
  ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1.0f, 0.85f, 0.3f, 1));
  text_wrapped_at_spaces(printable(task_heading(e.task)), width);
  ImGui::PopStyleColor();
  text_wrapped_at_spaces(printable("code: " + e.code + (students_code(e) ? "  \u2190 your code" : "")), width);
  text_wrapped_at_spaces(printable(e.what), width);
  if (const std::string note = exercise_note(e.task, e.kind); !note.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(0.6f, 0.8f, 1.0f, 1));
    text_wrapped_at_spaces(printable(note), width);
    ImGui::PopStyleColor();
  }
  // In ms, or in s from 10 s up (time_unit_for), as the other panels write times.
  if (e.kind == FsdpEventKind::collective_done) {
    const TimeUnit unit = time_unit_for(ns_to_ms(e.device_end));
    ImGui::Text("on the device: %s .. %s (%s)", unit.number(ns_to_ms(e.device_begin)).c_str(),
                unit.text(ns_to_ms(e.device_end)).c_str(), format_duration(e.device_end - e.device_begin).c_str());
  }
  ImGui::Text("host time %s", time_unit_for(ns_to_ms(e.host_time)).text(ns_to_ms(e.host_time)).c_str());
}

// Breaks on every event of the tasks `tasks` (and of no kind in particular), from now on.
void break_on_tasks(RunControl& control, const std::array<bool, kTaskCount>& tasks) {
  for (FsdpEventKind kind : kKinds) control.set_break_on(kind, false);
  for (int n = 1; n <= kTaskCount; ++n) control.set_break_on_task(n, tasks[static_cast<std::size_t>(n - 1)]);
  control.set_breaking(true);
}

std::string task_list(const std::array<bool, kTaskCount>& tasks) {
  std::string list;
  for (int n = 1; n <= kTaskCount; ++n)
    if (tasks[static_cast<std::size_t>(n - 1)]) list += (list.empty() ? "" : ", ") + std::to_string(n);
  return list;
}

}  // namespace

std::optional<StepThroughPanel::StopKey> StepThroughPanel::stop_key(const std::optional<FsdpEvent>& stop) {
  if (!stop) return std::nullopt;
  return StopKey{stop->rank, stop->step, static_cast<int>(stop->kind), stop->unit, stop->host_time};
}

void StepThroughPanel::set_chosen_task(int task) {
  check(task >= 1 && task <= kTaskCount, "step-through: task ", task, "; the lab's tasks are numbered 1 to ",
        kTaskCount);
  check(task_reports_events(task), "step-through: ", why_task_reports_no_events(task), "; no event to stop at");
  chosen_task_ = task;
}

void StepThroughPanel::draw(LiveSession& session) {
  RunControl& control = session.control();
  const TraceStore& store = session.store();
  bool breaking = control.breaking();
  if (ImGui::Checkbox("break on FSDP events", &breaking)) control.set_breaking(breaking);
  int column = 0;
  for (FsdpEventKind kind : kKinds) {
    bool on = control.breaks_on(kind);
    if (column++ % 2) ImGui::SameLine(180);
    if (ImGui::Checkbox(std::string(fsdp_event_name(kind)).c_str(), &on)) control.set_break_on(kind, on);
  }
  // Which run and rank breaks; the others stop with it (they wait in collectives or at their next event).
  const auto [focus_source, focus_rank] = control.focus();

  // ---- tasks: the student's in one click, or one chosen here ---------------------------------------
  std::array<bool, kTaskCount> breaking_tasks{};
  for (int n = 1; n <= kTaskCount; ++n) breaking_tasks[static_cast<std::size_t>(n - 1)] = control.breaks_on_task(n);
  // The tasks that report events in the focus run: tasks 1, 2 and 9 have none of their own to stop at, task 6 none
  // where it gathers nothing ahead (SYNC, say), task 8 none without replica groups.
  const auto reports_events = [&](int task) {
    if (focus_source >= static_cast<int>(session.runs().size())) return task_reports_events(task);
    const FsdpRun& focus = session.runs()[static_cast<std::size_t>(focus_source)]->run();
    return task_reports_events(task, focus.options, focus.run.world);
  };
  const ImplChoice mine = session.impl_of(focus_source);
  std::array<bool, kTaskCount> my_tasks = mine.replaced_tasks();
  for (int n = 1; n <= kTaskCount; ++n) my_tasks[static_cast<std::size_t>(n - 1)] &= reports_events(n);
  const bool any_mine = !task_list(my_tasks).empty();
  if (!any_mine) ImGui::BeginDisabled();
  if (ImGui::Button(("Break on my tasks' events" + (any_mine ? " (" + task_list(my_tasks) + ")" : "")).c_str()))
    break_on_tasks(control, my_tasks);
  my_tasks_ = {ImGui::GetItemRectMin(), ImGui::GetItemRectMax()};
  if (!any_mine) ImGui::EndDisabled();
  if (!any_mine && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip(
        mine.any_replaced()
            ? "your tasks report no events of their own in this run (tasks 3 to 8 do; 6 under ASYNC only, 8 "
              "with replica groups); choose a task below"
            : "this run uses the reference for every task; run with --impl 3=student (or choose a "
              "task below)");
  // Until one is chosen in the list: a break armed on one task (--break task:8), else the student's first task
  // (lab 5's student sees task 5 offered), else task 3, the first that reports events.
  const auto task_number = [](const std::array<bool, kTaskCount>& tasks) {
    return static_cast<int>(std::find(tasks.begin(), tasks.end(), true) - tasks.begin()) + 1;
  };
  const int offered = std::count(breaking_tasks.begin(), breaking_tasks.end(), true) == 1 ? task_number(breaking_tasks)
                      : any_mine                                                          ? task_number(my_tasks)
                                                                                          : 3;
  const int chosen = chosen_task_.value_or(offered);
  if (ImGui::Button(("Break on task " + std::to_string(chosen) + "'s events").c_str())) {
    std::array<bool, kTaskCount> one{};
    one[static_cast<std::size_t>(chosen - 1)] = true;
    break_on_tasks(control, one);
  }
  task_ = {ImGui::GetItemRectMin(), ImGui::GetItemRectMax()};
  ImGui::SameLine();
  ImGui::PushItemWidth(-FLT_MIN);  // the rest of the line: as much of the task's heading as fits
  if (ImGui::BeginCombo("##task", combo_preview(task_heading(chosen)).c_str())) {
    for (int n = 1; n <= kTaskCount; ++n)
      if (reports_events(n) && ImGui::Selectable(task_heading(n).c_str(), n == chosen)) chosen_task_ = n;
    ImGui::EndCombo();
  }
  ImGui::PopItemWidth();
  if (const std::string tasks = task_list(breaking_tasks); !tasks.empty()) {
    ImGui::TextDisabled("breaking on task %s's events%s", tasks.c_str(),
                        control.breaking() ? "" : " (breaking is off)");
    ImGui::SameLine();
    if (ImGui::SmallButton("any task")) break_on_tasks(control, {});
  }

  int source = focus_source, rank = focus_rank;
  ImGui::PushItemWidth(110);
  if (ImGui::BeginCombo("run", store.sources().empty() ? "" : combo_preview(store.source(source).label).c_str())) {
    for (int s = 0; s < static_cast<int>(store.sources().size()); ++s)
      if (ImGui::Selectable(store.source(s).label.c_str(), s == source)) source = s;
    ImGui::EndCombo();
  }
  ImGui::SameLine();
  ImGui::SliderInt("rank", &rank, 0, std::max(0, session.settings().world - 1));
  ImGui::PopItemWidth();
  if (source != focus_source || rank != focus_rank) control.set_focus(source, rank);

  // A stop scrolls the left column once, to these buttons and what stopped under them: the Run panel above is long,
  // and what stopped is what the student looks for. Until the next stop, the scrolling is the student's.
  if (const std::optional<StopKey> key = stop_key(control.last_break()); key && control.paused()) {
    if (key != scrolled_to_) ImGui::SetScrollHereY(0.0f);
    scrolled_to_ = key;
  }

  // Finished runs have nothing left to pause or step: the Run panel's "Run again" starts them anew.
  const bool finished = session.finished();
  ImGui::BeginDisabled(finished);
  if (ImGui::Button(control.paused() ? "Continue" : "Pause")) {
    if (control.paused()) {
      control.resume();
    } else {
      control.pause();
    }
  }
  ImGui::SameLine();
  if (ImGui::Button("Step to next event")) control.step_once();
  step_ = {ImGui::GetItemRectMin(), ImGui::GetItemRectMax()};
  ImGui::EndDisabled();
  if (finished && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("the runs have finished: \"Run again\" in the Run panel starts them anew");

  // ---- what just happened -----------------------------------------------------------------------
  ImGui::Separator();
  const FsdpEventLog& log = session.log();
  // A break that never came: the runs ended first, most often at an error (a race) before the task's first event,
  // where the student expected to step through (`--break task:5` of a task whose gathers race the update).
  never_stopped_.clear();
  if (finished && control.breaking() && !control.last_break())
    never_stopped_ = session.errors().empty()
                         ? "no break: the runs finished without the focus rank reaching an event it breaks at"
                         : "no break: an error ended the runs before the focus rank reached an event it breaks at "
                           "(the Run panel says which; the timeline shows where)";
  if (!never_stopped_.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1, 0.5f, 0.3f, 1));
    text_wrapped_at_spaces(never_stopped_);
    ImGui::PopStyleColor();
  }
  if (const std::optional<FsdpEvent> stop = control.last_break(); stop && control.paused()) {
    ImGui::TextColored(ImVec4(1, 0.5f, 0.3f, 1), "stopped at:");
    describe(*stop);
  } else if (source < static_cast<int>(store.sources().size())) {
    if (const FsdpEvent* latest = log.latest(source, rank)) {
      ImGui::TextDisabled(control.paused() ? "paused; the focus rank's latest event:"
                                           : "latest event of the focus rank:");
      describe(*latest);
    } else {
      ImGui::TextDisabled("no FSDP event from this rank yet");
    }
  }

  // ---- the run's latest events, oldest first ------------------------------------------------------
  ImGui::Separator();
  if (source >= static_cast<int>(store.sources().size())) return;
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  text_wrapped_at_spaces(std::to_string(log.total(source)) + " FSDP events from " + store.source(source).label +
                         " so far; the latest:");
  ImGui::PopStyleColor();
  // The rest of the panel, and at least kEventRows rows: where the panel is full, it scrolls to the list
  // rather than giving it no height.
  const float height = std::max(ImGui::GetContentRegionAvail().y, ImGui::GetTextLineHeightWithSpacing() * kEventRows +
                                                                      ImGui::GetStyle().WindowPadding.y * 2);
  if (ImGui::BeginChild("fsdp_events", ImVec2(0, height), true)) {
    const auto& history = log.history(source);
    ImGuiListClipper clipper;
    clipper.Begin(static_cast<int>(history.size()));
    while (clipper.Step()) {
      for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i) {
        const FsdpEvent& e = history[static_cast<std::size_t>(i)];
        ImGui::TextUnformatted(elided(headline(e), ImGui::GetContentRegionAvail().x).c_str());  // whole below
        if (ImGui::IsItemHovered()) {
          ImGui::BeginTooltip();
          describe(e, ImGui::GetFontSize() * kTooltipEms);
          ImGui::EndTooltip();
        }
      }
    }
    // Follow the newest while running, and go to it once at each stop (the run may have got there between frames).
    const std::optional<StopKey> key = stop_key(control.last_break());
    if (!control.paused() || (key && key != events_scrolled_to_)) ImGui::SetScrollHereY(1.0f);
    if (control.paused()) events_scrolled_to_ = key;
  }
  ImGui::EndChild();
  events_ = {ImGui::GetItemRectMin(), ImGui::GetItemRectMax()};
}

}  // namespace fsdplab::app
