// offscreen_gl.cpp — an EGL context on Mesa's surfaceless platform or an EGL device, drawing into a framebuffer
// object ([Note: offscreen OpenGL through EGL] in offscreen_gl.hpp).
#include "app/dashboard/offscreen_gl.hpp"

#include <EGL/egl.h>
#include <EGL/eglext.h>
#define GL_GLEXT_PROTOTYPES
#include <GL/gl.h>
#include <GL/glext.h>

#include <cstdio>
#include <sstream>
#include <string_view>
#include <vector>

#include "engine/runtime/error.hpp"

namespace fsdplab::app {
namespace {

bool has_extension(const char* extensions, std::string_view name) {
  std::istringstream words(extensions ? extensions : "");
  for (std::string word; words >> word;)
    if (word == name) return true;
  return false;
}

std::string hex(unsigned value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%04x", value);
  return text;
}

std::string egl_error() { return "EGL error " + hex(static_cast<unsigned>(eglGetError())); }

// An OpenGL 3.3 core context made current with no surface on an initialised `display`, or EGL_NO_CONTEXT with
// why in `why`.
EGLContext core_context(EGLDisplay display, std::string& why) {
  if (!has_extension(eglQueryString(display, EGL_EXTENSIONS), "EGL_KHR_surfaceless_context")) {
    why = "no EGL_KHR_surfaceless_context";
    return EGL_NO_CONTEXT;
  }
  if (!eglBindAPI(EGL_OPENGL_API)) {
    why = "no desktop OpenGL (" + egl_error() + ")";
    return EGL_NO_CONTEXT;
  }
  const EGLint config_attributes[] = {EGL_SURFACE_TYPE, EGL_PBUFFER_BIT, EGL_RENDERABLE_TYPE, EGL_OPENGL_BIT,
                                      EGL_RED_SIZE, 8, EGL_GREEN_SIZE, 8, EGL_BLUE_SIZE, 8, EGL_NONE};
  EGLConfig config = nullptr;
  EGLint configs = 0;
  if (!eglChooseConfig(display, config_attributes, &config, 1, &configs) || configs < 1) {
    why = "no RGB8 OpenGL config (" + egl_error() + ")";
    return EGL_NO_CONTEXT;
  }
  const EGLint context_attributes[] = {EGL_CONTEXT_MAJOR_VERSION, 3, EGL_CONTEXT_MINOR_VERSION, 3,
                                       EGL_CONTEXT_OPENGL_PROFILE_MASK, EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT, EGL_NONE};
  EGLContext context = eglCreateContext(display, config, EGL_NO_CONTEXT, context_attributes);
  if (context == EGL_NO_CONTEXT) {
    why = "no OpenGL 3.3 core context (" + egl_error() + ")";
    return EGL_NO_CONTEXT;
  }
  if (!eglMakeCurrent(display, EGL_NO_SURFACE, EGL_NO_SURFACE, context)) {
    why = "the context cannot be made current (" + egl_error() + ")";
    eglDestroyContext(display, context);
    return EGL_NO_CONTEXT;
  }
  return context;
}

}  // namespace

OffscreenGl::OffscreenGl(int width, int height) : width_(width), height_(height) {
  check(width > 0 && height > 0, "offscreen OpenGL: a ", width, "x", height, " frame; expected a positive size");
  const char* client = eglQueryString(EGL_NO_DISPLAY, EGL_EXTENSIONS);
  const auto get_platform_display =
      reinterpret_cast<PFNEGLGETPLATFORMDISPLAYEXTPROC>(eglGetProcAddress("eglGetPlatformDisplayEXT"));
  // Each way to a display, tried in turn (the note in offscreen_gl.hpp): its name and how to open it.
  std::vector<std::pair<std::string, EGLDisplay>> displays;
  if (get_platform_display && has_extension(client, "EGL_MESA_platform_surfaceless"))
    displays.emplace_back("surfaceless",
                          get_platform_display(EGL_PLATFORM_SURFACELESS_MESA, EGL_DEFAULT_DISPLAY, nullptr));
  const auto query_devices = reinterpret_cast<PFNEGLQUERYDEVICESEXTPROC>(eglGetProcAddress("eglQueryDevicesEXT"));
  if (get_platform_display && query_devices && has_extension(client, "EGL_EXT_platform_device")) {
    EGLDeviceEXT devices[8];
    EGLint count = 0;
    if (query_devices(8, devices, &count))
      for (EGLint d = 0; d < count; ++d)
        displays.emplace_back("EGL device " + std::to_string(d),
                              get_platform_display(EGL_PLATFORM_DEVICE_EXT, devices[d], nullptr));
  }
  std::string tried;
  for (const auto& [name, display] : displays) {
    std::string why;
    if (display == EGL_NO_DISPLAY) {
      why = "no display (" + egl_error() + ")";
    } else if (!eglInitialize(display, nullptr, nullptr)) {
      why = "eglInitialize failed (" + egl_error() + ")";
    } else if (EGLContext context = core_context(display, why); context != EGL_NO_CONTEXT) {
      display_ = display;
      context_ = context;
      renderer_ = name + ": " + reinterpret_cast<const char*>(glGetString(GL_RENDERER));
      break;
    } else {
      eglTerminate(display);
    }
    tried += (tried.empty() ? "" : "; ") + name + ": " + why;
  }
  if (!context_)
    fail("no offscreen OpenGL 3.3 core context to draw the dashboard's frames in (",
         displays.empty() ? std::string("this EGL offers neither Mesa's surfaceless platform nor EGL devices") : tried,
         "). Install Mesa's EGL (`apt-get install libegl1 libegl-mesa0`, which scripts/install-deps.sh --gui does) or "
         "a GPU driver with EGL");

  glGenFramebuffers(1, &framebuffer_);
  glGenRenderbuffers(1, &colour_);
  glBindRenderbuffer(GL_RENDERBUFFER, colour_);
  glRenderbufferStorage(GL_RENDERBUFFER, GL_RGBA8, width, height);
  glBindFramebuffer(GL_FRAMEBUFFER, framebuffer_);
  glFramebufferRenderbuffer(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_RENDERBUFFER, colour_);
  if (const GLenum status = glCheckFramebufferStatus(GL_FRAMEBUFFER); status != GL_FRAMEBUFFER_COMPLETE) {
    release();
    fail("offscreen OpenGL (", renderer_, "): a ", width, "x", height, " RGBA8 framebuffer is incomplete (status ",
         hex(status), ")");
  }
}

OffscreenGl::~OffscreenGl() { release(); }

void OffscreenGl::release() {
  if (!context_) return;
  if (framebuffer_) glDeleteFramebuffers(1, &framebuffer_);
  if (colour_) glDeleteRenderbuffers(1, &colour_);
  eglMakeCurrent(display_, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
  eglDestroyContext(display_, context_);
  eglTerminate(display_);
  context_ = nullptr;
}

}  // namespace fsdplab::app
