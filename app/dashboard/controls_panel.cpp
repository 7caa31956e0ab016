#include "app/dashboard/controls_panel.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "app/dashboard/device_list.hpp"
#include "app/dashboard/palette.hpp"
#include "app/dashboard/printable_text.hpp"
#include "app/dashboard/step_time_panel.hpp"
#include "engine/nn/gpt2_model.hpp"
#include "engine/nn/llama_model.hpp"
#include "engine/runtime/error.hpp"
#include "engine/train/model_factory.hpp"

namespace fsdplab::app {
namespace {

// The world size slider's end: the dashboard's panels are laid out and tested for up to 16 ranks
// (tests/ui/test_flat_parameter_map.cpp); `fsdplab gui --world` takes more.
constexpr int kMaxWorld = 16;

// A combo over `names` editing `value`; true when it changed.
bool combo(const char* label, std::string& value, const std::vector<std::string>& names) {
  bool changed = false;
  if (ImGui::BeginCombo(label, combo_preview(value.empty() ? "(default)" : value).c_str())) {
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

std::vector<std::string> strings(std::span<const std::string_view> views) { return {views.begin(), views.end()}; }

ControlsPanel::Rect last_item() { return {ImGui::GetItemRectMin(), ImGui::GetItemRectMax()}; }

void error_text(const std::string& text) {
  ImGui::PushStyleColor(ImGuiCol_Text, kFailedColor);
  text_wrapped_at_spaces(printable(text));  // never inside a number or a path
  ImGui::PopStyleColor();
}

}  // namespace

void ControlsPanel::restart(LiveSession& session, SessionSettings settings) {
  try {
    session.restart(std::move(settings));
    message_.clear();
  } catch (const Error& e) {
    message_ = e.what();
  }
}

std::string_view ControlsPanel::run_pause_label(LiveSession& session) {
  if (session.finished()) return "Run again";
  return session.control().paused() ? "Run  " : "Pause";  // as wide as each other: Step stays put
}

void ControlsPanel::draw(LiveSession& session) {
  if (!initialised_) {
    edited_ = session.settings();
    devices_ = available_devices();
    initialised_ = true;
  }
  RunControl& control = session.control();
  const TraceStore& store = session.store();

  // ---- run, pause, step ------------------------------------------------------------------------
  // Once every run has finished there is nothing left to pause or step: the first button runs the same
  // settings again instead, and Step is off (so are the keys: Dashboard::handle_keys).
  const bool finished = session.finished();
  bool run_again = false;  // done last: a restart replaces `control`, which the panel reads until then
  if (ImGui::Button(std::string(run_pause_label(session)).c_str())) {
    if (finished) {
      run_again = true;
    } else if (control.paused()) {
      control.resume();
    } else {
      control.pause();
    }
  }
  run_pause_ = last_item();
  if (finished && ImGui::IsItemHovered()) ImGui::SetTooltip("the runs have finished: run them again, as they were");
  ImGui::SameLine();
  ImGui::BeginDisabled(finished);
  if (ImGui::Button("Step")) control.step_once();
  ImGui::EndDisabled();
  step_ = last_item();
  // Under the buttons: the keys while the runs go, then that they are over; then a line per run. Each takes as many
  // lines as its longest form, so that what is below keeps its place as the runs step and finish.
  constexpr std::string_view kKeys = "keys: space pauses and runs, s or the right arrow steps";
  const std::string_view hint = finished ? "finished: nothing left to pause or step" : kKeys;
  const float width = std::max(ImGui::GetContentRegionAvail().x, 1.0f);
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  text_wrapped_holding_lines(hint, kKeys, width);
  ImGui::PopStyleColor();
  for (const auto& run : session.runs()) {
    const TraceSource& source = store.source(run->source());
    const char* state = run->error()       ? "failed"
                        : run->finished()  ? "finished"
                        : control.paused() ? "paused"
                                           : "running";
    // Wrapped: a run named by its --impl ("3=mutant:host-sync") would push its loss past the panel's edge.
    char line[512];
    if (source.steps.empty()) {
      std::snprintf(line, sizeof line, "%-6s %s, no step done yet", source.label.c_str(), state);
    } else {
      const StepTime& last = source.steps.back();
      // A dry run computes no values: its loss is shown as "-", as `fsdplab run --dry-run` shows it.
      char loss[64] = "-";
      if (!run->run().dry_run) std::snprintf(loss, sizeof loss, "%.4f", last.loss);
      if (!run->run().dry_run && !std::isnan(last.grad_norm))  // a run that clips: the norm it clipped
        std::snprintf(loss + std::strlen(loss), sizeof loss - std::strlen(loss), ", grad norm %.4f", last.grad_norm);
      std::snprintf(line, sizeof line, "%-6s %s, step %d/%d: %s, loss %s", source.label.c_str(), state, last.step + 1,
                    run->run().run.steps, step_time_unit(store).text(ns_to_ms(last.duration())).c_str(), loss);
    }
    char longest[512];  // its longest state, its last step, a step of 100 s, a loss of 99 and a norm of 999
    std::snprintf(longest, sizeof longest, "%-6s finished, step %d/%d: 99999.999 ms, loss 99.9999%s",
                  source.label.c_str(), run->run().run.steps, run->run().run.steps,
                  run->run().run.clip_grad_norm > 0 ? ", grad norm 999.9999" : "");
    text_wrapped_holding_lines(line, longest, width);
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
  if (s.model == "gpt2" || s.model == "llama") {
    combo("attention", s.attention, {"auto", "exact", "flash"});
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("auto: flash in bf16, exact in f32. exact keeps each layer's [B, H, T, T] probabilities "
                        "(the memory panel's .att), flash only each row's log-sum-exp (.lse)");
  }
  ImGui::SliderInt("world size", &s.world, 1, kMaxWorld);
  world_ = {ImGui::GetItemRectMin(),
            ImVec2(ImGui::GetItemRectMin().x + ImGui::CalcItemWidth(), ImGui::GetItemRectMax().y)};
  std::vector<std::string> devices = PresetCatalog::builtin().device_names();
  combo("device", s.device_preset, devices);
  const std::vector<std::string> links = PresetCatalog::builtin().link_names();
  std::vector<std::string> link_or_default = links;
  link_or_default.insert(link_or_default.begin(), "");
  combo("link", s.link_preset, link_or_default);
  // Nodes (sim only): the ranks of a node share the link above, and the link between nodes joins them.
  const bool on_sim = s.device == "sim";
  if (!on_sim) ImGui::BeginDisabled();
  // The label fits beside the field; what 0 means is said in the field itself.
  ImGui::SliderInt("ranks per node", &s.nodes.ranks_per_node, 0, s.world,
                   s.nodes.ranks_per_node == 0 ? "0: one node" : "%d");
  nodes_ = last_item();
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("sim: a collective whose group spans nodes runs on the link between nodes (lab 08)");
  if (s.nodes.ranks_per_node > 0) combo("between nodes", s.nodes.inter_node_link, links);
  if (!on_sim) ImGui::EndDisabled();
  if (ImGui::BeginCombo("compare", combo_preview(std::string(comparison_name(s.comparison))).c_str())) {
    for (Comparison c : kComparisons)
      if (ImGui::Selectable(std::string(comparison_name(c)).c_str(), c == s.comparison)) s.comparison = c;
    ImGui::EndCombo();
  }
  if (s.comparison == Comparison::ab) ImGui::SliderInt("steps per block", &s.ab_block, 1, 20);
  // --impl: which tasks run the student's code (labs/NN-*/student.cpp); checked on restart.
  std::snprintf(impl_text_.data(), impl_text_.size(), "%s", s.fsdp.impl.c_str());
  if (ImGui::InputText("impl", impl_text_.data(), impl_text_.size())) s.fsdp.impl = impl_text_.data();
  impl_ = last_item();
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("reference, student, or per task: 3=student,6=student%s",
                      s.comparison == Comparison::impl ? "\n(compare: the reference runs beside it)" : "");
  FsdpFlags& f = s.fsdp;
  combo("prefetch", f.prefetch, strings(prefetch_names()));
  combo("strategy", f.strategy, strings(strategy_names()));
  if (f.strategy == strategy_name(ShardingStrategy::hybrid_shard)) {
    // HYBRID_SHARD's S until the student picks one: a node's ranks where there are nodes, else half the world.
    if (f.hybrid_group == 0)
      f.hybrid_group = s.nodes.ranks_per_node > 0 ? s.nodes.ranks_per_node : std::max(1, s.world / 2);
    ImGui::SliderInt("shard group (S)", &f.hybrid_group, 1, s.world);
    shard_group_ = last_item();
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("the ranks a unit is sharded over, dividing the world; the W / S groups replicate it");
  } else {
    shard_group_ = {};
  }
  // PyTorch's reshard_after_forward=False is SHARD_GRAD_OP: one setting, shown both ways.
  const std::string full(strategy_name(ShardingStrategy::full_shard)),
      grad_op(strategy_name(ShardingStrategy::shard_grad_op));
  bool reshard = f.strategy != grad_op;
  const bool reshard_applies = f.strategy == full || f.strategy == grad_op;
  if (!reshard_applies) ImGui::BeginDisabled();
  if (ImGui::Checkbox("reshard after forward", &reshard)) f.strategy = reshard ? full : grad_op;
  if (!reshard_applies) ImGui::EndDisabled();
  // The rest of `fsdplab run`'s FSDP options, offered from the same tables its flags check against; what only
  // some combinations allow (pool buffers, offload, a bf16 reduction) is refused on restart with its message.
  combo("wrap", s.wrap, strings(wrap_names()));
  wrap_ = last_item();
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "the modules that become FSDP units: block (each transformer block), linear (each Linear and "
        "Embedding), nested (both) or model (one unit)");
  combo("precision", f.precision, strings(fsdp_dtype_names()));
  combo("reduce dtype", f.reduce_dtype, strings(fsdp_dtype_names()));
  reduce_dtype_ = last_item();
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("the gradients' reduce-scatter in this dtype; bf16 needs precision bf16");
  combo("embedding grad", f.embedding_grad, strings(embedding_gradient_names()));
  embedding_grad_ = last_item();
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "GPT-2's tied embedding: its gradient added into the tables and reduced with the root at the backward's "
        "end (table), or the root reduced beside the Blocks' backward and only the rows all-gathered at the end "
        "(rows; wrap block)");
  combo("buffers", f.buffers, strings(unshard_buffers_names()));
  buffers_ = last_item();
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "gathered parameters: alloc (the caching allocator, per gather) or pool (two buffers that even "
        "and odd units take turns in, YaFSDP; needs a strategy that reshards after forward)");
  // The limit holds ASYNC gathers into allocated buffers; the pool's two buffers are a limit of their own.
  const bool limit_applies = f.buffers == unshard_buffers_name(UnshardBuffers::alloc);
  ImGui::BeginDisabled(!limit_applies);
  if (ImGui::InputInt("max in flight", &f.max_inflight))
    f.max_inflight = std::clamp(f.max_inflight, 0, kMaxInflightFlag);
  ImGui::EndDisabled();
  max_inflight_ = last_item();
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("ASYNC with alloc buffers: gathered units allowed at once (0: no limit)");
  ImGui::Checkbox("CPU offload", &f.offload);
  offload_ = last_item();
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "shards and optimizer state in host memory, the optimizer step on the CPU (lab 09); "
        "strategies full, grad_op and hybrid");
  ImGui::InputInt("steps", &s.steps);
  ImGui::Checkbox("dry run (time and memory only)", &s.dry_run);
  // Pacing applies at once: it only changes how fast the host runs, never what the runs compute.
  float pace = static_cast<float>(s.steps_per_second);
  if (ImGui::SliderFloat("steps / s (0: unpaced)", &pace, 0, 30, "%.1f")) {
    s.steps_per_second = pace;
    control.set_steps_per_second(pace);
  }
  ImGui::PopItemWidth();
  const bool restart_clicked = ImGui::Button("Restart with these settings");
  restart_ = last_item();
  if (!message_.empty()) error_text("not restarted: " + message_);
  if (ImGui::TreeNode("Devices")) {
    for (const std::string& line : devices_) text_wrapped_at_spaces(line);  // `fsdplab devices`' lines, wider
    ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
    text_wrapped_at_spaces("(the dashboard's runs use the " + session.settings().device + " device)");
    ImGui::PopStyleColor();
    ImGui::TreePop();
  }
  if (run_again) restart(session, session.settings());
  if (restart_clicked) restart(session, s);
}

}  // namespace fsdplab::app
