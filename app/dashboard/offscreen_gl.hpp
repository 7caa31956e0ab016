// offscreen_gl.hpp — an OpenGL 3.3 core context with no window and no display server, drawing into a
// framebuffer object of a fixed size: where the dashboard's screenshots and the report's figures are rendered
// (frame_capture.hpp), so that they need no X server, on a desktop, over SSH or on a GPU node alike.
//
// [Note: offscreen OpenGL through EGL]
// EGL gives an OpenGL context without a window. Two ways to reach a driver, tried in this order:
//   - Mesa's surfaceless platform (EGL_MESA_platform_surfaceless): llvmpipe renders on the CPU, or the
//     GPU's Mesa driver where there is one; what a machine with Mesa's EGL (libegl-mesa0) has;
//   - an EGL device (EGL_EXT_platform_device): what NVIDIA's driver offers instead, rendering on the GPU.
// Either way the context has no default framebuffer: frames are drawn into a framebuffer object with one
// RGBA8 colour buffer, and read back from it. libglvnd's libEGL picks the vendor library (Mesa's, NVIDIA's)
// from the JSON files in /usr/share/glvnd/egl_vendor.d, or from __EGL_VENDOR_LIBRARY_FILENAMES.
#pragma once
#include <string>

namespace fsdplab::app {

class OffscreenGl {
 public:
  // An Error naming what failed (no EGL vendor, no OpenGL 3.3 core context, an incomplete framebuffer) and
  // what to install. The context is current on this thread until the object goes.
  OffscreenGl(int width, int height);
  ~OffscreenGl();
  OffscreenGl(const OffscreenGl&) = delete;
  OffscreenGl& operator=(const OffscreenGl&) = delete;

  int width() const { return width_; }
  int height() const { return height_; }
  // Which EGL platform and OpenGL renderer the frames come from ("surfaceless: llvmpipe (LLVM 15.0.6, 256 bits)").
  const std::string& renderer() const { return renderer_; }

 private:
  void release();

  int width_, height_;
  void* display_ = nullptr;  // EGLDisplay
  void* context_ = nullptr;  // EGLContext
  unsigned framebuffer_ = 0, colour_ = 0;
  std::string renderer_;
};

}  // namespace fsdplab::app
