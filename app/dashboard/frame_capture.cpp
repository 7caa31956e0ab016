// frame_capture.cpp — ImGui frames drawn offscreen and written as PNG files.
#include "app/dashboard/frame_capture.hpp"

#include <backends/imgui_impl_opengl3.h>
#include <GL/gl.h>
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

void draw_imgui_frame(int width, int height) {
  glViewport(0, 0, width, height);
  glClearColor(0.08f, 0.08f, 0.09f, 1);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
}

FrameCapture::FrameCapture(int width, int height)
    : gl_(width, height), imgui_(static_cast<float>(width), static_cast<float>(height)) {
  check(ImGui_ImplOpenGL3_Init("#version 330 core"), "offscreen OpenGL (", gl_.renderer(),
        "): Dear ImGui's OpenGL 3 backend failed to start");
}

FrameCapture::~FrameCapture() {
  ImGui::SetCurrentContext(imgui_.context());
  ImGui_ImplOpenGL3_Shutdown();
}

void FrameCapture::new_frame() {
  ImGui::SetCurrentContext(imgui_.context());
  ImGui_ImplOpenGL3_NewFrame();
  imgui_.new_frame();
}

void FrameCapture::render() {
  imgui_.render();
  draw_imgui_frame(gl_.width(), gl_.height());
  // Drawn before the next one starts: llvmpipe (Mesa's software OpenGL) takes frames faster than it draws them,
  // and reading the last one's pixels or destroying the context (OffscreenGl::release) waited for every frame
  // queued before it, tens of seconds after a screenshot had waited a while.
  glFinish();
}

void FrameCapture::write_png(const std::filesystem::path& path, std::string_view what) const {
  const int width = gl_.width(), height = gl_.height();
  std::vector<unsigned char> pixels(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, width, height, GL_RGB, GL_UNSIGNED_BYTE, pixels.data());  // the framebuffer's colour buffer
  check(glGetError() == GL_NO_ERROR, what, " '", path.string(), "': reading the frame's pixels failed");
  // OpenGL's first row is the bottom one; a PNG's is the top.
  stbi_flip_vertically_on_write(1);
  write_output_file(path, what, [&](std::ostream& out) {
    check(stbi_write_png_to_func(append_png_bytes, &out, width, height, 3, pixels.data(), width * 3) != 0,
          "stb_image_write could not encode the PNG");
  });
}

}  // namespace fsdplab::app
