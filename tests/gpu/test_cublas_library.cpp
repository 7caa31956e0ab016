// cuBLAS opened on first use (engine/cuda/cublas_library.cpp): the toolkit's libraries open, and every function the
// cuda device calls is found under its exported name, with no GPU (opening them needs no driver); a function called
// through the table answers as cuBLAS does. Nothing loads them before. A build without the CUDA backend has no cuBLAS.
#include <gtest/gtest.h>

#if FSDPLAB_HAVE_CUDA
#include <cublas_v2.h>
#include <link.h>

#include <string>

#include "engine/cuda/cublas_library.hpp"

namespace fsdplab::cuda {
namespace {

// Whether a library whose file name contains `name` is loaded in this process.
bool loaded(const std::string& name) {
  struct Search {
    const std::string& name;
    bool found = false;
  } search{name};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_name != nullptr && std::string(info->dlpi_name).find(s->name) != std::string::npos) {
          s->found = true;
        }
        return 0;
      },
      &search);
  return search.found;
}

TEST(CublasLibrary, OpensOnFirstUseWithEveryFunctionTheDeviceCalls) {
  // Each test runs in a process of its own (ctest, or isolated_main.cpp): nothing has opened cuBLAS yet.
  EXPECT_FALSE(loaded("libcublasLt.so")) << "cuBLASLt was loaded before the first use";
  const CublasLibrary& blas = cublas_library();
  EXPECT_TRUE(loaded("libcublasLt.so"));
  EXPECT_TRUE(loaded("libcublas.so"));
#define EXPECT_FOUND(function) EXPECT_NE(blas.function, nullptr) << #function " was not looked up";
  FSDPLAB_CUBLASLT_FUNCTIONS(EXPECT_FOUND)
  FSDPLAB_CUBLAS_FUNCTIONS(EXPECT_FOUND)
#undef EXPECT_FOUND
  EXPECT_STREQ(blas.cublasGetStatusName(CUBLAS_STATUS_NOT_INITIALIZED), "CUBLAS_STATUS_NOT_INITIALIZED");
  EXPECT_EQ(&cublas_library(), &blas) << "opened once a process";
}

}  // namespace
}  // namespace fsdplab::cuda
#endif  // FSDPLAB_HAVE_CUDA
