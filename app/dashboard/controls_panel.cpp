#include "app/dashboard/controls_panel.hpp"

#include <array>
#include <string_view>
#include <vector>

#include "app/dashboard/device_list.hpp"
#include "engine/nn/gpt2_model.hpp"
#include "engine/nn/llama_model.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab::app {
namespace {

// A combo over `names` editing `value`; true when it changed.
bool combo(const char* label, std::string& value, const std::vector<std::string>& names) {
  bool changed = false;
  if (ImGui::BeginCombo(label, value.empty() ? "(default)" : value.c_str())) {
    for (const std::string& name : names) {
      const bool selected = name == value;
      if (ImGui::Selectable(name.empty() ? "(default)" : name.c_str(), selected)) {
        changed = value != name;
        value = name;
      }
    }
    ImGui::EndCombo();
  }
  return changed;
}

std::vector<std::string> strings(const std::vector<std::string_view>& views) {
  return {views.begin(), views.end()};
}

ControlsPanel::Rect last_item() { return {ImGui::GetItemRectMin(), ImGui::GetItemRectMax()}; }

void error_text(const std::string& text) {
  ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1, 0.35f, 0.35f, 1));
  ImGui::TextWrapped("%s", text.c_str());
  ImGui::PopStyleColor();
}

}  // namespace

void ControlsPanel::draw(LiveSession& session) {
  if (!initialised_) {
    edited_ = session.settings();
    devices_ = available_devices();
    initialised_ = true;
  }
  RunControl& control = session.control();
  const TraceStore& store = session.store();

  // ---- run, pause, step ------------------------------------------------------------------------
  if (control.paused()) {
    if (ImGui::Button("Run  ")) control.resume();
  } else if (ImGui::Button("Pause")) {
    control.pause();
  }
  pause_ = last_item();
  ImGui::SameLine();
  if (ImGui::Button("Step")) control.step_once();
  step_ = last_item();
  ImGui::SameLine();
  ImGui::TextDisabled("space: pause/run, s or right arrow: step");
  for (const auto& run : session.runs()) {
    const TraceSource& source = store.source(run->source());
    const char* state = run->finished() ? "finished" : control.paused() ? "paused" : "running";
    if (source.steps.empty()) {
      ImGui::Text("%-6s %s, no step done yet", source.label.c_str(), state);
    } else {
      const StepTime& last = source.steps.back();
      ImGui::Text("%-6s %s, step %d/%d: %.3f ms, loss %.4f", source.label.c_str(), state, last.step + 1,
                  run->run().run.steps, ns_to_ms(last.duration()), last.loss);
    }
  }
  for (const std::string& error : session.errors()) error_text(error);

  // ---- what to run -----------------------------------------------------------------------------
  ImGui::Separator();
  SessionSettings& s = edited_;
  ImGui::PushItemWidth(190);
  if (combo("model", s.model, {"gpt2", "llama", "mlp", "toy"}))
    s.preset = s.model == "gpt2" || s.model == "llama" ? "test-tiny" : "";
  if (s.model == "gpt2") combo("preset", s.preset, strings(gpt2_preset_names()));
  if (s.model == "llama") combo("preset", s.preset, strings(llama_preset_names()));
  ImGui::SliderInt("world size", &s.world, 1, 8);
  std::vector<std::string> devices = PresetCatalog::builtin().device_names();
  combo("device", s.device_preset, devices);
  std::vector<std::string> links = PresetCatalog::builtin().link_names();
  links.insert(links.begin(), "");
  combo("link", s.link_preset, links);
  constexpr std::array comparisons = {Comparison::side_by_side, Comparison::sync_only, Comparison::async_only,
                                      Comparison::ab};
  if (ImGui::BeginCombo("compare", std::string(comparison_name(s.comparison)).c_str())) {
    for (Comparison c : comparisons)
      if (ImGui::Selectable(std::string(comparison_name(c)).c_str(), c == s.comparison)) s.comparison = c;
    ImGui::EndCombo();
  }
  if (s.comparison == Comparison::ab) ImGui::SliderInt("steps per block", &s.ab_block, 1, 20);
  combo("prefetch", s.prefetch, {"none", "forward", "backward-pre", "backward-post", "all"});
  combo("strategy", s.strategy, {"full", "grad_op", "hybrid", "no_shard", "zero1", "zero2"});
  // PyTorch's reshard_after_forward=False is SHARD_GRAD_OP: one setting, shown both ways.
  bool reshard = s.strategy != "grad_op";
  const bool reshard_applies = s.strategy == "full" || s.strategy == "grad_op";
  if (!reshard_applies) ImGui::BeginDisabled();
  if (ImGui::Checkbox("reshard after forward", &reshard)) s.strategy = reshard ? "full" : "grad_op";
  if (!reshard_applies) ImGui::EndDisabled();
  combo("precision", s.precision, {"f32", "bf16"});
  ImGui::InputInt("steps", &s.steps);
  ImGui::Checkbox("dry run (time and memory only)", &s.dry_run);
  // Pacing applies at once: it only changes how fast the host runs, never what the runs compute.
  float pace = static_cast<float>(s.steps_per_second);
  if (ImGui::SliderFloat("steps / s (0: unpaced)", &pace, 0, 30, "%.1f")) {
    s.steps_per_second = pace;
    control.set_steps_per_second(pace);
  }
  ImGui::PopItemWidth();
  if (ImGui::Button("Restart with these settings")) {
    try {
      session.restart(s);
      message_.clear();
    } catch (const Error& e) {
      message_ = e.what();
    }
  }
  restart_ = last_item();
  if (!message_.empty()) error_text("not restarted: " + message_);
  if (ImGui::TreeNode("Devices")) {
    for (const std::string& line : devices_) ImGui::TextUnformatted(line.c_str());
    ImGui::TextDisabled("(the dashboard's runs use the sim device)");
    ImGui::TreePop();
  }
}

}  // namespace fsdplab::app
