// device_floats.cuh — what the kernels of engine/cuda/*.cu share: reading and writing floating tensors of
// either dtype, the warp reductions, and the launchers' dtype dispatch. The device side of
// engine/tensor/float_io.hpp: a kernel is a template on its storage type (`float`, or `bf16` for
// __nv_bfloat16), computes in f32, reads through to_f32 and writes through from_f32 / store, which round
// to bf16 to nearest even, once. CUDA-only (a .cu file includes it); C++17.
#pragma once
#include <cuda_bf16.h>

#include "engine/cuda/cuda_check.hpp"
#include "engine/runtime/dtype.hpp"

namespace fsdplab::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float v) {
  return __float2bfloat16_rn(v);
}

template <class T>
__device__ __forceinline__ void store(T* p, float v) {
  *p = from_f32<T>(v);
}

constexpr unsigned kFullMask = 0xffffffffu;

// Every lane's total, in a fixed butterfly order (the same bits on every run).
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}
// fmaxf skips a NaN, as the host's std::max(max, v) does.
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Calls fn(float{}) for f32 and fn(bf16{}) for bf16, as the host's dispatch_float does; `op` names the
// launcher in the error for any other dtype.
template <class Fn>
void dispatch_float(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn(float{});
      return;
    case DType::bf16:
      fn(bf16{});
      return;
    case DType::i32:
      break;
  }
  fail(op, ": ", dtype_name(dtype), " is not a floating dtype");
}

}  // namespace fsdplab::cuda
