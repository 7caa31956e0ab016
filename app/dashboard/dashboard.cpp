#include "app/dashboard/dashboard.hpp"

#include <algorithm>

#include "app/dashboard/palette.hpp"
#include "app/dashboard/printable_text.hpp"
#include "app/dashboard/remote_panel.hpp"
#include "engine/train/model_factory.hpp"

namespace fsdplab::app {

Dashboard::Dashboard(std::unique_ptr<LiveSession> session) : session_(std::move(session)) {}

Dashboard::Dashboard(std::unique_ptr<RemoteSession> remote) : remote_(std::move(remote)) {}

Dashboard::Dashboard(Replay replay) : replay_(std::move(replay)) {
  timeline_.set_following(false);
  timeline_.set_view(replay_.store.first_time(), std::max(replay_.store.last_time(), replay_.store.first_time() + 1));
}

const TraceStore& Dashboard::store() const {
  return session_ ? session_->store() : remote_ ? remote_->store() : replay_.store;
}

void Dashboard::frame() {
  if (session_) session_->drain();
  if (remote_) remote_->drain();
  handle_keys();
  const ImGuiIO& io = ImGui::GetIO();
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(io.DisplaySize);
  constexpr ImGuiWindowFlags kFlags = ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove |
                                      ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoBringToFrontOnFocus;
  ImGui::Begin("fsdplab", nullptr, kFlags);
  draw_title();
  draw_left();
  ImGui::SameLine();
  draw_right();
  ImGui::End();
}

// ---- keyboard: space pauses and runs, s or the right arrow steps -----------------------------------

void Dashboard::handle_keys() {
  // Finished runs have nothing to pause or step (the Run panel's buttons say so too).
  if (!session_ || ImGui::GetIO().WantTextInput || session_->finished()) return;
  RunControl& control = session_->control();
  if (ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Space), false)) {
    if (control.paused()) {
      control.resume();
    } else {
      control.pause();
    }
  }
  // GLFW's key codes for letters are their upper-case ASCII codes, and 1.86's GLFW backend indexes
  // io.KeysDown by them.
  if (ImGui::IsKeyPressed('S', false) || ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_RightArrow), false))
    control.step_once();
}

// ---- layout ----------------------------------------------------------------------------------------

void Dashboard::draw_title() { title_lines_ = text_wrapped_at_spaces(title_text()); }

std::string Dashboard::title_text() const {
  if (session_) {
    const SessionSettings& s = session_->settings();
    const std::string nodes = s.nodes.ranks_per_node > 0 ? " · " + s.nodes.describe("") : "";
    // Only gpt2 and llama have named sizes; a preset left over from another model says nothing about mlp or toy.
    const std::string model = s.model + (model_has_named_sizes(s.model) ? " " + s.preset : "");
    // On sim the preset is the device simulated; on cuda the GPU is real (where() names it) and the preset only gives
    // the cost model's figures and the emulated link's default.
    const std::string device = s.device == "sim" ? s.device_preset : "cost model " + s.device_preset;
    const std::string link = s.link_preset.empty() ? "" : " + " + s.link_preset;
    return "fsdplab · " + model + " · W=" + std::to_string(s.world) + " · " + device + link + nodes + " · " +
           std::string(comparison_name(s.comparison)) + " · impl: " + s.fsdp.impl + " · " + session_->where();
  }
  if (remote_) {
    return "fsdplab gui --listen " + remote_->listener().address() + " · " +
           std::to_string(remote_->store().sources().size()) + " run(s) · " +
           std::to_string(remote_->store().event_count()) + " events";
  }
  return "fsdplab view · " + std::to_string(replay_.files.size()) + " trace file(s) · " +
         std::to_string(replay_.store.event_count()) + " events";
}

void Dashboard::draw_left() {
  ImGui::BeginChild("left", ImVec2(390, 0), true);
  if (session_) {
    if (ImGui::CollapsingHeader("Run", ImGuiTreeNodeFlags_DefaultOpen)) controls_.draw(*session_);
    if (ImGui::CollapsingHeader("Step-through", ImGuiTreeNodeFlags_DefaultOpen)) step_through_.draw(*session_);
  } else if (remote_) {
    draw_remote_panel(*remote_);
  } else {
    ImGui::TextUnformatted("Replaying:");
    for (const std::string& file : replay_.files) ImGui::BulletText("%s", file.c_str());
    if (!replay_.errors.empty()) {
      ImGui::Separator();
      ImGui::PushStyleColor(ImGuiCol_Text, kFailedColor);
      for (const std::string& error : replay_.errors) text_wrapped_at_spaces(error);
      ImGui::PopStyleColor();
    }
    ImGui::Separator();
    text_wrapped_at_spaces(
        "A trace holds what the devices did, not the FSDP events: step-through and the "
        "FlatParameter map need a live run (fsdplab gui).");
  }
  ImGui::EndChild();
}

void Dashboard::draw_right() {
  ImGui::BeginChild("right", ImVec2(0, 0), false);
  const TraceStore& trace = store();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  ImGui::BeginChild("timeline_area", ImVec2(0, avail.y * 0.52f), true);
  timeline_.draw(trace);
  ImGui::EndChild();

  const float below = ImGui::GetContentRegionAvail().y;
  const float width = ImGui::GetContentRegionAvail().x;
  ImGui::BeginChild("memory_area", ImVec2(width * 0.36f, below), true);
  text_wrapped_at_spaces("Memory per rank (ledger by tag; yellow: the analytic expectation)");
  const std::vector<std::optional<TagBytes>> none(trace.sources().size());
  const auto& expected = session_ ? session_->expected_memory() : none;
  const SimTime now = std::min(timeline_.view_end(), trace.last_time());
  // --compare impl: the reference is the first run (SessionSettings::plan), the one the other's tag peaks are held to.
  const std::optional<int> reference =
      session_ && session_->settings().comparison == Comparison::impl && !session_->runs().empty()
          ? std::optional<int>(session_->runs().front()->source())
          : std::nullopt;
  memory_.draw(trace, expected, timeline_.view_begin(), timeline_.view_end(), now, reference);
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("steps_area", ImVec2(width * 0.32f, below), true);
  text_wrapped_at_spaces("Step times (" + clock_kind(trace, step_time_unit(trace).name) + ")");
  // A dry run computes no losses to compare.
  step_times_.draw(trace, session_ && session_->settings().dry_run ? std::nullopt : reference);
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("map_area", ImVec2(0, below), true);
  text_wrapped_at_spaces("FlatParameter map: units x ranks");
  if (session_) {
    const int focus = session_->control().focus().first;  // the step-through's run
    const std::string run = focus < static_cast<int>(trace.sources().size()) ? trace.source(focus).label : "";
    flat_parameters_.draw(session_->map(focus), session_->log(), focus, run);
  } else {
    ImGui::TextDisabled("needs a live run");
  }
  ImGui::EndChild();
  ImGui::EndChild();
}

}  // namespace fsdplab::app
