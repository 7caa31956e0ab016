#include "app/dashboard/step_through_panel.hpp"

#include <array>
#include <cstdio>
#include <string>

namespace fsdplab::app {

const char* task_title(int task) {
  static constexpr std::array<const char*, 8> titles = {
      "outside the tasks",
      "Task 1 · meta-device init",
      "Task 2 · FlatParameter",
      "Task 3 · forward: all-gather and reshard",
      "Task 4 · backward: all-gather and reduce-scatter",
      "Task 5 · sharded optimizer",
      "Task 6 · prefetch and overlap",
      "Task 7 · integration",
  };
  return task >= 1 && task <= 7 ? titles[static_cast<std::size_t>(task)] : titles[0];
}

namespace {

constexpr std::array<FsdpEventKind, kFsdpEventKindCount> kKinds = {
    FsdpEventKind::pre_forward,      FsdpEventKind::post_forward,    FsdpEventKind::pre_backward,
    FsdpEventKind::post_backward,    FsdpEventKind::collective_issued, FsdpEventKind::collective_done,
    FsdpEventKind::optimizer_step};

std::string headline(const FsdpEvent& e) {
  char text[256];
  std::snprintf(text, sizeof text, "rank %d, step %d: %s%s%s", e.rank, e.step, std::string(fsdp_event_name(e.kind)).c_str(),
                e.unit >= 0 ? " of unit " : "", e.unit >= 0 ? (std::to_string(e.unit) + " '" + e.unit_name + "'").c_str() : "");
  return text;
}

void describe(const FsdpEvent& e) {
  ImGui::TextUnformatted(headline(e).c_str());
  ImGui::TextColored(ImVec4(1.0f, 0.85f, 0.3f, 1), "%s", task_title(e.task));
  ImGui::TextWrapped("code: %s", e.code.c_str());
  ImGui::TextWrapped("%s", e.what.c_str());
  if (e.kind == FsdpEventKind::collective_done)
    ImGui::Text("on the device: %.3f .. %.3f ms (%.1f us)", ns_to_ms(e.device_begin), ns_to_ms(e.device_end),
                ns_to_us(e.device_end - e.device_begin));
  ImGui::Text("host time %.3f ms", ns_to_ms(e.host_time));
}

}  // namespace

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
  int source = focus_source, rank = focus_rank;
  ImGui::PushItemWidth(110);
  if (ImGui::BeginCombo("run", store.sources().empty() ? "" : store.source(source).label.c_str())) {
    for (int s = 0; s < static_cast<int>(store.sources().size()); ++s)
      if (ImGui::Selectable(store.source(s).label.c_str(), s == source)) source = s;
    ImGui::EndCombo();
  }
  ImGui::SameLine();
  ImGui::SliderInt("rank", &rank, 0, std::max(0, session.settings().world - 1));
  ImGui::PopItemWidth();
  if (source != focus_source || rank != focus_rank) control.set_focus(source, rank);

  if (ImGui::Button(control.paused() ? "Continue" : "Pause")) {
    if (control.paused()) {
      control.resume();
    } else {
      control.pause();
    }
  }
  continue_ = {ImGui::GetItemRectMin(), ImGui::GetItemRectMax()};
  ImGui::SameLine();
  if (ImGui::Button("Step to next event")) control.step_once();
  step_ = {ImGui::GetItemRectMin(), ImGui::GetItemRectMax()};

  // ---- what just happened -----------------------------------------------------------------------
  ImGui::Separator();
  const FsdpEventLog& log = session.log();
  if (const std::optional<FsdpEvent> stop = control.last_break(); stop && control.paused()) {
    ImGui::TextColored(ImVec4(1, 0.5f, 0.3f, 1), "stopped at:");
    describe(*stop);
  } else if (source < static_cast<int>(store.sources().size())) {
    if (const FsdpEvent* latest = log.latest(source, rank)) {
      ImGui::TextDisabled(control.paused() ? "paused; the focus rank's latest event:" : "latest event of the focus rank:");
      describe(*latest);
    } else {
      ImGui::TextDisabled("no FSDP event from this rank yet");
    }
  }

  // ---- the run's latest events, oldest first ------------------------------------------------------
  ImGui::Separator();
  if (source >= static_cast<int>(store.sources().size())) return;
  ImGui::TextDisabled("%zu FSDP events from %s so far; the latest:", log.total(source), store.source(source).label.c_str());
  if (ImGui::BeginChild("fsdp_events", ImVec2(0, 0), true)) {
    const auto& history = log.history(source);
    ImGuiListClipper clipper;
    clipper.Begin(static_cast<int>(history.size()));
    while (clipper.Step()) {
      for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i) {
        const FsdpEvent& e = history[static_cast<std::size_t>(i)];
        ImGui::TextUnformatted(headline(e).c_str());
        if (ImGui::IsItemHovered()) {
          ImGui::BeginTooltip();
          describe(e);
          ImGui::EndTooltip();
        }
      }
    }
    if (!control.paused()) ImGui::SetScrollHereY(1.0f);  // follow the newest while running
  }
  ImGui::EndChild();
}

}  // namespace fsdplab::app
