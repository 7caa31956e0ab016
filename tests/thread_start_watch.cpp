// thread_start_watch.cpp — keeps tests/CMakeLists.txt's list of single-threaded test files true: a test of a listed
// file that starts a thread fails, naming the file to take off the list. See [Note: the tests ThreadSanitizer leaves
// out] in tests/CMakeLists.txt, which passes the list in as FSDPLAB_SINGLE_THREADED_TESTS ("unit/test_bf16.cpp ...").
//
// The watch counts calls to pthread_create, which every thread of this process (std::thread's, OpenBLAS's) starts
// with: this executable defines pthread_create, and the dynamic linker binds libstdc++'s and every library's calls
// to the executable's definition before libc's, which it then calls. Not counted: the cuda instances of tests (named
// "cuda" or "..._cuda" by test_support.hpp's device_param_name and run_on_each_device.hpp), which a TSan build never
// runs (it has no CUDA), so the threads they start (the CUPTI tracer's flusher; NVIDIA's libraries' own, or
// compute-sanitizer's under it) cannot hide from it; nor, in any test, the threads NVIDIA's libraries start when a
// test asks whether a GPU is usable. A sanitizer intercepts pthread_create the same way and must see every thread, so
// a sanitized build leaves the watch out.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <filesystem>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

std::atomic<long> g_thread_starts{0};

class SingleThreadedFilesWatch : public testing::EmptyTestEventListener {
 public:
  SingleThreadedFilesWatch() {
    std::istringstream names(FSDPLAB_SINGLE_THREADED_TESTS);
    for (std::string name; names >> name;) listed_.push_back(name);
  }

  void OnTestStart(const testing::TestInfo&) override { starts_at_test_start_ = g_thread_starts.load(); }

  void OnTestEnd(const testing::TestInfo& test) override {
    const long started = g_thread_starts.load() - starts_at_test_start_;
    if (started == 0 || std::string_view(test.name()).ends_with("cuda")) return;
    const std::string file = test.file();
    for (const std::string& name : listed_) {
      if (!file.ends_with("/" + name)) continue;
      ADD_FAILURE() << test.test_suite_name() << "." << test.name() << " started " << started
                    << " thread(s), but tests/CMakeLists.txt lists " << name
                    << " in FSDPLAB_SINGLE_THREADED_TESTS, whose files ThreadSanitizer does not build: take " << name
                    << " off that list";
    }
  }

 private:
  std::vector<std::string> listed_;
  long starts_at_test_start_ = 0;
};

// Whether `start` is code of one of NVIDIA's shared libraries (the driver's libcuda.so, CUPTI, NCCL, ...), which
// start threads of their own when a process first uses the GPU.
bool started_by_nvidia_library(void* (*start)(void*)) {
  Dl_info where{};
  if (dladdr(reinterpret_cast<void*>(start), &where) == 0 || where.dli_fname == nullptr) return false;
  const std::string library = std::filesystem::path(where.dli_fname).filename().string();
  for (std::string_view prefix : {"libcuda", "libcublas", "libcupti", "libnccl", "libnvidia"}) {
    if (library.starts_with(prefix)) return true;
  }
  return false;
}

// Appended before main runs (gtest_main's main calls InitGoogleTest, which keeps the listeners appended).
const bool g_watch_installed = [] {
  testing::UnitTest::GetInstance()->listeners().Append(new SingleThreadedFilesWatch);
  return true;
}();

}  // namespace

extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attributes, void* (*start)(void*),
                              void* argument) {
  using Create = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static const auto libc_create = reinterpret_cast<Create>(dlsym(RTLD_NEXT, "pthread_create"));
  if (!started_by_nvidia_library(start)) g_thread_starts.fetch_add(1);
  return libc_create(thread, attributes, start, argument);
}

#endif
