// sgd_update and adamw_update over several steps, on each device: against plain loops of PyTorch's
// formulas in double, against the numbers torch.optim.SGD / torch.optim.AdamW themselves produce, and
// (the cuda device's kernels) against the sim device's host loops bit for bit. clip_grad_with_norm against
// PyTorch's coefficient computed in f32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/runtime/error.hpp"
#include "engine/tensor/optimizer_ops.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using testing::all_close;
using testing::compute;
using testing::read;
using testing::error_of;
using testing::contains;
using testing::make_sim_device;
using testing::random_values;
using testing::tensor_from;
using testing::zeros;

// A fresh tensor holding `values`. The host waits for the device first: the new buffer may reuse
// one that a launched op still reads (the race detector checks that too).
Tensor upload(Device& device, const Shape& shape, const std::vector<float>& values) {
  device.synchronize();
  return tensor_from(device, shape, values);
}

// torch.optim.SGD's step for one tensor, in double.
void sgd_reference(std::vector<double>& p, std::vector<double>& buf, const std::vector<float>& grad,
                   const SgdOptions& o, int step) {
  for (std::size_t i = 0; i < p.size(); ++i) {
    double g = grad[i] + o.weight_decay * p[i];
    if (o.momentum != 0) {
      buf[i] = step == 1 ? g : o.momentum * buf[i] + (1 - o.dampening) * g;
      g = o.nesterov ? g + o.momentum * buf[i] : buf[i];
    }
    p[i] -= o.lr * g;
  }
}

// torch.optim.AdamW's step for one tensor, in double.
void adamw_reference(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v,
                     const std::vector<float>& grad, const AdamWOptions& o, int step) {
  for (std::size_t i = 0; i < p.size(); ++i) {
    p[i] *= 1 - o.lr * o.weight_decay;
    m[i] = o.beta1 * m[i] + (1 - o.beta1) * grad[i];
    v[i] = o.beta2 * v[i] + (1 - o.beta2) * grad[i] * grad[i];
    const double bc1 = 1 - std::pow(o.beta1, step);
    const double bc2 = 1 - std::pow(o.beta2, step);
    p[i] -= (o.lr / bc1) * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + o.eps);
  }
}

// The scenario the PyTorch numbers below come from: four parameters, three steps.
const std::vector<float> kParam0 = {0.5f, -1.25f, 2.0f, 0.0f};
const std::vector<std::vector<float>> kGrads = {
    {0.1f, -0.2f, 0.3f, -0.4f}, {-0.3f, 0.25f, 0.05f, 0.5f}, {0.2f, 0.1f, -0.6f, 0.35f}};

std::vector<float> run_sgd(Device& dev, const SgdOptions& opt) {
  Tensor param = tensor_from(dev, {4}, kParam0, DType::f32, MemTag::param_shard);
  Tensor buf = zeros(dev, {4}, DType::f32, MemTag::optim_state);
  for (std::size_t t = 0; t < kGrads.size(); ++t) {
    sgd_update(compute(dev), param, upload(dev, {4}, kGrads[t]), buf, opt, static_cast<std::int64_t>(t + 1));
  }
  return read(param);
}

std::vector<float> run_adamw(Device& dev, const AdamWOptions& opt) {
  Tensor param = tensor_from(dev, {4}, kParam0, DType::f32, MemTag::param_shard);
  Tensor m = zeros(dev, {4}, DType::f32, MemTag::optim_state);
  Tensor v = zeros(dev, {4}, DType::f32, MemTag::optim_state);
  for (std::size_t t = 0; t < kGrads.size(); ++t) {
    adamw_update(compute(dev), param, upload(dev, {4}, kGrads[t]), m, v, opt, static_cast<std::int64_t>(t + 1));
  }
  return read(param);
}

// The numerics run on every device (the cuda device's are the fused kernels); the declared accesses, cost
// and argument checks at the end are the sim device's alone.
class OptimizerTest : public testing::OnEachDevice {};

TEST_P(OptimizerTest, SgdMatchesPyTorch) {
  // torch.optim.SGD([p], lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01), three steps.
  EXPECT_TRUE(all_close(run_sgd(*device(), {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01}),
                        std::vector<float>{0.50355202f, -1.24095345f, 1.95362508f, -0.00869626459f}, 1e-7, 1e-6));
  // ... nesterov=True, dampening 0.
  EXPECT_TRUE(all_close(run_sgd(*device(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}),
                        std::vector<float>{0.504887044f, -1.25804174f, 1.98153663f, -0.0646711588f}, 1e-7, 1e-6));
  // ... plain SGD, lr=0.1.
  EXPECT_TRUE(all_close(run_sgd(*device(), {.lr = 0.1}),
                        std::vector<float>{0.50000006f, -1.26499999f, 2.0250001f, -0.0449999981f}, 1e-7, 1e-6));
}

TEST_P(OptimizerTest, AdamWMatchesPyTorch) {
  // torch.optim.AdamW([p], lr=0.01, weight_decay=0.1), three steps.
  EXPECT_TRUE(all_close(run_adamw(*device(), {.lr = 0.01, .weight_decay = 0.1}),
                        std::vector<float>{0.493270606f, -1.2410059f, 1.97916424f, 0.00418510567f}, 1e-7, 1e-6));
  // torch.optim.AdamW([p]) with its defaults.
  EXPECT_TRUE(all_close(run_adamw(*device(), {}),
                        std::vector<float>{0.499460399f, -1.24943578f, 1.9984529f, 0.000420328259f}, 1e-7, 1e-6));
}

TEST_P(OptimizerTest, SgdMatchesTheReferenceLoopOverSeveralSteps) {
  const int n = 100;
  for (const SgdOptions& opt :
       {SgdOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.2, .weight_decay = 0.1},
        SgdOptions{.lr = 0.05, .momentum = 0.5, .nesterov = true}, SgdOptions{.lr = 0.3, .weight_decay = 0.01}}) {
    SCOPED_TRACE("momentum " + std::to_string(opt.momentum) + (opt.nesterov ? ", nesterov" : ""));
    auto dev = device();
    const auto p0 = random_values(n, 1);
    Tensor param = tensor_from(*dev, {n}, p0, DType::f32, MemTag::param_shard);
    // Garbage in the buffer before step 1: the first step must overwrite it, not decay it.
    Tensor buf = tensor_from(*dev, {n}, std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()));
    std::vector<double> p(p0.begin(), p0.end()), b(n);
    for (int t = 1; t <= 4; ++t) {
      const auto g = random_values(n, 10 + t);
      sgd_update(compute(*dev), param, upload(*dev, {n}, g), opt.momentum != 0 ? buf : Tensor{}, opt, t);
      sgd_reference(p, b, g, opt, t);
    }
    EXPECT_TRUE(all_close(read(param), p, 1e-6, 1e-6));
    if (opt.momentum != 0) {
      EXPECT_TRUE(all_close(read(buf), b, 1e-6, 1e-6));
    }
  }
}

TEST_P(OptimizerTest, AdamWMatchesTheReferenceLoopOverSeveralSteps) {
  const int n = 100;
  const AdamWOptions opt{.lr = 3e-3, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.05};
  auto dev = device();
  const auto p0 = random_values(n, 2);
  Tensor param = tensor_from(*dev, {n}, p0, DType::f32, MemTag::param_shard);
  Tensor m = zeros(*dev, {n}, DType::f32, MemTag::optim_state);
  Tensor v = zeros(*dev, {n}, DType::f32, MemTag::optim_state);
  std::vector<double> p(p0.begin(), p0.end()), mr(n), vr(n);
  for (int t = 1; t <= 3; ++t) {
    const auto g = random_values(n, 20 + t, -2.f, 2.f);
    adamw_update(compute(*dev), param, upload(*dev, {n}, g), m, v, opt, t);
    adamw_reference(p, mr, vr, g, opt, t);
  }
  EXPECT_TRUE(all_close(read(param), p, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(read(m), mr, 1e-7, 1e-6));
  EXPECT_TRUE(all_close(read(v), vr, 1e-8, 1e-6));
}

// The kernels repeat the host loops' f32 operations in their order: a device's steps equal the sim
// device's bit for bit, over more elements than one pass of the kernels' grid covers.
TEST_P(OptimizerTest, StepsEqualTheSimDeviceBitForBit) {
  const std::int64_t n = (std::int64_t{1} << 21) + 777;
  const AdamWOptions adamw{.lr = 3e-3, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.05};
  const SgdOptions sgd{.lr = 0.05, .momentum = 0.9, .dampening = 0.2, .weight_decay = 0.1};
  const auto p0 = random_values(static_cast<std::size_t>(n), 30);
  std::vector<std::vector<float>> grads;
  for (std::uint32_t t = 1; t <= 3; ++t) grads.push_back(random_values(static_cast<std::size_t>(n), 40 + t, -2.f, 2.f));
  std::vector<std::vector<std::vector<float>>> results;  // per device: AdamW's param, m, v; SGD's param, buffer
  auto sim = make_sim_device();
  auto dev = device();
  for (Device* d : {static_cast<Device*>(sim.get()), dev.get()}) {
    Tensor pa = tensor_from(*d, {n}, p0, DType::f32, MemTag::param_shard);
    Tensor m = zeros(*d, {n}, DType::f32, MemTag::optim_state);
    Tensor v = zeros(*d, {n}, DType::f32, MemTag::optim_state);
    Tensor ps = tensor_from(*d, {n}, p0, DType::f32, MemTag::param_shard);
    Tensor buf = zeros(*d, {n}, DType::f32, MemTag::optim_state);
    for (int t = 1; t <= 3; ++t) {
      const Tensor g = upload(*d, {n}, grads[static_cast<std::size_t>(t - 1)]);
      adamw_update(compute(*d), pa, g, m, v, adamw, t);
      sgd_update(compute(*d), ps, g, buf, sgd, t);
    }
    results.push_back({read(pa), read(m), read(v), read(ps), read(buf)});
  }
  const char* names[] = {"AdamW param", "m", "v", "SGD param", "momentum buffer"};
  for (std::size_t r = 0; r < 5; ++r) {
    const auto& want = results[0][r];
    const auto& got = results[1][r];
    const auto first = std::mismatch(want.begin(), want.end(), got.begin()).first;
    EXPECT_TRUE(first == want.end()) << names[r] << " differs first at [" << (first - want.begin()) << "]: "
                                     << got[static_cast<std::size_t>(first - want.begin())] << " on this device, "
                                     << *first << " on the sim device";
  }
}

// ---- gradient-norm clipping ----------------------------------------------------------------------------

// What clip_grad_with_norm must leave in `grad`: PyTorch's clip_coef_clamped computed in f32, each operation rounded
// once (x86-64 without FMA contraction), and each element multiplied by it.
std::vector<float> clipped(std::vector<float> grad, float squared_norm, float max_norm) {
  volatile float norm = std::sqrt(squared_norm);  // volatile: each step rounded to f32 as the op rounds it
  volatile float denominator = norm + 1e-6f;
  volatile float coef = max_norm / denominator;
  for (float& g : grad) g *= std::min(static_cast<float>(coef), 1.f);
  return grad;
}

TEST_P(OptimizerTest, ClipGradWithNormScalesByPyTorchsCoefficientBitForBit) {
  auto dev = device();
  const std::int64_t n = (std::int64_t{1} << 20) + 5;  // more than one pass of the kernel's grid
  const auto g = random_values(static_cast<std::size_t>(n), 31, -3.f, 3.f);
  double squares = 0;
  for (float x : g) squares += static_cast<double>(x) * x;
  const auto squared = static_cast<float>(squares);
  const double norm = std::sqrt(squares);
  for (const double max_norm : {0.25 * norm, norm / 3, 2 * norm}) {
    Tensor grad = upload(*dev, {n}, g);
    Tensor squared_norm = upload(*dev, {1}, {squared});
    clip_grad_with_norm(compute(*dev), grad, squared_norm, max_norm);
    const std::vector<float> got = read(grad);
    const std::vector<float> want = clipped(g, squared, static_cast<float>(max_norm));
    const auto first = std::mismatch(want.begin(), want.end(), got.begin()).first;
    EXPECT_TRUE(first == want.end()) << "max_norm " << max_norm << ": differs first at [" << (first - want.begin())
                                     << "]: " << got[static_cast<std::size_t>(first - want.begin())] << ", expected "
                                     << *first;
    double after = 0;
    for (float x : got) after += static_cast<double>(x) * x;
    // Clipped to max_norm (to f32 rounding and PyTorch's 1e-6), or left as it was when already within it.
    EXPECT_NEAR(std::sqrt(after), std::min(max_norm, norm), 1e-6 * norm) << "max_norm " << max_norm;
    if (max_norm > norm) {
      EXPECT_EQ(got, g);
    }
  }
}

TEST_P(OptimizerTest, ClipGradWithNormOfANonFiniteNormIsPyTorchs) {
  auto dev = device();
  const std::vector<float> g = {0.5f, -2.f, 0.f};
  const float inf = std::numeric_limits<float>::infinity();
  // A NaN norm: every element NaN (min(NaN, 1) is NaN, as torch.clamp; fminf would give 1).
  Tensor grad = upload(*dev, {3}, g);
  clip_grad_with_norm(compute(*dev), grad, upload(*dev, {1}, {std::numeric_limits<float>::quiet_NaN()}), 1.0);
  for (float x : read(grad)) EXPECT_TRUE(std::isnan(x)) << x;
  // An infinite norm: a coefficient of 0.
  grad = upload(*dev, {3}, g);
  clip_grad_with_norm(compute(*dev), grad, upload(*dev, {1}, {inf}), 1.0);
  EXPECT_EQ(read(grad), (std::vector<float>{0.f, -0.f, 0.f}));
}

TEST(Optimizer, ClipGradWithNormDeclaresItsTensorsAndRejectsBadOperands) {
  auto dev = make_sim_device();
  const auto s = compute(*dev);
  Tensor grad = zeros(*dev, {10});
  Tensor squared_norm = zeros(*dev, {1});
  clip_grad_with_norm(s, grad, squared_norm, 1.0);
  const OpRecord& op = dev->ops().back();
  EXPECT_EQ(op.name, "clip_grad_with_norm");
  EXPECT_EQ(op.reads.size(), 2u);  // the gradient and the norm
  EXPECT_EQ(op.writes.size(), 1u);
  EXPECT_EQ(op.cost.bytes, 10 * 8 + 4);
  const std::size_t launched = dev->ops().size();

  for (const double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    const std::string msg = error_of([&] { clip_grad_with_norm(s, grad, squared_norm, bad); });
    EXPECT_TRUE(contains(msg, "clip_grad_with_norm: max_norm must be finite and > 0")) << msg;
  }
  std::string msg = error_of([&] { clip_grad_with_norm(s, zeros(*dev, {10}, DType::bf16), squared_norm, 1.0); });
  EXPECT_TRUE(contains(msg, "grad") && contains(msg, "[10] bf16")) << msg;
  msg = error_of([&] { clip_grad_with_norm(s, grad, zeros(*dev, {2}), 1.0); });
  EXPECT_TRUE(contains(msg, "squared_norm must be a 1-element f32 tensor") && contains(msg, "[2] f32")) << msg;
  msg = error_of([&] { clip_grad_with_norm(s, grad, grad.view(3, {1}), 1.0); });
  EXPECT_TRUE(contains(msg, "overlaps")) << msg;
  EXPECT_EQ(dev->ops().size(), launched);  // nothing more was launched
}

// Many parameters in one op give each the bits it gets alone: sizes around the kernels' 4096-element chunk,
// an empty one, and more parameters than one launch takes (so the cuda device launches twice).
TEST_P(OptimizerTest, AdamWOfManyParametersInOneOpIsEachAloneBitForBit) {
  const AdamWOptions opt{.lr = 3e-3, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.05};
  std::vector<std::int64_t> sizes = {4096, 4097, 1, 0, 10000, 3};
  for (int i = 0; i < 70; ++i) sizes.push_back(17 * i + 5);
  auto dev = device();
  struct State {
    Tensor param, m, v, grad;
  };
  auto make = [&](std::size_t i) {
    const std::int64_t n = sizes[i];
    const auto seed = static_cast<std::uint32_t>(i);
    return State{tensor_from(*dev, {n}, random_values(static_cast<std::size_t>(n), 100 + seed), DType::f32,
                             MemTag::param_shard),
                 zeros(*dev, {n}, DType::f32, MemTag::optim_state), zeros(*dev, {n}, DType::f32, MemTag::optim_state),
                 tensor_from(*dev, {n}, random_values(static_cast<std::size_t>(n), 200 + seed, -2.f, 2.f))};
  };
  std::vector<State> together, alone;
  std::vector<AdamWOperands> each;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    together.push_back(make(i));
    alone.push_back(make(i));
    const State& t = together.back();
    each.push_back({"p" + std::to_string(i), t.param, t.grad, t.m, t.v});
  }
  for (int step = 1; step <= 2; ++step) {
    adamw_update(compute(*dev), each, opt, step);
    for (const State& a : alone) adamw_update(compute(*dev), a.param, a.grad, a.m, a.v, opt, step);
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(read(together[i].param), read(alone[i].param)) << "parameter " << i;
    EXPECT_EQ(read(together[i].m), read(alone[i].m)) << "parameter " << i;
    EXPECT_EQ(read(together[i].v), read(alone[i].v)) << "parameter " << i;
  }
}

FSDPLAB_ON_EACH_DEVICE(OptimizerTest);

TEST(Optimizer, AdamWOfManyParametersIsOneOpThatDeclaresThemAll) {
  auto dev = make_sim_device();
  std::vector<AdamWOperands> each;
  for (const std::int64_t n : {10, 11, 10})
    each.push_back({"p" + std::to_string(each.size()), zeros(*dev, {n}), zeros(*dev, {n}), zeros(*dev, {n}),
                    zeros(*dev, {n})});
  adamw_update(compute(*dev), each, {}, 1);
  ASSERT_EQ(dev->ops().size(), 1u);
  EXPECT_EQ(dev->ops().back().name, "adamw_update");
  EXPECT_EQ(dev->ops().back().reads.size(), 12u);
  EXPECT_EQ(dev->ops().back().writes.size(), 9u);
  EXPECT_EQ(dev->ops().back().cost.bytes, (10 + 11 + 10) * 4 * 7);
  dev->synchronize();  // the op has read every buffer before any is freed and reused below
  // An operand of one parameter overlapping another parameter's is refused, naming both.
  each[2].m = each[0].v;
  const std::string msg = error_of([&] { adamw_update(compute(*dev), each, {}, 1); });
  EXPECT_TRUE(contains(msg, "adamw_update") && contains(msg, "p0's v") && contains(msg, "p2's m") &&
              contains(msg, "overlaps"))
      << msg;
  each[2].m = zeros(*dev, {11});
  const std::string shape = error_of([&] { adamw_update(compute(*dev), each, {}, 1); });
  EXPECT_TRUE(contains(shape, "p2's m must be [10] f32") && contains(shape, "[11] f32")) << shape;
  EXPECT_EQ(dev->ops().size(), 1u);
}

TEST(Optimizer, UpdatesDeclareWhatTheyTouch) {
  auto dev = make_sim_device();
  const auto s = compute(*dev);
  Tensor param = zeros(*dev, {10});
  Tensor grad = zeros(*dev, {10});
  Tensor m = zeros(*dev, {10});
  Tensor v = zeros(*dev, {10});
  adamw_update(s, param, grad, m, v, {}, 1);
  EXPECT_EQ(dev->ops().back().name, "adamw_update");
  EXPECT_EQ(dev->ops().back().reads.size(), 4u);
  EXPECT_EQ(dev->ops().back().writes.size(), 3u);
  EXPECT_EQ(dev->ops().back().cost.bytes, 10 * 4 * 7);
  sgd_update(s, param, grad, m, {.momentum = 0.9}, 1);
  EXPECT_EQ(dev->ops().back().reads.size(), 3u);
  EXPECT_EQ(dev->ops().back().writes.size(), 2u);
  sgd_update(s, param, grad, Tensor{}, {}, 1);  // no momentum: no buffer needed or touched
  EXPECT_EQ(dev->ops().back().reads.size(), 2u);
  EXPECT_EQ(dev->ops().back().writes.size(), 1u);
}

TEST(Optimizer, RejectsBadOperandsAndHyperParameters) {
  auto dev = make_sim_device();
  const auto s = compute(*dev);
  Tensor param = zeros(*dev, {10});
  Tensor grad = zeros(*dev, {10});
  Tensor m = zeros(*dev, {10});
  Tensor v = zeros(*dev, {10});

  std::string msg = error_of([&] { adamw_update(s, zeros(*dev, {10}, DType::bf16), grad, m, v, {}, 1); });
  EXPECT_TRUE(contains(msg, "adamw_update") && contains(msg, "f32") && contains(msg, "[10] bf16")) << msg;
  msg = error_of([&] { adamw_update(s, param, zeros(*dev, {9}), m, v, {}, 1); });
  EXPECT_TRUE(contains(msg, "grad") && contains(msg, "[10]") && contains(msg, "[9]")) << msg;
  msg = error_of([&] { adamw_update(s, param, grad, m, param, {}, 1); });
  EXPECT_TRUE(contains(msg, "overlaps")) << msg;
  msg = error_of([&] { adamw_update(s, param, grad, m, v, {}, 0); });
  EXPECT_TRUE(contains(msg, "step") && contains(msg, "0")) << msg;
  msg = error_of([&] { adamw_update(s, param, grad, m, v, {.beta1 = 1.0}, 1); });
  EXPECT_TRUE(contains(msg, "beta1")) << msg;
  msg = error_of([&] { sgd_update(s, param, grad, m, {.lr = -1}, 1); });
  EXPECT_TRUE(contains(msg, "lr")) << msg;
  msg = error_of([&] { sgd_update(s, param, grad, m, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}, 1); });
  EXPECT_TRUE(contains(msg, "nesterov")) << msg;
  msg = error_of([&] { sgd_update(s, param, grad, Tensor{}, {.momentum = 0.9}, 1); });
  EXPECT_TRUE(contains(msg, "momentum_buf") && contains(msg, "undefined")) << msg;
  msg = error_of([&] { sgd_update(s, param, grad, zeros(*dev, {5}), {.momentum = 0.9}, 1); });
  EXPECT_TRUE(contains(msg, "momentum_buf") && contains(msg, "[5]")) << msg;
  EXPECT_TRUE(dev->ops().empty());  // nothing was launched
}

}  // namespace
}  // namespace fsdplab
