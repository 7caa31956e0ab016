#include "app/dashboard/headless_imgui.hpp"

#include <cfloat>
#include <cstdint>

#include <GLFW/glfw3.h>

namespace fsdplab::app {

HeadlessImGui::HeadlessImGui(float width, float height) : previous_(ImGui::GetCurrentContext()) {
  context_ = ImGui::CreateContext();
  ImGui::SetCurrentContext(context_);
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // a test must not read or write imgui.ini
  io.DisplaySize = ImVec2(width, height);
  io.DeltaTime = 1.0f / 60.0f;
  // The keys the dashboard reads, at the indices 1.86's GLFW backend uses (GLFW's key codes), so a
  // test presses io.KeysDown[io.KeyMap[ImGuiKey_Space]] as the window would.
  io.KeyMap[ImGuiKey_Space] = GLFW_KEY_SPACE;
  io.KeyMap[ImGuiKey_RightArrow] = GLFW_KEY_RIGHT;
  io.KeyMap[ImGuiKey_LeftArrow] = GLFW_KEY_LEFT;
  io.KeyMap[ImGuiKey_End] = GLFW_KEY_END;
  io.KeyMap[ImGuiKey_Home] = GLFW_KEY_HOME;
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
