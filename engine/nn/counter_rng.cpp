// counter_rng.cpp — Philox4x32-10, FNV-1a stream keys, and the uniform and normal distributions.
#include "engine/nn/counter_rng.hpp"

#include <cmath>
#include <numbers>

#include "engine/runtime/error.hpp"

namespace fsdplab {

namespace {

// Multipliers and Weyl key increments of Philox4x32 (Random123's philox.h).
constexpr std::uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr std::uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr std::uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr std::uint32_t kPhiloxW1 = 0xBB67AE85u;

// One round: two 32x32->64 products, whose high halves are xored with the other words and the key.
PhiloxCounter philox_round(const PhiloxCounter& c, const PhiloxKey& k) {
  const std::uint64_t p0 = std::uint64_t{kPhiloxM0} * c[0];
  const std::uint64_t p1 = std::uint64_t{kPhiloxM1} * c[2];
  return {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<std::uint32_t>(p1),
          static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<std::uint32_t>(p0)};
}

void check_range(float lo, float hi) {
  // Written so that NaN fails too.
  check(lo < hi && std::isfinite(hi - lo), "uniform: expected finite lo < hi, got lo ", lo, ", hi ", hi);
}

void check_std(float mean, float stddev) {
  check(std::isfinite(mean) && std::isfinite(stddev) && stddev >= 0,
        "normal: expected a finite mean and std >= 0, got mean ", mean, ", std ", stddev);
}

float uniform_unchecked(std::uint64_t seed, std::uint64_t key, std::uint64_t index, float lo, float hi) {
  const float u = static_cast<float>(philox_at(seed, key, index)[0] >> 8) * 0x1p-24f;
  // Separate statements: a compiler may fuse a*b+c within one expression, and the Python twin
  // rounds after each operation.
  const float d = hi - lo;
  const float p = d * u;
  const float r = lo + p;
  return r < hi ? r : std::nextafter(hi, lo);
}

float normal_unchecked(std::uint64_t seed, std::uint64_t key, std::uint64_t index, float mean, float stddev) {
  const PhiloxCounter w = philox_at(seed, key, index);
  const std::uint64_t a = ((std::uint64_t{w[0]} << 32) | w[1]) >> 11;
  const std::uint64_t b = ((std::uint64_t{w[2]} << 32) | w[3]) >> 11;
  const double u1 = static_cast<double>(a + 1) * 0x1p-53;
  const double u2 = static_cast<double>(b) * 0x1p-53;
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  const double scaled = static_cast<double>(stddev) * z;  // not fused with the add, as above
  return static_cast<float>(static_cast<double>(mean) + scaled);
}

}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) key = {key[0] + kPhiloxW0, key[1] + kPhiloxW1};
    counter = philox_round(counter, key);
  }
  return counter;
}

std::uint64_t stream_key(std::string_view name) {
  std::uint64_t hash = 0xCBF29CE484222325ull;  // FNV-1a 64 offset basis
  for (const char ch : name) {
    hash ^= static_cast<unsigned char>(ch);
    hash *= 0x100000001B3ull;  // FNV-1a 64 prime
  }
  return hash;
}

PhiloxCounter philox_at(std::uint64_t seed, std::uint64_t key, std::uint64_t index) {
  return philox4x32_10({static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32),
                        static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32)},
                       {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
}

float uniform_at(std::uint64_t seed, std::uint64_t key, std::uint64_t index, float lo, float hi) {
  check_range(lo, hi);
  return uniform_unchecked(seed, key, index, lo, hi);
}

float normal_at(std::uint64_t seed, std::uint64_t key, std::uint64_t index, float mean, float stddev) {
  check_std(mean, stddev);
  return normal_unchecked(seed, key, index, mean, stddev);
}

void fill_uniform(std::span<float> out, std::uint64_t seed, std::uint64_t key, std::uint64_t first_index, float lo,
                  float hi) {
  check_range(lo, hi);
  for (std::size_t j = 0; j < out.size(); ++j) out[j] = uniform_unchecked(seed, key, first_index + j, lo, hi);
}

void fill_normal(std::span<float> out, std::uint64_t seed, std::uint64_t key, std::uint64_t first_index, float mean,
                 float stddev) {
  check_std(mean, stddev);
  for (std::size_t j = 0; j < out.size(); ++j) out[j] = normal_unchecked(seed, key, first_index + j, mean, stddev);
}

float gpt2_residual_std(int n_layer) {
  check(n_layer > 0, "gpt2_residual_std: expected n_layer > 0, got ", n_layer);
  return static_cast<float>(0.02 / std::sqrt(2.0 * n_layer));
}

float linear_default_bound(std::int64_t fan_in) {
  check(fan_in > 0, "linear_default_bound: expected fan_in > 0, got ", fan_in);
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)));
}

}  // namespace fsdplab
