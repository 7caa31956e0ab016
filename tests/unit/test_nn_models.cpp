// The module tree and the toy and mlp models: names as PyTorch's, and on each device (sim, and cuda
// where there is a GPU) hooks in FSDP's order, the counter RNG's initialisation and every gradient equal
// to central finite differences of the loss.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/nn/mlp_model.hpp"
#include "engine/nn/toy_model.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using testing::make_sim_device;
using testing::materialise;
using testing::OnEachDevice;
using testing::random_values;
using testing::read;
using testing::tensor_from;
using testing::zero_grads;
using testing::zeros;

std::vector<std::string> names_and_shapes(Module& model) {
  std::vector<std::string> out;
  for (Parameter* p : model.parameters()) out.push_back(p->name + " " + shape_str(p->shape));
  return out;
}

TEST(NnModels, ToyModelHasPyTorchNamesAndShapes) {
  ToyModel toy;
  EXPECT_EQ(names_and_shapes(toy), (std::vector<std::string>{"fc1.weight [10, 10]", "ln.weight [10]", "ln.bias [10]",
                                                             "fc2.weight [5, 10]"}));
  EXPECT_EQ(toy.module("ln").kind(), "LayerNorm");
  EXPECT_THROW(toy.parameter("fc1.bias"), Error);
}

TEST(NnModels, MlpHasIndexedBlocks) {
  MlpModel mlp(8, 3);
  const auto names = names_and_shapes(mlp);
  ASSERT_EQ(names.size(), 3u * 6);
  EXPECT_EQ(names[0], "blocks.0.ln.weight [8]");
  EXPECT_EQ(names[2], "blocks.0.fc1.weight [32, 8]");
  EXPECT_EQ(names.back(), "blocks.2.fc2.bias [8]");
  EXPECT_THROW(MlpModel(0, 2), Error);
}

class NnModelsOnDevice : public OnEachDevice {};

// Records every hook call as "point module".
class HookLog final : public ModuleHooks {
 public:
  std::vector<std::string> calls;
  void pre_forward(Module& m, RunContext&) override { calls.push_back("pre_forward " + m.name()); }
  void post_forward(Module& m, RunContext&) override { calls.push_back("post_forward " + m.name()); }
  void pre_backward(Module& m, RunContext&) override { calls.push_back("pre_backward " + m.name()); }
  void post_backward(Module& m, RunContext&) override { calls.push_back("post_backward " + m.name()); }
};

Batch regression_batch(Device& device, std::int64_t rows, std::int64_t in, std::int64_t out, std::uint32_t seed) {
  return {tensor_from(device, {rows, in}, random_values(static_cast<std::size_t>(rows * in), seed)),
          tensor_from(device, {rows, out}, random_values(static_cast<std::size_t>(rows * out), seed + 1))};
}

TEST_P(NnModelsOnDevice, HooksFireAroundEachModuleAndBackwardOrderIsRecorded) {
  auto dev = device();
  MlpModel mlp(4, 2);
  materialise(mlp, *dev, 1);
  HookLog log;
  for (const char* name : {"blocks.0", "blocks.1"}) mlp.module(name).add_hooks(&log);
  RunContext ctx{*dev};
  mlp.forward(ctx, regression_batch(*dev, 3, 4, 4, 7));
  mlp.backward(ctx);
  EXPECT_EQ(log.calls, (std::vector<std::string>{"pre_forward blocks.0", "post_forward blocks.0",
                                                 "pre_forward blocks.1", "post_forward blocks.1",
                                                 "pre_backward blocks.1", "post_backward blocks.1",
                                                 "pre_backward blocks.0", "post_backward blocks.0"}));
  std::vector<std::string> order;
  for (Module* m : mlp.backward_order())
    if (m->kind() == "MlpBlock") order.push_back(m->name());
  EXPECT_EQ(order, (std::vector<std::string>{"blocks.1", "blocks.0"}));
}

// Every gradient element of every parameter against central differences of the loss, in f32.
// With eps 1e-3 on values of order 0.1-1, f32 rounding of the loss (~1e-7 relative) divided by 2 eps
// gives noise of ~1e-4 absolute; truncation error is ~eps^2. Tolerance 2e-3 absolute + 2% relative
// stays far below what a missing term or a wrong transpose produces (errors of order the gradient).
void expect_gradients_match_finite_differences(Model& model, Device& dev, const Batch& batch) {
  RunContext ctx{dev};
  model.forward(ctx, batch);
  model.backward(ctx);
  auto loss_at = [&] {
    zero_grads(model, dev.stream(Lane::compute));
    const float loss = read(model.forward(ctx, batch))[0];
    model.backward(ctx);  // drop the saved activations
    dev.synchronize();    // the host writes the parameter next, which the backward read
    return static_cast<double>(loss);
  };
  for (Parameter* p : model.parameters()) {
    const std::vector<float> grad = read(p->grad);
    std::vector<float> values = read(p->value);
    const std::size_t stride = std::max<std::size_t>(1, values.size() / 6);  // a sample of elements
    for (std::size_t i = 0; i < values.size(); i += stride) {
      const float saved = values[i];
      const double eps = 1e-3;
      values[i] = static_cast<float>(saved + eps);
      p->value.copy_from(values);
      const double plus = loss_at();
      values[i] = static_cast<float>(saved - eps);
      p->value.copy_from(values);
      const double minus = loss_at();
      values[i] = saved;
      p->value.copy_from(values);
      const double numeric = (plus - minus) / (2 * eps);
      EXPECT_NEAR(grad[i], numeric, 2e-3 + 0.02 * std::abs(numeric)) << p->name << "[" << i << "]";
    }
    dev.synchronize();
  }
}

TEST_P(NnModelsOnDevice, ToyGradientsMatchFiniteDifferences) {
  auto dev = device();
  ToyModel toy;
  materialise(toy, *dev, 42);
  expect_gradients_match_finite_differences(toy, *dev, regression_batch(*dev, 6, 10, 5, 3));
}

TEST_P(NnModelsOnDevice, MlpGradientsMatchFiniteDifferences) {
  auto dev = device();
  MlpModel mlp(6, 2);
  materialise(mlp, *dev, 42);
  expect_gradients_match_finite_differences(mlp, *dev, regression_batch(*dev, 5, 6, 6, 9));
}

TEST_P(NnModelsOnDevice, InitialisationIsTheCounterRngsAndPyTorchsDefaultBounds) {
  auto dev = device();
  ToyModel toy;
  materialise(toy, *dev, 5);
  const std::vector<float> w = read(toy.parameter("fc2.weight").value);
  const float bound = 1 / std::sqrt(10.f);
  for (float v : w) EXPECT_LT(std::abs(v), bound);
  EXPECT_EQ(read(toy.parameter("ln.weight").value), std::vector<float>(10, 1.f));
  // Any slice equals the same slice of the whole: what meta init relies on.
  std::vector<float> slice(7);
  toy.parameter("fc2.weight").init.fill(slice, 5, "fc2.weight", 13);
  EXPECT_EQ(slice, std::vector<float>(w.begin() + 13, w.begin() + 20));
}

// [Note: fused epilogues]: an input gradient summed in a Linear's input-gradient GEMM (Llama's q, k and v
// projections share their input) is the separate add it replaced: bit for bit on sim, whose host GEMM is the
// same either way (cuda's epilogue GEMM is cuBLASLt's, which may sum the products in another order), and the
// parameters' gradients are what the backward without a sum gives.
TEST_P(NnModelsOnDevice, ALinearAddsToAnInputGradientInItsEpilogueAsASeparateAddWould) {
  auto dev = device();
  RunContext ctx{*dev};
  Linear fc("fc", 24, 40, true, WeightLayout::out_in, linear_default_init(24), linear_default_init(24));
  const Tensor x = tensor_from(*dev, {17, 24}, random_values(17 * 24, 4));
  const Tensor dy = tensor_from(*dev, {17, 40}, random_values(17 * 40, 5));
  const Tensor other = tensor_from(*dev, {17, 24}, random_values(17 * 24, 6));
  const Tensor of_the_output_shape = zeros(*dev, {17, 40});
  const auto backward = [&](const Tensor& dx_residual) {
    materialise(fc, *dev, 3);  // zeroed gradients
    fc.forward(ctx, x);
    std::vector<std::vector<float>> out{read(fc.backward(ctx, dy, dx_residual))};
    for (Parameter* p : fc.parameters()) out.push_back(read(p->grad));  // weight, bias
    return out;
  };
  const std::vector<std::vector<float>> alone = backward(Tensor());
  const std::vector<std::vector<float>> summed = backward(other);
  Tensor separate = zeros(*dev, {17, 24});
  add(testing::compute(*dev), tensor_from(*dev, {17, 24}, alone[0]), other, separate);
  const std::vector<float> separate_sum = read(separate);
  // Sums of 40 products of magnitude below 0.2 x 1, plus one value below 1: f32 orders differ by ~1e-6.
  EXPECT_TRUE(testing::all_close(summed[0], separate_sum, 1e-5));
  if (GetParam() == DeviceKind::sim) {
    EXPECT_EQ(summed[0], separate_sum);
  }
  ASSERT_EQ(summed.size(), 3u);
  EXPECT_EQ(summed[1], alone[1]) << "the weight's gradient";
  EXPECT_EQ(summed[2], alone[2]) << "the bias's gradient";
  fc.forward(ctx, x);
  const std::string error = testing::error_of([&] { fc.backward(ctx, dy, of_the_output_shape); });
  EXPECT_TRUE(testing::contains(error, "fc: the gradient to add into must be the input's shape [17, 24], got"))
      << error;
}

FSDPLAB_ON_EACH_DEVICE(NnModelsOnDevice);

// [Note: fused epilogues]: what a Linear's epilogue and a LayerNorm's backward into a gradient refuse.
TEST(NnModels, EpiloguesRefuseWhatTheyCannotFuse) {
  auto dev = make_sim_device();
  RunContext ctx{*dev};
  const ParamInit init = ParamInit::constant(0.5f);
  Linear fc("fc", 4, 8, true, WeightLayout::out_in, init, init, Activation::gelu);
  materialise(fc, *dev, 1);
  Tensor x = tensor_from(*dev, {2, 4}, random_values(8, 1));
  try {
    fc.forward(ctx, x, tensor_from(*dev, {2, 8}, random_values(16, 2)));
    FAIL() << "a residual after an activation was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fc: a residual is added after the bias only"), std::string::npos)
        << e.what();
  }
  LayerNorm ln("ln", 4);
  materialise(ln, *dev, 1);
  Tensor dy = ln.forward(ctx, x);
  try {
    ln.backward_adding_to(ctx, dy, tensor_from(*dev, {2, 3}, random_values(6, 3)));
    FAIL() << "a gradient of another shape was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("ln: the gradient to add into must be the input's shape [2, 4], got"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  }
}

TEST(NnModels, RunningWithoutMaterialisingIsAClearError) {
  auto dev = make_sim_device();
  ToyModel toy;
  RunContext ctx{*dev};
  try {
    toy.forward(ctx, regression_batch(*dev, 2, 10, 5, 1));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fc1.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fsdplab
