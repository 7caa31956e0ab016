// mma.h for kernels run on the CPU (tests/kernel_emulation): nvcuda::wmma's bf16 m16n16k16 fragments by
// their documented semantics. An operand fragment (matrix_a, matrix_b) holds its whole 16 x 16 matrix in every
// lane. An accumulator is spread over the warp as on a GPU, num_elements = 8 a lane, in an order wmma does not
// promise, so this one is deliberately scrambled (element_of): a kernel that assumes which of a lane's elements
// holds which row or column computes garbage here, and one that learns it from a loaded fragment, as the API
// allows, works. Loads check what the hardware requires: 32-byte aligned pointers and strides of whole 16-byte
// units. Each lane loads and stores its own accumulator elements; a product sums k in order, in f32.
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

// Element i of lane l's accumulator is the matrix's element (row, column) of e = (97 (l + 32 i) + 13) mod 256 (97
// is odd, so every element has one owner): row e / 16, column e % 16.
struct Element {
  int row, column;
};
inline Element element_of(unsigned lane, int i) {
  const int e = static_cast<int>((97u * (lane + 32u * static_cast<unsigned>(i)) + 13u) % 256u);
  return {e / 16, e % 16};
}

template <int M, int N, int K, class T>
struct fragment<accumulator, M, N, K, T, void> {
  static constexpr int num_elements = 8;
  float x[num_elements];
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

using Accumulator = fragment<accumulator, 16, 16, 16, float>;

// Where element e of a matrix stored with leading dimension ldm and layout l is.
inline unsigned offset(unsigned ldm, layout_t l, Element e) {
  const auto row = static_cast<unsigned>(e.row), column = static_cast<unsigned>(e.column);
  return l == mem_row_major ? row * ldm + column : row + column * ldm;
}

inline void load_matrix_sync(Accumulator& f, const float* p, unsigned ldm, layout_t l) {
  check_operand(p, ldm, sizeof(float));
  for (int i = 0; i < Accumulator::num_elements; ++i) f.x[i] = p[offset(ldm, l, element_of(cuda_on_cpu::lane(), i))];
}

inline void store_matrix_sync(float* p, const Accumulator& f, unsigned ldm, layout_t l) {
  check_operand(p, ldm, sizeof(float));
  for (int i = 0; i < Accumulator::num_elements; ++i)
    p[offset(ldm, l, element_of(cuda_on_cpu::lane(), i))] = f.x[i];
}

inline void fill_fragment(Accumulator& f, float v) {
  for (float& e : f.x) e = v;
}

// d = a b + c for the lane's own elements of d and c.
template <class A, class B>
void mma_sync(Accumulator& d, const A& a, const B& b, const Accumulator& c) {
  for (int i = 0; i < Accumulator::num_elements; ++i) {
    const Element e = element_of(cuda_on_cpu::lane(), i);
    float s = c.x[i];
    for (int k = 0; k < 16; ++k) s += a.x[e.row][k] * b.x[k][e.column];
    d.x[i] = s;
  }
}

}  // namespace nvcuda::wmma
