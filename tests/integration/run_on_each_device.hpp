// run_on_each_device.hpp — training runs parameterised over devices: each case once on sim and once on
// cuda (test names end in _sim and _cuda), the cuda instances skipped, saying why, where this build or
// machine has no usable GPU. What a run is compared with (a baseline, PyTorch's golden values) stays
// what it was: the devices compute the same numerics, up to rounding.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/runtime/device_factory.hpp"
#include "engine/train/run_config.hpp"
#include "test_support.hpp"  // device_param_name

namespace fsdplab::testing {

//   class GoldenRun : public RunOnEachDevice<std::string> {};
//   TEST_P(GoldenRun, X) { RunConfig run = on_device(config_for(param())); ... }
//   INSTANTIATE_TEST_SUITE_P(Golden, GoldenRun, on_each_device(cases), with_device_name<std::string>(name));
// or, with no parameter but the device:
//   class BaselineRun : public RunOnEachDevice<> {};
//   INSTANTIATE_TEST_SUITE_P(Devices, BaselineRun, on_each_device(), testing::device_param_name);

inline DeviceKind kind_of(DeviceKind kind) { return kind; }
template <class P>
DeviceKind kind_of(const std::tuple<P, DeviceKind>& param) {
  return std::get<1>(param);
}

template <class Param>
class DeviceRunTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (kind() == DeviceKind::cuda) {
      if (auto why = cuda_unavailable()) GTEST_SKIP() << "cuda device: " << *why;
    }
  }
  DeviceKind kind() const { return kind_of(this->GetParam()); }
  std::string device_name() const { return std::string(device_kind_name(kind())); }
  // `run` on this instance's device (RunConfig's default, and so every reference run's, is sim).
  RunConfig on_device(RunConfig run) const {
    run.device = device_name();
    return run;
  }
};

template <class P = void>
class RunOnEachDevice : public DeviceRunTest<std::tuple<P, DeviceKind>> {
 protected:
  const P& param() const { return std::get<0>(this->GetParam()); }
};

template <>
class RunOnEachDevice<void> : public DeviceRunTest<DeviceKind> {};

inline auto on_each_device() { return ::testing::Values(DeviceKind::sim, DeviceKind::cuda); }

template <class P>
auto on_each_device(std::vector<P> cases) {
  return ::testing::Combine(::testing::ValuesIn(std::move(cases)), on_each_device());
}

// "<the case's name>_<device>".
template <class P, class CaseName>
auto with_device_name(CaseName case_name) {
  return [case_name](const ::testing::TestParamInfo<std::tuple<P, DeviceKind>>& info) {
    return case_name(std::get<0>(info.param)) + "_" + std::string(device_kind_name(std::get<1>(info.param)));
  };
}

}  // namespace fsdplab::testing
