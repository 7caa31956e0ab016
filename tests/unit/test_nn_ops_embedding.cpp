// embedding, embedding_backward and embedding_backward_slice: rows gathered, gradients scattered and summed per id.
#include "engine/tensor/embedding.hpp"

#include "nn_ops_testing.hpp"

namespace fsdplab {
namespace {

using namespace testing;

constexpr int V = 7, C = 6;
// Repeats (3 three times, 0 twice) exercise the summing; 6 is the last row.
const std::vector<std::int32_t> kIds = {3, 0, 3, 6, 1, 3, 0};
const int N = static_cast<int>(kIds.size());

Tensor ids_tensor(Device& dev, const std::vector<std::int32_t>& ids) {
  Tensor t = Tensor::empty(dev, {static_cast<std::int64_t>(ids.size())}, DType::i32, MemTag::activation, "ids");
  t.copy_from(std::span<const std::int32_t>(ids));
  return t;
}

struct Outputs {
  std::vector<float> out, dtable;
};

Outputs run(const std::vector<float>& table, const std::vector<float>& dout, const std::vector<float>& dtable0,
            DType dt, DeviceKind kind) {
  auto dev = make_test_device(kind);
  Tensor ttable = tensor_from(*dev, {V, C}, table, dt), ids = ids_tensor(*dev, kIds), out = leftovers(*dev, {N, C}, dt);
  embedding(compute(*dev), ttable, ids, out);
  Tensor tdout = tensor_from(*dev, {N, C}, dout, dt), tdtable = tensor_from(*dev, {V, C}, dtable0, dt);
  embedding_backward(compute(*dev), tdout, ids, tdtable);
  return {read(out), read(tdtable)};
}

std::vector<double> gather_ref(const std::vector<float>& table) {
  std::vector<double> out;
  for (std::int32_t id : kIds) out.insert(out.end(), table.begin() + id * C, table.begin() + (id + 1) * C);
  return out;
}

// The gradient of sum(embedding(table) * dout) with respect to the table, numerically.
std::vector<double> expected_dtable(const std::vector<float>& dout, const std::vector<float>& dtable0) {
  const auto table = random_values(V * C, 30);  // the function is linear: any point will do
  return plus(dtable0, numeric_grad(
                           [&](std::span<const float> t) {
                             const auto out = gather_ref(std::vector<float>(t.begin(), t.end()));
                             double s = 0;
                             for (std::size_t i = 0; i < out.size(); ++i) s += out[i] * dout[i];
                             return s;
                           },
                           table));
}

// The numerical tests run on every device; the errors, found by the host body's checks, on the sim device.
class NnOpsEmbeddingTest : public OnEachDevice {};

TEST_P(NnOpsEmbeddingTest, ForwardGathersRowsAndBackwardSumsThemPerId) {
  const auto table = random_values(V * C, 31), dout = random_values(N * C, 32), dtable0 = random_values(V * C, 33);
  const Outputs got = run(table, dout, dtable0, DType::f32, GetParam());
  EXPECT_TRUE(all_close(got.out, gather_ref(table), 0));
  EXPECT_TRUE(all_close(got.dtable, expected_dtable(dout, dtable0), kGradAtol, kGradRtol));
}

TEST_P(NnOpsEmbeddingTest, Bf16GathersExactlyAndRoundsEachGradientOnce) {
  // A gather copies bf16 values unchanged; the gradient of a row is summed in f32 and rounded once.
  const auto table = rounded_to_bf16(random_values(V * C, 34));
  const auto dout = rounded_to_bf16(random_values(N * C, 35)), dtable0 = rounded_to_bf16(random_values(V * C, 36));
  const Outputs got = run(table, dout, dtable0, DType::bf16, GetParam());
  EXPECT_TRUE(all_close(got.out, gather_ref(table), 0));
  EXPECT_TRUE(all_close(got.dtable, expected_dtable(dout, dtable0), kGradAtol, kBf16Rtol + kGradRtol));
}

TEST_P(NnOpsEmbeddingTest, ManySmallBf16GradientsAreNotLost) {
  // 64 positions of id 2, each adding 2^-8 to a bf16 1.0: added one by one, each would be a tie at
  // half an ulp of 1.0 and round back to 1.0; summed first, they add 0.25 exactly.
  auto dev = device();
  const std::vector<std::int32_t> ids(64, 2);
  Tensor tids = ids_tensor(*dev, ids);
  Tensor dout = tensor_from(*dev, {64, C}, std::vector<float>(64 * C, 1.f / 256), DType::bf16);
  Tensor dtable = tensor_from(*dev, {V, C}, std::vector<float>(V * C, 1.f), DType::bf16);
  embedding_backward(compute(*dev), dout, tids, dtable);
  const auto got = read(dtable);
  for (int v = 0; v < V; ++v)
    for (int c = 0; c < C; ++c) EXPECT_EQ(got[v * C + c], v == 2 ? 1.25f : 1.f) << "row " << v << ", column " << c;
}

TEST_P(NnOpsEmbeddingTest, ManyPositionsSumInPositionOrderOverWideRows) {
  // More positions than a block scans at once, rows wider than a block's columns, ids repeated at random
  // distances: each id's rows summed in f32 in position order and added once, bit for bit, on every device.
  auto dev = device();
  const int n = 700, v = 40, c = 1100;
  std::mt19937 rng(38);
  std::vector<std::int32_t> ids(n);
  for (std::int32_t& id : ids) id = static_cast<std::int32_t>(rng() % (v - 1));  // row v - 1 is never used
  const auto table = random_values(v * c, 39), dout = random_values(n * c, 40), dtable0 = random_values(v * c, 41);
  std::vector<float> gathered, want(dtable0);
  for (int id = 0; id < v; ++id) {
    std::vector<float> sum(c, 0.f);
    for (int p = 0; p < n; ++p)
      if (ids[p] == id)
        for (int j = 0; j < c; ++j) sum[j] += dout[p * c + j];
    for (int j = 0; j < c; ++j) want[id * c + j] += sum[j];
  }
  for (std::int32_t id : ids) gathered.insert(gathered.end(), table.begin() + id * c, table.begin() + (id + 1) * c);
  Tensor tids = ids_tensor(*dev, ids), ttable = tensor_from(*dev, {v, c}, table), out = leftovers(*dev, {n, c});
  embedding(compute(*dev), ttable, tids, out);
  EXPECT_EQ(read(out), gathered);
  Tensor tdtable = tensor_from(*dev, {v, c}, dtable0);
  embedding_backward(compute(*dev), tensor_from(*dev, {n, c}, dout), tids, tdtable);
  EXPECT_EQ(read(tdtable), want);
}

TEST_P(NnOpsEmbeddingTest, ASliceGetsItsElementsOfTheSumsScaledAndNothingElse) {
  // Slices that begin and end mid-row, as an FSDP shard cuts the table: each gets alpha times the elements of the
  // whole table's gradient that fall in it, added to what it held, bit for bit the host's sums on every device.
  auto dev = device();
  for (const DType dt : {DType::f32, DType::bf16}) {
    const auto dout = rounded_to_bf16(random_values(N * C, 42));
    std::vector<float> sums(V * C, 0.f);
    for (int p = 0; p < N; ++p)
      for (int c = 0; c < C; ++c) sums[kIds[p] * C + c] += dout[p * C + c];  // position order, in f32
    Tensor ids = ids_tensor(*dev, kIds), tdout = tensor_from(*dev, {N, C}, dout, dt);
    for (const auto& [first, count] : {std::pair{0, V * C}, std::pair{C + 2, 2 * C + 1}, std::pair{5 * C - 1, 2}}) {
      const auto slice0 = random_values(count, 43);
      Tensor slice = tensor_from(*dev, {count}, slice0);
      embedding_backward_slice(compute(*dev), tdout, ids, V, first, 0.5f, slice);
      std::vector<float> want(slice0);
      for (int i = 0; i < count; ++i) want[i] += 0.5f * sums[first + i];
      EXPECT_EQ(read(slice), want) << dtype_name(dt) << " slice [" << first << ", " << first + count << ")";
    }
  }
}

TEST(NnOpsEmbedding, AnIdOutsideTheTableIsAnErrorAndWritesNothing) {
  auto dev = make_sim_device();
  Tensor table = tensor_from(*dev, {V, C}, random_values(V * C, 37)), out = zeros(*dev, {3, C});
  Tensor too_big = ids_tensor(*dev, {1, 7, 2}), negative = ids_tensor(*dev, {-1, 0, 0});
  const Stream s = compute(*dev);
  EXPECT_TRUE(throws_error([&] { embedding(s, table, too_big, out); },
                           {"embedding", "token id 7 at position 1", "outside [0, 7)", "[7, 6] f32"}));
  EXPECT_TRUE(throws_error([&] { embedding(s, table, negative, out); }, {"token id -1 at position 0", "[0, 7)"}));
  EXPECT_TRUE(throws_error([&] { embedding_backward(s, out, too_big, table); },
                           {"embedding_backward", "token id 7", "[0, 7)"}));
  Tensor slice = zeros(*dev, {2 * C});
  EXPECT_TRUE(throws_error([&] { embedding_backward_slice(s, out, too_big, V, C, 1.f, slice); },
                           {"embedding_backward_slice", "token id 7", "[0, 7) of the table [7, 6]"}));
  EXPECT_TRUE(all_close(read(out), std::vector<double>(3 * C, 0.0), 0)) << "row 0 would be copied before the bad id";
  EXPECT_TRUE(all_close(read(slice), std::vector<double>(2 * C, 0.0), 0));
}

TEST(NnOpsEmbedding, MismatchedOperandsAreErrors) {
  auto dev = make_sim_device();
  Tensor table = zeros(*dev, {V, C}), out = zeros(*dev, {3, C}), ids = ids_tensor(*dev, {0, 1, 2});
  Tensor float_ids = zeros(*dev, {3}), ids_2d = Tensor::empty(*dev, {1, 3}, DType::i32, MemTag::activation);
  Tensor out_wide = zeros(*dev, {3, C + 1}), out_bf16 = zeros(*dev, {3, C}, DType::bf16);
  const Stream s = compute(*dev);
  EXPECT_TRUE(throws_error([&] { embedding(s, table, float_ids, out); }, {"ids must be [N] i32", "[3] f32"}));
  EXPECT_TRUE(throws_error([&] { embedding(s, table, ids_2d, out); }, {"ids must be [N] i32", "[1, 3] i32"}));
  EXPECT_TRUE(throws_error([&] { embedding(s, table, ids, out_wide); }, {"out must be [3, 6] f32", "[3, 7] f32"}));
  EXPECT_TRUE(throws_error([&] { embedding(s, table, ids, out_bf16); }, {"out must be [3, 6] f32", "[3, 6] bf16"}));
  EXPECT_TRUE(throws_error([&] { embedding_backward(s, out_wide, ids, table); },
                           {"embedding_backward", "dout must be [3, 6] f32", "[3, 7] f32"}));
  Tensor slice = zeros(*dev, {C}), slice_bf16 = zeros(*dev, {C}, DType::bf16);
  EXPECT_TRUE(throws_error(
      [&] { embedding_backward_slice(s, out, ids, V, (V - 1) * C + 1, 1.f, slice); },
      {"embedding_backward_slice", "the slice must lie in the table [7, 6] (42 elements)", "got elements [37, 43)"}));
  EXPECT_TRUE(
      throws_error([&] { embedding_backward_slice(s, out, ids, V, -1, 1.f, slice); }, {"got elements [-1, 5)"}));
  EXPECT_TRUE(throws_error([&] { embedding_backward_slice(s, out, ids, V, 0, 1.f, slice_bf16); },
                           {"slice must be [6] f32", "[6] bf16"}));
  EXPECT_TRUE(dev->ops().empty());
}

FSDPLAB_ON_EACH_DEVICE(NnOpsEmbeddingTest);

}  // namespace
}  // namespace fsdplab
