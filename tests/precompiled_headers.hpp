// precompiled_headers.hpp — the headers most test files include, compiled once per test binary
// (target_precompile_headers; see [Note: how a test file is compiled] in tests/CMakeLists.txt).
// Nothing here is for a test to rely on: each test file still includes what it uses, and builds without
// this list. A header belongs here when many test files include it and it seldom changes.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/fsdp/fully_sharded_model.hpp"
#include "engine/runtime/error.hpp"
#include "engine/train/fsdp_trainer.hpp"
#include "engine/train/model_factory.hpp"
#include "engine/train/world.hpp"
