// What training checkpoints read and write of an optimizer: its state tensors by PyTorch's names, its
// hyper-parameters, and its step count; an optimizer given back its state continues bit for bit.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/optim/optimizer.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using testing::make_sim_device;
using testing::random_values;
using testing::read;
using testing::tensor_from;

std::vector<std::string> state_names(const Optimizer& o) {
  std::vector<std::string> names;
  for (const Optimizer::StateTensor& s : o.state(0)) names.push_back(s.name);
  return names;
}

TEST(OptimizerState, NamesAndHyperParameters) {
  auto device = make_sim_device();
  const Tensor p = tensor_from(*device, {6}, random_values(6, 1), DType::f32, MemTag::param_shard);
  const Tensor g = tensor_from(*device, {6}, random_values(6, 2), DType::f32, MemTag::grad_shard);
  const auto adamw = make_optimizer({"adamw", 1e-3, 0}, {{"w", p, g}});
  EXPECT_EQ(state_names(*adamw), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  EXPECT_EQ(adamw->hyper_parameters(), (std::map<std::string, double>{
                                           {"lr", 1e-3}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8},
                                           {"weight_decay", 1e-2}}));
  const auto sgd = make_optimizer({"sgd", 0.1, 0.9}, {{"w", p, g}});
  EXPECT_EQ(state_names(*sgd), (std::vector<std::string>{"momentum_buffer"}));
  EXPECT_EQ(sgd->hyper_parameters(), (std::map<std::string, double>{
                                         {"lr", 0.1}, {"momentum", 0.9}, {"dampening", 0}, {"weight_decay", 0},
                                         {"nesterov", 0}}));
  EXPECT_TRUE(make_optimizer({"sgd", 0.1, 0}, {{"w", p, g}})->state(0).empty());  // plain SGD keeps nothing
  EXPECT_EQ(make_optimizer({"adamw", 1e-3, 0}, {})->hyper_parameters().size(), 5u);  // no targets needed
}

// Optimizer A runs 5 steps. Optimizer B, fresh, is given A's parameters, state and step count after 3
// steps and runs steps 4 and 5 with the same gradients: it ends where A ends, bit for bit (on each device).
void check_restore_continues(std::unique_ptr<Device> device, const OptimizerSpec& spec) {
  SCOPED_TRACE(spec.name);
  const Stream stream = device->stream(Lane::compute);
  constexpr std::size_t n = 37;
  std::vector<std::vector<float>> grads;
  for (std::uint32_t s = 0; s < 5; ++s) grads.push_back(random_values(n, 10 + s));
  const Tensor pa = tensor_from(*device, {n}, random_values(n, 3), DType::f32, MemTag::param_shard);
  const Tensor ga = Tensor::empty(*device, {n}, DType::f32, MemTag::grad_shard);
  const auto a = make_optimizer(spec, {{"w", pa, ga}});
  std::vector<float> param_at_3;
  std::vector<std::vector<float>> state_at_3;
  for (int step = 0; step < 5; ++step) {
    if (step == 3) {
      param_at_3 = read(pa);
      for (const Optimizer::StateTensor& s : a->state(0)) state_at_3.push_back(read(s.tensor));
    }
    device->synchronize();
    ga.copy_from(grads[static_cast<std::size_t>(step)]);
    a->step(stream);
  }

  const Tensor pb = tensor_from(*device, {n}, param_at_3, DType::f32, MemTag::param_shard);
  const Tensor gb = Tensor::empty(*device, {n}, DType::f32, MemTag::grad_shard);
  const auto b = make_optimizer(spec, {{"w", pb, gb}});
  device->synchronize();
  for (std::size_t i = 0; i < state_at_3.size(); ++i) b->state(0)[i].tensor.copy_from(state_at_3[i]);
  b->restore_steps(3);
  EXPECT_EQ(b->steps(), 3);
  for (int step = 3; step < 5; ++step) {
    device->synchronize();
    gb.copy_from(grads[static_cast<std::size_t>(step)]);
    b->step(stream);
  }
  EXPECT_EQ(b->steps(), 5);
  EXPECT_EQ(read(pb), read(pa));  // == on floats: bit for bit (no NaN here)
  for (std::size_t i = 0; i < state_at_3.size(); ++i)
    EXPECT_EQ(read(b->state(0)[i].tensor), read(a->state(0)[i].tensor));
}

class OptimizerStateTest : public testing::OnEachDevice {};

TEST_P(OptimizerStateTest, RestoredAdamWContinuesBitForBit) { check_restore_continues(device(), {"adamw", 1e-2, 0}); }
TEST_P(OptimizerStateTest, RestoredSgdMomentumContinuesBitForBit) {
  check_restore_continues(device(), {"sgd", 0.1, 0.9});
}

FSDPLAB_ON_EACH_DEVICE(OptimizerStateTest);

TEST(OptimizerState, NegativeStepsAreAnError) {
  const auto sgd = make_optimizer({"sgd", 0.1, 0}, {});
  EXPECT_TRUE(testing::contains(testing::error_of([&] { sgd->restore_steps(-1); }), "sgd: -1 completed steps"));
}

}  // namespace
}  // namespace fsdplab
