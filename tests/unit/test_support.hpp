// test_support.hpp — what the unit tests share: a sim device to run on, the devices an op test runs
// on (OnEachDevice), seeded random data, closeness checks, a model's parameters given values on one device,
// and central finite differences for checking backward passes.
#pragma once
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/nn/module.hpp"
#include "engine/runtime/device_factory.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/presets.hpp"
#include "engine/runtime/sim_device.hpp"
#include "engine/tensor/bf16.hpp"
#include "engine/tensor/elementwise.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {
// How gtest prints a device parameter ("GetParam() = cuda"), found by argument-dependent lookup.
inline void PrintTo(DeviceKind kind, std::ostream* os) { *os << device_kind_name(kind); }
}  // namespace fsdplab

namespace fsdplab::testing {

// A sim device on the H100 SXM preset with the race detector throwing.
inline std::unique_ptr<SimDevice> make_sim_device(int rank = 0, SimDeviceOptions options = {}) {
  const auto& presets = PresetCatalog::builtin();
  return std::make_unique<SimDevice>(rank, presets.device("h100-sxm"), presets.link("nvlink4"), options);
}

// A device of `kind` for rank `rank`: the sim device above, or the cuda device on GPU 0 (with the same
// presets for its cost model, untraced: op tests check numerics, tests/gpu checks CUPTI). Call it from a test
// of OnEachDevice, which skips where there is no GPU.
inline std::unique_ptr<Device> make_test_device(DeviceKind kind, int rank = 0) {
  if (kind == DeviceKind::sim) return make_sim_device(rank);
  const auto& presets = PresetCatalog::builtin();
  DeviceSpec spec;
  spec.kind = DeviceKind::cuda;
  spec.preset = presets.device("h100-sxm");
  spec.link = presets.link("nvlink4");
  spec.cupti = false;
  return make_device(rank, spec);
}

// A test suite run once per device: the sim device everywhere, the cuda device where this build has the
// CUDA backend and the machine a GPU (elsewhere those instances are skipped, saying why). The same
// references and tolerances hold on both: the devices compute the same numerics.
//   class LayerNormTest : public OnEachDevice {};
//   TEST_P(LayerNormTest, MatchesReference) { auto dev = device(); ... }
//   FSDPLAB_ON_EACH_DEVICE(LayerNormTest);
class OnEachDevice : public ::testing::TestWithParam<DeviceKind> {
 protected:
  void SetUp() override {
    if (GetParam() == DeviceKind::cuda) {
      if (auto why = cuda_unavailable()) GTEST_SKIP() << "cuda device: " << *why;
    }
  }
  std::unique_ptr<Device> device(int rank = 0) const { return make_test_device(GetParam(), rank); }
};

inline std::string device_param_name(const ::testing::TestParamInfo<DeviceKind>& info) {
  return std::string(device_kind_name(info.param));
}

#define FSDPLAB_ON_EACH_DEVICE(Suite)                                                                  \
  INSTANTIATE_TEST_SUITE_P(Devices, Suite, ::testing::Values(::fsdplab::DeviceKind::sim, ::fsdplab::DeviceKind::cuda), \
                           ::fsdplab::testing::device_param_name)

inline Stream compute(Device& device) { return device.stream(Lane::compute); }

// The host waits for the device, then copies the tensor out (the race detector checks the wait).
inline std::vector<float> read(const Tensor& t) {
  t.device().synchronize();
  return t.to_vector();
}

// What a bf16 tensor holds for `values`: references start from the same rounded inputs.
inline std::vector<float> rounded_to_bf16(std::vector<float> values) {
  for (float& v : values) v = round_to_bf16(v);
  return values;
}

// The message of the Error `f` throws; a test failure if it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an fsdplab::Error";
  return "";
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

inline std::vector<float> random_values(std::size_t n, std::uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

// A tensor on `device` holding `values` (rounded to bf16 when dtype is bf16).
inline Tensor tensor_from(Device& device, const Shape& shape, std::span<const float> values,
                          DType dtype = DType::f32, MemTag tag = MemTag::activation) {
  Tensor t = Tensor::empty(device, shape, dtype, tag);
  t.copy_from(values);
  return t;
}

inline Tensor zeros(Device& device, const Shape& shape, DType dtype = DType::f32, MemTag tag = MemTag::activation) {
  std::vector<float> values(static_cast<std::size_t>(shape_numel(shape)), 0.f);
  return tensor_from(device, shape, values, dtype, tag);
}

// Every element within atol + rtol * |expected|; reports the first few offenders.
inline ::testing::AssertionResult all_close(std::span<const float> actual, std::span<const double> expected,
                                            double atol, double rtol = 0) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "sizes differ: " << actual.size() << " vs " << expected.size();
  int bad = 0;
  auto failure = ::testing::AssertionFailure();
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double diff = std::abs(static_cast<double>(actual[i]) - expected[i]);
    if (!(diff <= atol + rtol * std::abs(expected[i]))) {
      if (bad < 5) failure << "[" << i << "] got " << actual[i] << ", expected " << expected[i] << "; ";
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return failure << bad << " of " << actual.size() << " elements off (atol " << atol << ", rtol " << rtol << ")";
}

inline ::testing::AssertionResult all_close(std::span<const float> actual, std::span<const float> expected,
                                            double atol, double rtol = 0) {
  std::vector<double> e(expected.begin(), expected.end());
  return all_close(actual, std::span<const double>(e), atol, rtol);
}

// Central differences of a scalar function of `x`: d f / d x_i ~ (f(x + eps e_i) - f(x - eps e_i)) / 2 eps.
// To check a backward pass, make f(x) = sum(forward(x) * g) for a fixed random g and feed g as the
// upstream gradient: the backward's input gradient must match this.
inline std::vector<double> finite_difference(const std::function<double(std::span<const float>)>& f,
                                             std::vector<float> x, double eps = 1e-2) {
  std::vector<double> grad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = static_cast<float>(saved + eps);
    const double plus = f(x);
    x[i] = static_cast<float>(saved - eps);
    const double minus = f(x);
    x[i] = saved;
    grad[i] = (plus - minus) / (2 * eps);
  }
  return grad;
}

// sum(a * b) in double.
inline double dot(std::span<const float> a, std::span<const float> b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Every parameter of `model` gets its own value tensor on `dev`, in `dtype`, from its ParamInit under `seed`,
// and a zeroed gradient: a model whole on one device, for tests of its numerics (the single-rank baseline
// keeps its parameters flat instead: engine/train/baseline_parameters.hpp).
inline void materialise(Module& model, Device& dev, std::uint64_t seed, DType dtype = DType::f32) {
  for (Parameter* p : model.parameters()) {
    std::vector<float> v(static_cast<std::size_t>(p->numel()));
    p->init.fill(v, seed, p->name, 0);
    p->value = tensor_from(dev, p->shape, v, dtype, MemTag::param_full);
    p->grad = zeros(dev, p->shape, dtype, MemTag::grad_full);
  }
}

// Zeroes every parameter's gradient on `stream`, one op each: between the steps a test runs by hand.
inline void zero_grads(Module& model, Stream stream) {
  for (Parameter* p : model.parameters()) fill(stream, p->grad, 0);
}

// Counts every forward and backward hook call of the modules it is added to (Module::add_hooks).
struct CountsHookCalls : ModuleHooks {
  int calls = 0;
  void pre_forward(Module&, RunContext&) override { ++calls; }
  void post_forward(Module&, RunContext&) override { ++calls; }
  void pre_backward(Module&, RunContext&) override { ++calls; }
  void post_backward(Module&, RunContext&) override { ++calls; }
};

// A fixture with a fresh folder of its own per test (named for the test and the process, so parallel
// CTest runs never share one), removed afterwards; and whole-file reads and writes.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("fsdplab_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    // A parameterised test's name has a '/' ("Resume/full_w2"): its folder sits in a folder of its own, removed when
    // empty (another instance's folder may still be in it).
    std::error_code ignored;
    if (dir_.parent_path() != std::filesystem::temp_directory_path())
      std::filesystem::remove(dir_.parent_path(), ignored);
  }

  std::filesystem::path path(const std::string& name) const { return dir_ / name; }
  const std::filesystem::path& dir() const { return dir_; }

  static std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static void spit(const std::filesystem::path& p, const std::string& bytes) {
    std::filesystem::remove(p);  // a new file: ext4 flushes a file truncated in place to disk, which is slow
    std::ofstream out(p, std::ios::binary);
    out << bytes;
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace fsdplab::testing
