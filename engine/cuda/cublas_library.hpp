// cublas_library.hpp — cuBLAS and cuBLASLt, opened when the first GEMM runs on a GPU rather than when fsdplab starts
// (see [Note: cuBLAS is opened on first use] in cublas_library.cpp).
//
// Each member is the function its header declares, under the header's name: a call reads as the plain call does,
// `blas.cublasGemmEx(handle, ...)`, and the compiler checks it against the declaration.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>

// Every function the cuda device calls, by the library that exports it. The one list the members below and the
// lookups in cublas_library.cpp are both written from: a function added here is found when the library opens, or
// the library does not open.
#define FSDPLAB_CUBLASLT_FUNCTIONS(FUNCTION) \
  FUNCTION(cublasLtMatmul)                   \
  FUNCTION(cublasLtMatmulAlgoGetHeuristic)   \
  FUNCTION(cublasLtMatmulDescCreate)         \
  FUNCTION(cublasLtMatmulDescDestroy)        \
  FUNCTION(cublasLtMatmulDescSetAttribute)   \
  FUNCTION(cublasLtMatrixLayoutCreate)       \
  FUNCTION(cublasLtMatrixLayoutDestroy)      \
  FUNCTION(cublasLtMatmulPreferenceCreate)   \
  FUNCTION(cublasLtMatmulPreferenceDestroy)  \
  FUNCTION(cublasLtMatmulPreferenceSetAttribute)
#define FSDPLAB_CUBLAS_FUNCTIONS(FUNCTION) \
  FUNCTION(cublasCreate)                   \
  FUNCTION(cublasDestroy)                  \
  FUNCTION(cublasSetStream)                \
  FUNCTION(cublasSetWorkspace)             \
  FUNCTION(cublasSetSmCountTarget)         \
  FUNCTION(cublasSetMathMode)              \
  FUNCTION(cublasGemmEx)                   \
  FUNCTION(cublasGetStatusName)            \
  FUNCTION(cublasGetStatusString)

namespace fsdplab::cuda {

// The exported cublasGemmEx, with a cublasComputeType_t; cublas_v2.h adds an inline overload taking a cudaDataType.
using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                  const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                  cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

// `decltype(exported(&::name))` is the type of a pointer to the exported function `name`. The template gives each
// function's own type; given the overloads of cublasGemmEx, the template cannot deduce one and the plain overload
// picks the exported one. Declared only: used in decltype, never called.
template <class Function>
Function* exported(Function* function);
GemmEx exported(GemmEx function);

struct CublasLibrary {
#define FSDPLAB_CUBLAS_MEMBER(function) decltype(exported(&::function)) function;
  FSDPLAB_CUBLASLT_FUNCTIONS(FSDPLAB_CUBLAS_MEMBER)
  FSDPLAB_CUBLAS_FUNCTIONS(FSDPLAB_CUBLAS_MEMBER)
#undef FSDPLAB_CUBLAS_MEMBER
};

// The libraries, opened once per process (by the first thread to ask; the others wait for it). Throws an Error
// that names the library it could not open, where it looked and why, or the function it did not find; the next
// call tries again.
const CublasLibrary& cublas_library();

}  // namespace fsdplab::cuda
