// mma.h for kernels run on CPU threads (tests/kernel_emulation): nvcuda::wmma's bf16 m16n16k16 fragments by
// their documented semantics. Every lane holds the whole 16 x 16 matrix (a real fragment is spread over the
// warp in an order wmma does not promise, which is why the kernels never index one). Loads check what the
// hardware requires: 32-byte aligned pointers and strides of whole 16-byte units. A store is warp-synchronous:
// it waits for the warp, then lane 0 writes. A product sums k in order, in f32.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include <cuda_bf16.h>

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  float x[16][16];
};

inline float widen(float v) { return v; }
inline float widen(__nv_bfloat16 v) { return __bfloat162float(v); }

inline void check_operand(const void* p, unsigned ldm, unsigned element_bytes) {
  if (reinterpret_cast<std::uintptr_t>(p) % 32 != 0) {
    std::fprintf(stderr, "wmma: a fragment's pointer %p is not 32-byte aligned\n", p);
    std::abort();
  }
  if (ldm * element_bytes % 16 != 0) {
    std::fprintf(stderr, "wmma: leading dimension %u is not a multiple of 16 bytes\n", ldm);
    std::abort();
  }
}

template <class Use, class T, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  check_operand(p, ldm, sizeof(T));
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.x[r][c] = widen(std::is_same_v<Layout, row_major> ? p[r * ldm + c] : p[r + c * ldm]);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t l) {
  check_operand(p, ldm, sizeof(float));
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.x[r][c] = l == mem_row_major ? p[r * ldm + c] : p[r + c * ldm];
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t l) {
  check_operand(p, ldm, sizeof(float));
  __syncwarp();
  if (cuda_on_cpu::lane() == 0)
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c) (l == mem_row_major ? p[r * ldm + c] : p[r + c * ldm]) = f.x[r][c];
}

template <class Fragment>
void fill_fragment(Fragment& f, float v) {
  for (auto& row : f.x)
    for (float& e : row) e = v;
}

template <class A, class B, class C>
void mma_sync(C& d, const A& a, const B& b, const C& c) {
  C product;
  for (int r = 0; r < 16; ++r) {
    for (int col = 0; col < 16; ++col) {
      float s = c.x[r][col];
      for (int k = 0; k < 16; ++k) s += a.x[r][k] * b.x[k][col];
      product.x[r][col] = s;
    }
  }
  d = product;
}

}  // namespace nvcuda::wmma
