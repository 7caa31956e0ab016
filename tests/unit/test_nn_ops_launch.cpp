// What every NN op tells the device: the ranges it reads and writes (all the race detector sees)
// and its cost; and that on a dry run, with no data anywhere, each launches without touching any.
#include "engine/tensor/attention.hpp"
#include "engine/tensor/embedding.hpp"
#include "engine/tensor/flash_attention.hpp"
#include "engine/tensor/layernorm.hpp"
#include "engine/tensor/loss.hpp"
#include "engine/tensor/softmax.hpp"
#include "nn_ops_testing.hpp"

namespace fsdplab {
namespace {

using namespace testing;

// The last op launched on `dev` declared exactly these tensors, in this order.
::testing::AssertionResult declared(const Device& dev, const std::string& name, std::vector<const Tensor*> reads,
                                    std::vector<const Tensor*> writes) {
  const OpRecord& op = dev.ops().back();
  if (op.name != name) return ::testing::AssertionFailure() << "last op is '" << op.name << "', not '" << name << "'";
  auto same = [](const std::vector<Access>& got, const std::vector<const Tensor*>& want) {
    if (got.size() != want.size()) return false;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const Access a = want[i]->access();
      if (got[i].block != a.block || got[i].offset != a.offset || got[i].bytes != a.bytes) return false;
    }
    return true;
  };
  if (!same(op.reads, reads)) return ::testing::AssertionFailure() << name << ": reads differ";
  if (!same(op.writes, writes)) return ::testing::AssertionFailure() << name << ": writes differ";
  return ::testing::AssertionSuccess();
}

TEST(NnOpsLaunch, DryRunDeclaresEveryOperandAndTouchesNoData) {
  // On a dry run blocks have no memory: any data access outside an op's body would throw.
  auto dev = make_sim_device(0, SimDeviceOptions{.dry_run = true});
  const Stream s = compute(*dev);
  auto make = [&](Shape shape, DType dt = DType::bf16) {
    return Tensor::empty(*dev, std::move(shape), dt, MemTag::activation);
  };
  constexpr std::int64_t B = 2, T = 16, C = 32, NH = 4, V = 50, N = B * T;

  Tensor x = make({N, C}), w = make({C}), b = make({C}), out = make({N, C});
  Tensor mean = make({N}, DType::f32), rstd = make({N}, DType::f32);
  Tensor dout = make({N, C}), dx = make({N, C}), dw = make({C}), db = make({C});
  layernorm(s, x, w, b, out, mean, rstd);
  EXPECT_TRUE(declared(*dev, "layernorm", {&x, &w, &b}, {&out, &mean, &rstd}));
  layernorm_backward(s, dout, x, w, mean, rstd, dx, dw, db);
  EXPECT_TRUE(declared(*dev, "layernorm_backward", {&dout, &x, &w, &mean, &rstd}, {&dx, &dw, &db}));

  softmax(s, x, out);
  EXPECT_TRUE(declared(*dev, "softmax", {&x}, {&out}));
  softmax_backward(s, out, dout, dx);
  EXPECT_TRUE(declared(*dev, "softmax_backward", {&out, &dout}, {&dx}));

  Tensor qkv = make({B, T, 3 * C}), y = make({B, T, C}), att = make({B, NH, T, T}, DType::f32);
  Tensor dy = make({B, T, C}), dqkv = make({B, T, 3 * C});
  attention(s, qkv, y, att, NH);
  EXPECT_TRUE(declared(*dev, "attention", {&qkv}, {&y, &att}));
  attention_backward(s, dy, qkv, att, dqkv, NH);
  EXPECT_TRUE(declared(*dev, "attention_backward", {&dy, &qkv, &att}, {&dqkv}));
  Tensor head_lse = make({B, NH, T}, DType::f32);
  flash_attention(s, qkv, y, head_lse, NH);
  EXPECT_TRUE(declared(*dev, "flash_attention", {&qkv}, {&y, &head_lse}));
  flash_attention_backward(s, dy, qkv, y, head_lse, dqkv, NH);
  EXPECT_TRUE(declared(*dev, "flash_attention_backward", {&dy, &qkv, &y, &head_lse}, {&dqkv}));

  Tensor table = make({V, C}), ids = make({N}, DType::i32), dtable = make({V, C});
  embedding(s, table, ids, out);
  EXPECT_TRUE(declared(*dev, "embedding", {&table, &ids}, {&out}));
  embedding_backward(s, dout, ids, dtable);
  EXPECT_TRUE(declared(*dev, "embedding_backward", {&dout, &ids}, {&dtable}));
  Tensor slice = make({C}, DType::f32);
  embedding_backward_slice(s, dout, ids, V, C, 0.5f, slice);
  EXPECT_TRUE(declared(*dev, "embedding_backward_slice", {&dout, &ids}, {&slice}));

  Tensor logits = make({N, V}), loss = make({1}, DType::f32), lse = make({N}, DType::f32), dlogits = make({N, V});
  cross_entropy(s, logits, V, ids, loss, lse);
  EXPECT_TRUE(declared(*dev, "cross_entropy", {&logits, &ids}, {&loss, &lse}));
  cross_entropy_backward(s, logits, V, ids, lse, 1.f, dlogits);
  EXPECT_TRUE(declared(*dev, "cross_entropy_backward", {&logits, &ids, &lse}, {&dlogits}));
  mse_loss(s, x, out, loss);
  EXPECT_TRUE(declared(*dev, "mse_loss", {&x, &out}, {&loss}));
  mse_loss_backward(s, x, out, 1.f, dx);
  EXPECT_TRUE(declared(*dev, "mse_loss_backward", {&x, &out}, {&dx}));

  for (const OpRecord& op : dev->ops()) {
    EXPECT_EQ(op.cost.dtype, DType::bf16) << op.name;
    EXPECT_GT(op.cost.bytes, 0) << op.name;
    EXPECT_GT(op.end, op.begin) << op.name << " takes time on the virtual clock";
  }
}

TEST(NnOpsLaunch, AttentionCountsItsGemmsOverTheFullSquare) {
  // Two GEMMs forward and four backward of 2 * T * T * hd per (batch, head), causal mask or not,
  // plus ~5 flops per score for the softmax; at the matmul peak.
  auto dev = make_sim_device(0, SimDeviceOptions{.dry_run = true});
  constexpr std::int64_t B = 3, T = 8, C = 24, NH = 2, HD = C / NH;
  Tensor qkv = Tensor::empty(*dev, {B, T, 3 * C}, DType::f32, MemTag::activation);
  Tensor y = Tensor::empty(*dev, {B, T, C}, DType::f32, MemTag::activation);
  Tensor att = Tensor::empty(*dev, {B, NH, T, T}, DType::f32, MemTag::activation);
  Tensor dqkv = Tensor::empty(*dev, {B, T, 3 * C}, DType::f32, MemTag::activation);
  attention(compute(*dev), qkv, y, att, NH);
  attention_backward(compute(*dev), y, qkv, att, dqkv, NH);
  const double gemm = 2.0 * B * NH * T * T * HD, scores = B * NH * T * T;
  EXPECT_DOUBLE_EQ(dev->ops()[0].cost.flops, 2 * gemm + 5 * scores);
  EXPECT_DOUBLE_EQ(dev->ops()[1].cost.flops, 4 * gemm + 5 * scores);
  EXPECT_TRUE(dev->ops()[0].cost.matmul);
  EXPECT_TRUE(dev->ops()[1].cost.matmul);
}

TEST(NnOpsLaunch, OutputsMustNotAliasOtherOperands) {
  // Views of one buffer: the kernels would read inputs they have already overwritten.
  auto dev = make_sim_device(0, SimDeviceOptions{.dry_run = true});
  const Stream s = compute(*dev);
  auto storage = std::make_shared<Storage>(*dev, 4096, MemTag::activation, "arena");
  auto at = [&](std::int64_t offset, Shape shape, DType dt = DType::f32) {
    return Tensor::view_of(storage, offset, std::move(shape), dt, "arena");
  };
  Tensor x = at(0, {4, 8}), y = at(32, {4, 8}), x_shifted = at(16, {4, 8});
  EXPECT_NO_THROW(softmax(s, x, y)) << "disjoint views of one buffer are fine";
  EXPECT_TRUE(throws_error([&] { softmax(s, x, x); }, {"softmax: y 'arena' [4, 8] f32 shares memory with x"}));
  EXPECT_TRUE(throws_error([&] { softmax(s, x, x_shifted); }, {"y", "shares memory with x"}));
  EXPECT_TRUE(throws_error([&] { softmax_backward(s, y, x, x); }, {"softmax_backward: dx", "shares memory with dy"}));

  Tensor w = at(64, {8}), b = at(72, {8}), mean = at(80, {4}), rstd = at(84, {4});
  EXPECT_TRUE(throws_error([&] { layernorm(s, x, w, b, y, mean, mean); },
                           {"layernorm: mean 'arena' [4] f32 shares memory with rstd"}));

  Tensor qkv = at(0, {1, 4, 24}), out = at(96, {1, 4, 8}), att = at(128, {1, 2, 4, 4});
  EXPECT_TRUE(throws_error([&] { attention_backward(s, out, qkv, att, qkv, 2); },
                           {"attention_backward: dqkv", "shares memory with qkv"}));

  Tensor ids = at(200, {4}, DType::i32), table = at(256, {10, 8});
  EXPECT_TRUE(throws_error([&] { embedding(s, table, ids, table.rows(2, 4)); },
                           {"embedding: out", "shares memory with table"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy(s, x, x.dim(1), ids, at(3, {1}), mean); },
                           {"cross_entropy: loss", "shares memory with logits"}));
  EXPECT_EQ(dev->ops().size(), 1u) << "only the disjoint softmax launched";
}

}  // namespace
}  // namespace fsdplab
