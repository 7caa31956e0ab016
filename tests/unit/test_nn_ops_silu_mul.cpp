// silu_mul and silu_mul_backward (SwiGLU's gate) against a double-precision reference and finite
// differences; bf16 rounding once; operand errors.
#include "engine/tensor/silu_mul.hpp"

#include "nn_ops_testing.hpp"

namespace fsdplab {
namespace {

using namespace testing;

constexpr int N = 40;

double silu(double g) { return g / (1 + std::exp(-g)); }

std::vector<double> silu_mul_ref(std::span<const float> gate, std::span<const float> up) {
  std::vector<double> out(gate.size());
  for (std::size_t i = 0; i < gate.size(); ++i) out[i] = silu(gate[i]) * up[i];
  return out;
}

struct Inputs {
  std::vector<float> gate = random_values(N, 1, -6.f, 6.f);  // both tails of the sigmoid
  std::vector<float> up = random_values(N, 2, -2.f, 2.f);
  std::vector<float> dout = random_values(N, 3);

  Inputs rounded_to_bf16() const {
    Inputs r = *this;
    for (auto* v : {&r.gate, &r.up, &r.dout}) *v = testing::rounded_to_bf16(*v);
    return r;
  }
};

struct Outputs {
  std::vector<float> out, dgate, dup;
};

Outputs run(const Inputs& in, DType dt, DeviceKind kind) {
  auto dev = make_test_device(kind);
  Tensor gate = tensor_from(*dev, {4, N / 4}, in.gate, dt), up = tensor_from(*dev, {4, N / 4}, in.up, dt);
  Tensor out = leftovers(*dev, {4, N / 4}, dt);
  silu_mul(compute(*dev), gate, up, out);
  // The gradients start as leftovers: the backward must write every element.
  Tensor dout = tensor_from(*dev, {4, N / 4}, in.dout, dt), dgate = leftovers(*dev, {4, N / 4}, dt),
         dup = leftovers(*dev, {4, N / 4}, dt);
  silu_mul_backward(compute(*dev), gate, up, dout, dgate, dup);
  return {read(out), read(dgate), read(dup)};
}

struct ExpectedGrads {
  std::vector<double> dgate, dup;
};
ExpectedGrads expected_grads(const Inputs& in) {
  auto loss = [&](std::span<const float> gate, std::span<const float> up) {
    const auto out = silu_mul_ref(gate, up);
    double s = 0;
    for (std::size_t i = 0; i < out.size(); ++i) s += out[i] * in.dout[i];
    return s;
  };
  return {numeric_grad([&](std::span<const float> g) { return loss(g, in.up); }, in.gate),
          numeric_grad([&](std::span<const float> u) { return loss(in.gate, u); }, in.up)};
}

// The numerical tests run on every device; costs, accesses and errors on the sim device.
class NnOpsSiluMulTest : public OnEachDevice {};

TEST_P(NnOpsSiluMulTest, ForwardMatchesReference) {
  const Inputs in;
  const Outputs got = run(in, DType::f32, GetParam());
  EXPECT_TRUE(all_close(got.out, silu_mul_ref(in.gate, in.up), 1e-6, 1e-6));
}

TEST_P(NnOpsSiluMulTest, BackwardWritesTheFiniteDifferenceGradients) {
  const Inputs in;
  const Outputs got = run(in, DType::f32, GetParam());
  const ExpectedGrads want = expected_grads(in);
  EXPECT_TRUE(all_close(got.dgate, want.dgate, kGradAtol, kGradRtol));
  EXPECT_TRUE(all_close(got.dup, want.dup, kGradAtol, kGradRtol));
}

TEST_P(NnOpsSiluMulTest, Bf16IsTheF32ResultRoundedOnce) {
  const Inputs in = Inputs{}.rounded_to_bf16();
  const Outputs got = run(in, DType::bf16, GetParam());
  EXPECT_TRUE(all_close(got.out, silu_mul_ref(in.gate, in.up), 1e-6, kBf16Rtol));
  const ExpectedGrads want = expected_grads(in);
  EXPECT_TRUE(all_close(got.dgate, want.dgate, kGradAtol, kBf16Rtol + kGradRtol));
  EXPECT_TRUE(all_close(got.dup, want.dup, kGradAtol, kBf16Rtol + kGradRtol));
}

TEST_P(NnOpsSiluMulTest, LongTensorsMatchTheFormula) {
  // Many blocks of 16-byte packs and a tail, both gradients written from one pass.
  auto dev = device();
  const std::int64_t n = 100003;
  const auto gate = rounded_to_bf16(random_values(n, 6, -6.f, 6.f)), up = rounded_to_bf16(random_values(n, 7));
  const auto dout = rounded_to_bf16(random_values(n, 8));
  std::vector<double> out_want(n), dgate_want(n), dup_want(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = gate[i], sg = 1 / (1 + std::exp(-g));
    out_want[i] = g * sg * up[i];
    dgate_want[i] = dout[i] * up[i] * sg * (1 + g * (1 - sg));
    dup_want[i] = dout[i] * g * sg;
  }
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const double rtol = dt == DType::bf16 ? kBf16Rtol : 1e-5;
    Tensor tgate = tensor_from(*dev, {n}, gate, dt), tup = tensor_from(*dev, {n}, up, dt);
    Tensor out = leftovers(*dev, {n}, dt);
    silu_mul(compute(*dev), tgate, tup, out);
    EXPECT_TRUE(all_close(read(out), out_want, 1e-6, rtol));
    Tensor dgate = leftovers(*dev, {n}, dt), dup = leftovers(*dev, {n}, dt);
    silu_mul_backward(compute(*dev), tgate, tup, tensor_from(*dev, {n}, dout, dt), dgate, dup);
    EXPECT_TRUE(all_close(read(dgate), dgate_want, 1e-6, rtol));
    EXPECT_TRUE(all_close(read(dup), dup_want, 1e-6, rtol));
  }
}

TEST(NnOpsSiluMul, StatesItsCostAndItsAccesses) {
  auto dev = make_sim_device();
  Tensor g = zeros(*dev, {8, 16}, DType::bf16), u = zeros(*dev, {8, 16}, DType::bf16);
  Tensor out = zeros(*dev, {8, 16}, DType::bf16), dg = zeros(*dev, {8, 16}, DType::bf16),
         du = zeros(*dev, {8, 16}, DType::bf16);
  silu_mul(compute(*dev), g, u, out);
  EXPECT_DOUBLE_EQ(dev->ops().back().cost.bytes, 3.0 * 128 * 2);
  EXPECT_DOUBLE_EQ(dev->ops().back().cost.flops, 6.0 * 128);
  silu_mul_backward(compute(*dev), g, u, out, dg, du);
  const OpRecord& op = dev->ops().back();
  EXPECT_EQ(op.name, "silu_mul_backward");
  EXPECT_DOUBLE_EQ(op.cost.bytes, 5.0 * 128 * 2);  // gate, up and dout read; dgate and dup written
  EXPECT_DOUBLE_EQ(op.cost.flops, 12.0 * 128);
  EXPECT_EQ(op.reads.size(), 3u);
  EXPECT_EQ(op.writes.size(), 2u);
}

TEST(NnOpsSiluMul, MismatchedOperandsAreErrors) {
  auto dev = make_sim_device();
  Tensor g = zeros(*dev, {4, 8}), u = zeros(*dev, {4, 8}), out = zeros(*dev, {4, 8});
  Tensor u_short = zeros(*dev, {4, 6}), out_bf16 = zeros(*dev, {4, 8}, DType::bf16);
  const Stream s = compute(*dev);
  EXPECT_TRUE(throws_error([&] { silu_mul(s, g, u_short, out); }, {"silu_mul", "up must be [4, 8] f32", "[4, 6] f32"}));
  EXPECT_TRUE(throws_error([&] { silu_mul(s, g, u, out_bf16); }, {"out must be [4, 8] f32", "bf16"}));
  EXPECT_TRUE(throws_error([&] { silu_mul(s, g, u, u); }, {"out", "shares memory with up"}));
  EXPECT_TRUE(throws_error([&] { silu_mul_backward(s, g, u, out, out, g); },
                           {"silu_mul_backward", "dgate", "shares memory with dout"}));
  EXPECT_TRUE(dev->ops().empty());
}

FSDPLAB_ON_EACH_DEVICE(NnOpsSiluMulTest);

}  // namespace
}  // namespace fsdplab
