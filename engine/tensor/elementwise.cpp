#include "engine/tensor/elementwise.hpp"

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "engine/cuda/copies.hpp"
#include "engine/cuda/pointwise_kernels.hpp"
#include "engine/cuda/row_kernels.hpp"
#include "engine/tensor/expect.hpp"
#include "engine/tensor/float_io.hpp"
#include "engine/tensor/gelu_tanh.hpp"
#include "engine/tensor/launch.hpp"

namespace fsdplab {
namespace {
namespace cpu {

template <class F>
void bias_add(F* out, const F* x, const F* bias, std::int64_t N, std::int64_t C) {
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t c = 0; c < C; ++c) store_f32(out[n * C + c], load_f32(x[n * C + c]) + load_f32(bias[c]));
  }
}

template <class F>
void bias_backward(F* dbias, const F* dout, std::int64_t N, std::int64_t C) {
  // Row by row into f32 column sums (a fixed order, so deterministic, streaming through memory);
  // dbias is then rounded once per element, not once per row.
  std::vector<float> sums(static_cast<std::size_t>(C), 0.f);
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t c = 0; c < C; ++c) sums[static_cast<std::size_t>(c)] += load_f32(dout[n * C + c]);
  }
  for (std::int64_t c = 0; c < C; ++c) store_f32(dbias[c], load_f32(dbias[c]) + sums[static_cast<std::size_t>(c)]);
}

template <class F>
void gelu(F* out, const F* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) store_f32(out[i], gelu_tanh(load_f32(x[i])));
}

template <class F>
void gelu_backward(F* dx, const F* x, const F* dout, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    store_f32(dx[i], load_f32(dx[i]) + load_f32(dout[i]) * gelu_tanh_derivative(load_f32(x[i])));
}

template <class F>
void gelu_backward_in_place(F* d, const F* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) store_f32(d[i], load_f32(d[i]) * gelu_tanh_derivative(load_f32(x[i])));
}

template <class F>
void relu(F* out, const F* x, std::int64_t n) {
  // Written so that NaN passes through, as in PyTorch's relu (clamp_min).
  for (std::int64_t i = 0; i < n; ++i) store_f32(out[i], load_f32(x[i]) <= 0.f ? 0.f : load_f32(x[i]));
}

template <class F>
void relu_backward(F* dx, const F* x, const F* dout, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (load_f32(x[i]) > 0.f) store_f32(dx[i], load_f32(dx[i]) + load_f32(dout[i]));
  }
}

template <class F>
void add(F* out, const F* a, const F* b, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) store_f32(out[i], load_f32(a[i]) + load_f32(b[i]));
}

template <class F>
void scale(F* out, const F* x, float alpha, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) store_f32(out[i], alpha * load_f32(x[i]));
}

template <class F>
void add_scaled(float* out, const F* x, float alpha, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] += alpha * load_f32(x[i]);
}

template <class Out, class In>
void cast(Out* out, const In* in, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) store_f32(out[i], load_f32(in[i]));
}

template <class F>
void fill(F* t, float value, std::int64_t n) {
  F v;
  store_f32(v, value);
  for (std::int64_t i = 0; i < n; ++i) t[i] = v;
}

void copy(std::byte* dst, const std::byte* src, std::int64_t bytes) {
  std::memmove(dst, src, static_cast<std::size_t>(bytes));  // src and dst may be the same range
}

}  // namespace cpu

double elem_size(const Tensor& t) { return static_cast<double>(dtype_size(t.dtype())); }

// The checks of a unary op: x float, out of x's shape and dtype (or x itself).
void expect_unary(std::string_view op, const Tensor& x, const Tensor& out) {
  expect_floating(op, "x", x);
  expect_like(op, "out", out, "x", x);
  expect_in_place_or_disjoint(op, "out", out, "x", x);
}

// The checks of an activation's backward: dout and dx like x; dx may be dout or x itself.
void expect_backward(std::string_view op, const Tensor& x, const Tensor& dout, const Tensor& dx) {
  expect_floating(op, "x", x);
  expect_like(op, "dout", dout, "x", x);
  expect_like(op, "dx", dx, "x", x);
  expect_in_place_or_disjoint(op, "dx", dx, "x", x);
  expect_in_place_or_disjoint(op, "dx", dx, "dout", dout);
}

// The checks of bias_add: x [N, C] float, bias [C] of x's dtype, and an output `out` of x's shape and dtype that
// is x itself or disjoint from it, and never overlaps bias.
void expect_bias_rows(std::string_view op, const Tensor& x, const Tensor& bias, std::string_view out_role,
                      const Tensor& out) {
  expect_float(op, "x", x, 2, "[N, C]");
  expect_tensor(op, "bias", bias, {x.dim(1)}, x.dtype());
  expect_like(op, out_role, out, "x", x);
  expect_in_place_or_disjoint(op, out_role, out, "x", x);
  if (out.overlaps(bias)) fail(op, ": ", out_role, " ", out.describe(), " overlaps bias ", bias.describe());
}

// The CUDA launchers an activation and its backward share the signature of.
using ActivationKernel = void (*)(CUstream_st*, DType, void*, const void*, std::int64_t);
using ActivationBackwardKernel = void (*)(CUstream_st*, DType, void*, const void*, const void*, std::int64_t);

// out = f(x) element by element, `flops` per element: the front-end every activation shares.
// `kernel(out, x, n)` is called with the storage type of x's dtype; `cuda_kernel` is the CUDA launcher,
// passed as FSDPLAB_CUDA_BODY(cuda::f) (nullptr in a build without the CUDA backend).
template <class Kernel>
void launch_activation(Stream s, std::string_view op, const Tensor& x, const Tensor& out, double flops, Kernel kernel,
                       ActivationKernel cuda_kernel) {
  expect_unary(op, x, out);
  const double n = static_cast<double>(x.numel());
  const OpCost cost{.flops = flops * n, .bytes = 2 * n * elem_size(x), .dtype = x.dtype()};
  OpBody body{.host = [&] {
    dispatch_float(x.dtype(), [&](auto zero) {
      using F = decltype(zero);
      kernel(out.data<F>(), x.data<F>(), x.numel());
    });
  }};
  if (cuda_kernel)
    body.cuda = [&](CUstream_st* stream) { cuda_kernel(stream, x.dtype(), out.raw(), x.raw(), x.numel()); };
  launch_op(s, std::string(op), cost, {{&x}, {&out}}, body);
}

// dx += f'(x) * dout: the backward of an activation. `kernel(dx, x, dout, n)`; `cuda_kernel` as above.
template <class Kernel>
void launch_activation_backward(Stream s, std::string_view op, const Tensor& x, const Tensor& dout, const Tensor& dx,
                                double flops, Kernel kernel, ActivationBackwardKernel cuda_kernel) {
  expect_backward(op, x, dout, dx);
  const double n = static_cast<double>(x.numel());
  const OpCost cost{.flops = flops * n, .bytes = 4 * n * elem_size(x), .dtype = x.dtype()};
  OpBody body{.host = [&] {
    dispatch_float(x.dtype(), [&](auto zero) {
      using F = decltype(zero);
      kernel(dx.data<F>(), x.data<F>(), dout.data<F>(), x.numel());
    });
  }};
  if (cuda_kernel)
    body.cuda = [&](CUstream_st* stream) { cuda_kernel(stream, x.dtype(), dx.raw(), x.raw(), dout.raw(), x.numel()); };
  launch_op(s, std::string(op), cost, {{&x, &dout, &dx}, {&dx}}, body);
}

}  // namespace

void bias_add(Stream s, const Tensor& x, const Tensor& bias, const Tensor& out) {
  constexpr std::string_view op = "bias_add";
  expect_bias_rows(op, x, bias, "out", out);
  const double n = static_cast<double>(x.numel());
  const OpCost cost{
      .flops = n, .bytes = (2 * n + static_cast<double>(bias.numel())) * elem_size(x), .dtype = x.dtype()};
  launch_op(s, std::string(op), cost, {{&x, &bias}, {&out}}, {.host = [&] {
    dispatch_float(x.dtype(), [&](auto zero) {
      using F = decltype(zero);
      cpu::bias_add(out.data<F>(), x.data<F>(), bias.data<F>(), x.dim(0), x.dim(1));
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::bias_add(stream, x.dtype(), out.raw(), x.raw(), bias.raw(), x.dim(0), x.dim(1));
  })});
}

void bias_backward(Stream s, const Tensor& dout, const Tensor& dbias) {
  constexpr std::string_view op = "bias_backward";
  expect_float(op, "dout", dout, 2, "[N, C]");
  expect_tensor(op, "dbias", dbias, {dout.dim(1)}, dout.dtype());
  if (dbias.overlaps(dout)) fail(op, ": dbias ", dbias.describe(), " overlaps dout ", dout.describe());
  const double n = static_cast<double>(dout.numel());
  const OpCost cost{
      .flops = n, .bytes = (n + 2 * static_cast<double>(dbias.numel())) * elem_size(dout), .dtype = dout.dtype()};
  launch_op(s, std::string(op), cost, {{&dout, &dbias}, {&dbias}}, {.host = [&] {
    dispatch_float(dout.dtype(), [&](auto zero) {
      using F = decltype(zero);
      cpu::bias_backward(dbias.data<F>(), dout.data<F>(), dout.dim(0), dout.dim(1));
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::bias_backward(stream, dout.dtype(), dbias.raw(), dout.raw(), dout.dim(0), dout.dim(1));
  })});
}

void gelu(Stream s, const Tensor& x, const Tensor& out) {
  launch_activation(s, "gelu", x, out, 8, [](auto* o, const auto* i, std::int64_t n) { cpu::gelu(o, i, n); },
                    FSDPLAB_CUDA_BODY(cuda::gelu));
}

void gelu_backward(Stream s, const Tensor& x, const Tensor& dout, const Tensor& dx) {
  launch_activation_backward(
      s, "gelu_backward", x, dout, dx, 16,
      [](auto* d, const auto* i, const auto* g, std::int64_t n) { cpu::gelu_backward(d, i, g, n); },
      FSDPLAB_CUDA_BODY(cuda::gelu_backward));
}

void gelu_backward_in_place(Stream s, const Tensor& x, const Tensor& d) {
  constexpr std::string_view op = "gelu_backward_in_place";
  expect_floating(op, "x", x);
  expect_like(op, "d", d, "x", x);
  if (d.overlaps(x)) fail(op, ": d ", d.describe(), " overlaps x ", x.describe());
  const double n = static_cast<double>(x.numel());
  // gelu_backward's FLOPs; x and d read, d written (gelu_backward into zeros also reads and writes the zeros).
  const OpCost cost{.flops = 16 * n, .bytes = 3 * n * elem_size(x), .dtype = x.dtype()};
  launch_op(s, std::string(op), cost, {{&x, &d}, {&d}}, {.host = [&] {
    dispatch_float(x.dtype(), [&](auto zero) {
      using F = decltype(zero);
      cpu::gelu_backward_in_place(d.data<F>(), x.data<F>(), x.numel());
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::gelu_backward_in_place(stream, x.dtype(), d.raw(), x.raw(), x.numel());
  })});
}

void relu(Stream s, const Tensor& x, const Tensor& out) {
  launch_activation(s, "relu", x, out, 1, [](auto* o, const auto* i, std::int64_t n) { cpu::relu(o, i, n); },
                    FSDPLAB_CUDA_BODY(cuda::relu));
}

void relu_backward(Stream s, const Tensor& x, const Tensor& dout, const Tensor& dx) {
  launch_activation_backward(
      s, "relu_backward", x, dout, dx, 2,
      [](auto* d, const auto* i, const auto* g, std::int64_t n) { cpu::relu_backward(d, i, g, n); },
      FSDPLAB_CUDA_BODY(cuda::relu_backward));
}

void add(Stream s, const Tensor& a, const Tensor& b, const Tensor& out) {
  constexpr std::string_view op = "add";
  expect_floating(op, "a", a);
  expect_like(op, "b", b, "a", a);
  expect_like(op, "out", out, "a", a);
  expect_in_place_or_disjoint(op, "out", out, "a", a);
  expect_in_place_or_disjoint(op, "out", out, "b", b);
  const double n = static_cast<double>(a.numel());
  const OpCost cost{.flops = n, .bytes = 3 * n * elem_size(a), .dtype = a.dtype()};
  launch_op(s, std::string(op), cost, {{&a, &b}, {&out}}, {.host = [&] {
    dispatch_float(a.dtype(), [&](auto zero) {
      using F = decltype(zero);
      cpu::add(out.data<F>(), a.data<F>(), b.data<F>(), a.numel());
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::add(stream, a.dtype(), out.raw(), a.raw(), b.raw(), a.numel());
  })});
}

void scale(Stream s, const Tensor& x, float alpha, const Tensor& out) {
  constexpr std::string_view op = "scale";
  expect_unary(op, x, out);
  const double n = static_cast<double>(x.numel());
  const OpCost cost{.flops = n, .bytes = 2 * n * elem_size(x), .dtype = x.dtype()};
  launch_op(s, std::string(op), cost, {{&x}, {&out}}, {.host = [&] {
    dispatch_float(x.dtype(), [&](auto zero) {
      using F = decltype(zero);
      cpu::scale(out.data<F>(), x.data<F>(), alpha, x.numel());
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::scale(stream, x.dtype(), out.raw(), x.raw(), alpha, x.numel());
  })});
}

void add_scaled(Stream s, const Tensor& x, float alpha, const Tensor& out) {
  constexpr std::string_view op = "add_scaled";
  expect_floating(op, "x", x);
  if (out.dtype() != DType::f32 || !(out.shape() == x.shape()))
    fail(op, ": out must be f32 of x's shape ", x.describe(), ", got ", out.describe());
  expect_in_place_or_disjoint(op, "out", out, "x", x);
  const double n = static_cast<double>(x.numel());
  const OpCost cost{.flops = 2 * n, .bytes = n * (elem_size(x) + 8), .dtype = DType::f32};
  launch_op(s, std::string(op), cost, {{&x, &out}, {&out}}, {.host = [&] {
    dispatch_float(x.dtype(), [&](auto zero) {
      using F = decltype(zero);
      cpu::add_scaled(out.f32(), x.data<F>(), alpha, x.numel());
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::add_scaled(stream, out.f32(), x.dtype(), x.raw(), alpha, x.numel());
  })});
}

void cast(Stream s, const Tensor& in, const Tensor& out) {
  constexpr std::string_view op = "cast";
  expect_floating(op, "in", in);
  expect_floating(op, "out", out);
  if (!(out.shape() == in.shape()))
    fail(op, ": out must have the shape of in ", in.describe(), ", got ", out.describe());
  expect_in_place_or_disjoint(op, "out", out, "in", in);
  const double n = static_cast<double>(in.numel());
  const OpCost cost{.flops = n, .bytes = n * (elem_size(in) + elem_size(out)), .dtype = in.dtype()};
  launch_op(s, std::string(op), cost, {{&in}, {&out}}, {.host = [&] {
    dispatch_float(in.dtype(), [&](auto in_zero) {
      dispatch_float(out.dtype(), [&](auto out_zero) {
        cpu::cast(out.data<decltype(out_zero)>(), in.data<decltype(in_zero)>(), in.numel());
      });
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::cast(stream, out.dtype(), out.raw(), in.dtype(), in.raw(), in.numel());
  })});
}

void fill(Stream s, const Tensor& t, float value) {
  constexpr std::string_view op = "fill";
  expect_floating(op, "t", t);
  const OpCost cost{.flops = 0, .bytes = static_cast<double>(t.nbytes()), .dtype = t.dtype()};
  launch_op(s, std::string(op), cost, {{}, {&t}}, {.host = [&] {
    dispatch_float(t.dtype(), [&](auto zero) {
      using F = decltype(zero);
      cpu::fill(t.data<F>(), value, t.numel());
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::fill(stream, t.dtype(), t.raw(), value, t.numel());
  })});
}

void copy(Stream s, const Tensor& src, const Tensor& dst) {
  constexpr std::string_view op = "copy";
  if (!(src.defined() && dst.defined() && src.dtype() == dst.dtype() && src.numel() == dst.numel()))
    fail(op, ": dst must have the dtype and element count of src ", src.describe(), ", got ", dst.describe());
  expect_in_place_or_disjoint(op, "dst", dst, "src", src);
  const OpCost cost{.flops = 0, .bytes = 2 * static_cast<double>(src.nbytes()), .dtype = src.dtype()};
  launch_op(s, std::string(op), cost, {{&src}, {&dst}},
            {.host = [&] { cpu::copy(dst.raw(), src.raw(), src.nbytes()); },
             .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
               cuda::copy_bytes(stream, dst.raw(), src.raw(), src.nbytes());
             })});
}

}  // namespace fsdplab
