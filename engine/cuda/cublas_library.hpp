// cublas_library.hpp — cuBLAS and cuBLASLt, opened when the first GEMM runs on a GPU rather than when fsdplab starts
// (see [Note: cuBLAS is opened on first use] in cublas_library.cpp).
//
// Each member is the function its header declares, under the header's name: a call reads as the plain call does,
// `blas.cublasGemmEx(handle, ...)`, and the compiler checks it against the declaration.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>

namespace fsdplab::cuda {

// The exported cublasGemmEx, with a cublasComputeType_t; cublas_v2.h adds an inline overload taking a cudaDataType.
using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                  const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                  cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

struct CublasLibrary {
  decltype(&::cublasCreate) cublasCreate;
  decltype(&::cublasDestroy) cublasDestroy;
  decltype(&::cublasSetStream) cublasSetStream;
  decltype(&::cublasSetWorkspace) cublasSetWorkspace;
  decltype(&::cublasSetSmCountTarget) cublasSetSmCountTarget;
  decltype(&::cublasSetMathMode) cublasSetMathMode;
  decltype(static_cast<GemmEx>(&::cublasGemmEx)) cublasGemmEx;
  decltype(&::cublasGetStatusName) cublasGetStatusName;
  decltype(&::cublasGetStatusString) cublasGetStatusString;
  decltype(&::cublasLtMatmul) cublasLtMatmul;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) cublasLtMatmulAlgoGetHeuristic;
  decltype(&::cublasLtMatmulDescCreate) cublasLtMatmulDescCreate;
  decltype(&::cublasLtMatmulDescDestroy) cublasLtMatmulDescDestroy;
  decltype(&::cublasLtMatmulDescSetAttribute) cublasLtMatmulDescSetAttribute;
  decltype(&::cublasLtMatrixLayoutCreate) cublasLtMatrixLayoutCreate;
  decltype(&::cublasLtMatrixLayoutDestroy) cublasLtMatrixLayoutDestroy;
  decltype(&::cublasLtMatmulPreferenceCreate) cublasLtMatmulPreferenceCreate;
  decltype(&::cublasLtMatmulPreferenceDestroy) cublasLtMatmulPreferenceDestroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) cublasLtMatmulPreferenceSetAttribute;
};

// The libraries, opened once per process (by the first thread to ask; the others wait for it). Throws an Error
// that names the library it could not open, where it looked and why, or the function it did not find; the next
// call tries again.
const CublasLibrary& cublas_library();

}  // namespace fsdplab::cuda
