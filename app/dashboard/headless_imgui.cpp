#include "app/dashboard/headless_imgui.hpp"

#include <cfloat>
#include <cstdint>

namespace fsdplab::app {

HeadlessImGui::HeadlessImGui(float width, float height) : previous_(ImGui::GetCurrentContext()) {
  context_ = ImGui::CreateContext();
  ImGui::SetCurrentContext(context_);
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // a test must not read or write imgui.ini
  io.DisplaySize = ImVec2(width, height);
  io.DeltaTime = 1.0f / 60.0f;
  unsigned char* pixels = nullptr;
  int w = 0, h = 0;
  io.Fonts->GetTexDataAsRGBA32(&pixels, &w, &h);
  io.Fonts->SetTexID(reinterpret_cast<ImTextureID>(static_cast<std::intptr_t>(1)));  // any non-null id
}

HeadlessImGui::~HeadlessImGui() {
  ImGui::DestroyContext(context_);
  ImGui::SetCurrentContext(previous_);
}

void HeadlessImGui::new_frame(float mouse_x, float mouse_y, bool mouse_down) {
  ImGui::SetCurrentContext(context_);
  ImGuiIO& io = ImGui::GetIO();
  io.MousePos = mouse_x < 0 ? ImVec2(-FLT_MAX, -FLT_MAX) : ImVec2(mouse_x, mouse_y);
  io.MouseDown[0] = mouse_down;
  ImGui::NewFrame();
}

ImDrawData& HeadlessImGui::render() {
  ImGui::Render();
  return *ImGui::GetDrawData();
}

}  // namespace fsdplab::app
