#include "engine/cuda/cublas_library.hpp"

#include <dlfcn.h>

#include <string>

#include "engine/runtime/error.hpp"

namespace fsdplab::cuda {
namespace {

// [Note: cuBLAS is opened on first use]
// Linked as a shared library, cuBLASLt (half a gigabyte) made every process pay for loading it at start, on the sim
// device as on a GPU: about 24,000 page faults, a tenth of a second and twice that in CPU time on the development
// VM, for each test of the default build and each command a student types. So the cuda device opens cuBLAS and
// cuBLASLt with dlopen when a thread first runs a GEMM on a GPU, and looks up each function it calls by the name the
// header gives it (the header's macros choose the exported symbol: cublasCreate is cublasCreate_v2). The dynamic
// linker looks where it would have for a linked library (LD_LIBRARY_PATH, then this executable's run path), then in
// the CUDA toolkit this fsdplab was built with.
void* open_library(const std::string& soname) {
  if (void* library = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return library;
  const std::string not_found = dlerror();
  const std::string in_toolkit = std::string(FSDPLAB_CUDA_LIBRARY_DIR) + "/" + soname;
  if (void* library = dlopen(in_toolkit.c_str(), RTLD_NOW | RTLD_LOCAL)) return library;
  fail("cannot open ", soname, " (cuBLAS, which runs the GEMMs of the cuda device): ", not_found, "; nor ", in_toolkit,
       ": ", dlerror(), ". Expected CUDA ", CUBLAS_VER_MAJOR,
       "'s cuBLAS where the dynamic linker finds it (LD_LIBRARY_PATH) or in the CUDA toolkit this fsdplab was built "
       "with");
}

template <class Function>
void find(void* library, const std::string& soname, const char* name, Function& function) {
  function = reinterpret_cast<Function>(dlsym(library, name));
  if (function == nullptr) fail(soname, " has no ", name, ": expected CUDA ", CUBLAS_VER_MAJOR, "'s cuBLAS");
}

// The exported name of a function its header may rename with a macro.
#define FSDPLAB_SYMBOL_NAME(function) FSDPLAB_QUOTED(function)
#define FSDPLAB_QUOTED(text) #text
#define FSDPLAB_FIND(member) find(library, soname, FSDPLAB_SYMBOL_NAME(member), blas.member);

CublasLibrary open_cublas() {
  CublasLibrary blas{};
  const std::string major = std::to_string(CUBLAS_VER_MAJOR);
  {
    const std::string soname = "libcublasLt.so." + major;
    void* library = open_library(soname);
    FSDPLAB_CUBLASLT_FUNCTIONS(FSDPLAB_FIND)
  }
  {
    const std::string soname = "libcublas.so." + major;
    void* library = open_library(soname);
    FSDPLAB_CUBLAS_FUNCTIONS(FSDPLAB_FIND)
  }
  return blas;
}

#undef FSDPLAB_FIND
#undef FSDPLAB_QUOTED
#undef FSDPLAB_SYMBOL_NAME

}  // namespace

const CublasLibrary& cublas_library() {
  // A static's initialisation that throws is tried again by the next call (C++ [stmt.dcl]).
  static const CublasLibrary blas = open_cublas();
  return blas;
}

}  // namespace fsdplab::cuda
