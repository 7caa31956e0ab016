// frame_capture.cpp — rendering ImGui frames into the back buffer and writing them as PNG files.
#include "app/dashboard/frame_capture.hpp"

#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <GLFW/glfw3.h>
#include <imgui.h>
#include <stb_image_write.h>

#include <ostream>
#include <string>
#include <vector>

#include "engine/runtime/error.hpp"
#include "engine/runtime/output_file.hpp"

namespace fsdplab::app {
namespace {

void append_png_bytes(void* context, void* data, int size) {
  static_cast<std::ostream*>(context)->write(static_cast<const char*>(data), size);
}

}  // namespace

void render_to_back_buffer() {
  int width = 0, height = 0;
  glfwGetFramebufferSize(glfwGetCurrentContext(), &width, &height);
  glViewport(0, 0, width, height);
  glClearColor(0.08f, 0.08f, 0.09f, 1);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
}

void write_back_buffer_png(const std::filesystem::path& path, std::string_view what) {
  int width = 0, height = 0;
  glfwGetFramebufferSize(glfwGetCurrentContext(), &width, &height);
  check(width > 0 && height > 0, what, " '", path.string(), "': the window's framebuffer is ", width, "x", height,
        "; expected a frame to read");
  std::vector<unsigned char> pixels(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3);
  glReadBuffer(GL_BACK);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, width, height, GL_RGB, GL_UNSIGNED_BYTE, pixels.data());
  check(glGetError() == GL_NO_ERROR, what, " '", path.string(), "': reading the frame's pixels failed");
  // OpenGL's first row is the bottom one; a PNG's is the top.
  stbi_flip_vertically_on_write(1);
  write_output_file(path, what, [&](std::ostream& out) {
    check(stbi_write_png_to_func(append_png_bytes, &out, width, height, 3, pixels.data(), width * 3) != 0,
          "stb_image_write could not encode the PNG");
  });
}

CaptureWindow::CaptureWindow(int width, int height, const char* title) {
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  glfwWindowHint(GLFW_RESIZABLE, GLFW_FALSE);
  window_ = glfwCreateWindow(width, height, title, nullptr, nullptr);
  if (!window_) {
    glfwTerminate();
    fail("cannot create a ", width, "x", height, " window with an OpenGL 3.3 core context");
  }
  glfwMakeContextCurrent(window_);
  glfwSwapInterval(0);
  previous_ = ImGui::GetCurrentContext();
  context_ = ImGui::CreateContext();
  ImGui::SetCurrentContext(context_);
  ImGui::GetIO().IniFilename = nullptr;  // the layout is fixed; no imgui.ini beside the user's files
  ImGui::StyleColorsDark();
  ImGui_ImplGlfw_InitForOpenGL(window_, false);  // no callbacks: nobody's mouse or keys reach a figure
  ImGui_ImplOpenGL3_Init("#version 330 core");
}

CaptureWindow::~CaptureWindow() {
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext(context_);
  ImGui::SetCurrentContext(previous_);
  glfwDestroyWindow(window_);
  glfwTerminate();
}

}  // namespace fsdplab::app
