#include "engine/tensor/embedding.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "engine/cuda/loss_kernels.hpp"
#include "engine/tensor/expect.hpp"
#include "engine/tensor/float_io.hpp"
#include "engine/tensor/launch.hpp"

namespace fsdplab {
namespace {
namespace cpu {

template <class F>
void embedding_forward(F* out, const F* table, const std::int32_t* ids, std::int64_t N, std::int64_t C) {
  for (std::int64_t n = 0; n < N; ++n) std::copy_n(table + ids[n] * C, C, out + n * C);
}

// Each id's rows of dout summed in f32, in position order, and handed to add_row(id, sums) once: the order a
// CUDA kernel keeps too (sorting the same way rather than using atomics, whose order varies from run to run).
template <class F, class AddRow>
void sum_rows_by_id(const F* dout, const std::int32_t* ids, std::int64_t N, std::int64_t C, AddRow add_row) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(N));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return ids[a] < ids[b]; });
  std::vector<float> sum(static_cast<std::size_t>(C));
  for (std::size_t first = 0; first < order.size();) {
    const std::int32_t id = ids[order[first]];
    std::fill(sum.begin(), sum.end(), 0.f);
    std::size_t last = first;
    for (; last < order.size() && ids[order[last]] == id; ++last) {
      const F* row = dout + order[last] * C;
      for (std::int64_t c = 0; c < C; ++c) sum[static_cast<std::size_t>(c)] += load_f32(row[c]);
    }
    add_row(id, sum.data());
    first = last;
  }
}

template <class F>
void embedding_backward(F* dtable, const F* dout, const std::int32_t* ids, std::int64_t N, std::int64_t C) {
  sum_rows_by_id(dout, ids, N, C, [&](std::int32_t id, const float* sum) {
    F* drow = dtable + static_cast<std::int64_t>(id) * C;
    for (std::int64_t c = 0; c < C; ++c) store_f32(drow[c], load_f32(drow[c]) + sum[c]);
  });
}

template <class F>
void embedding_backward_slice(float* slice, std::int64_t first, std::int64_t count, float alpha, const F* dout,
                              const std::int32_t* ids, std::int64_t N, std::int64_t C) {
  sum_rows_by_id(dout, ids, N, C, [&](std::int32_t id, const float* sum) {
    const std::int64_t row = static_cast<std::int64_t>(id) * C - first;  // the row's first element in the slice
    for (std::int64_t c = std::max<std::int64_t>(0, -row); c < C && row + c < count; ++c)
      slice[row + c] += alpha * sum[c];
  });
}

}  // namespace cpu

// Every id must index a row of the table, of V rows (`table` describes it). Called in the op's body, before any
// output is written.
void check_ids(std::string_view op, const std::int32_t* ids, std::int64_t N, std::int64_t V, std::string_view table) {
  for (std::int64_t n = 0; n < N; ++n) {
    if (!(ids[n] >= 0 && ids[n] < V))
      fail(op, ": token id ", ids[n], " at position ", n, " is outside [0, ", V, ") of the table ", table);
  }
}

}  // namespace

void embedding(Stream s, const Tensor& table, const Tensor& ids, const Tensor& out) {
  constexpr std::string_view op = "embedding";
  expect_float(op, "table", table, 2, "[V, C]");
  const std::int64_t N = expect_indices(op, "ids", ids);
  const std::int64_t C = table.dim(1);
  const DType dt = table.dtype();
  expect_tensor(op, "out", out, {N, C}, dt);
  expect_disjoint(op, {{"table", &table}, {"ids", &ids}}, {{"out", &out}});

  // A gather: no arithmetic; the ids, N rows of the table read and N rows written.
  const OpCost cost{.flops = 0, .bytes = 4.0 * N + 2.0 * N * C * static_cast<double>(dtype_size(dt)), .dtype = dt};
  launch_op(s, std::string(op), cost, {{&table, &ids}, {&out}}, {.host = [&] {
    check_ids(op, ids.i32(), N, table.dim(0), table.describe());
    dispatch_float(dt, [&](auto zero) {
      using F = decltype(zero);
      cpu::embedding_forward(out.data<F>(), table.data<F>(), ids.i32(), N, C);
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::embedding(stream, dt, out.raw(), table.raw(), ids.i32(), N, C, table.dim(0));
  })});
}

void embedding_backward(Stream s, const Tensor& dout, const Tensor& ids, const Tensor& dtable) {
  constexpr std::string_view op = "embedding_backward";
  expect_float(op, "dtable", dtable, 2, "[V, C]");
  const std::int64_t N = expect_indices(op, "ids", ids);
  const std::int64_t C = dtable.dim(1);
  const DType dt = dtable.dtype();
  expect_tensor(op, "dout", dout, {N, C}, dt);
  expect_disjoint(op, {{"dout", &dout}, {"ids", &ids}}, {{"dtable", &dtable}});

  // One add per element of dout; dout and the ids read, at most N rows of dtable read and written.
  const double nc = static_cast<double>(N * C);
  const OpCost cost{.flops = nc, .bytes = 4.0 * N + 3 * nc * static_cast<double>(dtype_size(dt)), .dtype = dt};
  // Any row of dtable may be touched, so the whole table is declared written (read-modify-write).
  launch_op(s, std::string(op), cost, {{&dout, &ids}, {&dtable}}, {.host = [&] {
    check_ids(op, ids.i32(), N, dtable.dim(0), dtable.describe());
    dispatch_float(dt, [&](auto zero) {
      using F = decltype(zero);
      cpu::embedding_backward(dtable.data<F>(), dout.data<F>(), ids.i32(), N, C);
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::embedding_backward(stream, dt, dtable.raw(), dout.raw(), ids.i32(), N, C, dtable.dim(0));
  })});
}

void embedding_backward_slice(Stream s, const Tensor& dout, const Tensor& ids, std::int64_t V, std::int64_t first,
                              float alpha, const Tensor& slice) {
  constexpr std::string_view op = "embedding_backward_slice";
  const std::int64_t N = expect_indices(op, "ids", ids);
  expect_float(op, "dout", dout, 2, "[N, C]");
  const std::int64_t C = dout.dim(1), count = slice.numel();
  expect_tensor(op, "dout", dout, {N, C}, dout.dtype());
  expect_tensor(op, "slice", slice, {count}, DType::f32);
  if (V < 1 || first < 0 || first + count > V * C)
    fail(op, ": the slice must lie in the table [", V, ", ", C, "] (", V * C, " elements), got elements [", first, ", ",
         first + count, ")");
  expect_disjoint(op, {{"dout", &dout}, {"ids", &ids}}, {{"slice", &slice}});

  // One add per element of dout; dout and the ids read, at most N rows' worth of the slice read and written.
  const DType dt = dout.dtype();
  const double nc = static_cast<double>(N * C);
  const double touched = std::min(nc, static_cast<double>(count));
  const OpCost cost{
      .flops = nc, .bytes = 4.0 * N + nc * static_cast<double>(dtype_size(dt)) + 8 * touched, .dtype = dt};
  const std::string table = "[" + std::to_string(V) + ", " + std::to_string(C) + "]";
  launch_op(s, std::string(op), cost, {{&dout, &ids}, {&slice}}, {.host = [&] {
    check_ids(op, ids.i32(), N, V, table);
    dispatch_float(dt, [&](auto zero) {
      using F = decltype(zero);
      cpu::embedding_backward_slice(slice.data<float>(), first, count, alpha, dout.data<F>(), ids.i32(), N, C);
    });
  }, .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) {
    cuda::embedding_backward_slice(stream, dt, slice.data<float>(), first, count, alpha, dout.raw(), ids.i32(), N, C,
                                   V);
  })});
}

}  // namespace fsdplab
