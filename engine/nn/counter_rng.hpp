// counter_rng.hpp — counter-based random numbers: what makes FSDP's meta init possible.
//
// A stateful generator (std::mt19937, torch.manual_seed) gives element i of a parameter only after
// drawing elements 0..i-1, so a rank holding a shard would have to generate the whole parameter.
// Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC11; the generator
// of cuRAND, Random123 and JAX) is a pure function of a 128-bit counter and a 64-bit key instead,
// so element i is computed from i alone and any slice [begin, end) of a parameter, generated on its
// own, equals the same slice of the whole.
//
// Addressing an element: key = the run's 64-bit seed (low word k0, high word k1); counter = (the
// element index, low word first; the parameter's stream key, low word first). The stream key is
// FNV-1a 64 of the UTF-8 bytes of the parameter's dotted name ("transformer.h.0.attn.c_attn.weight"), so two
// parameters never share a stream however the model is sharded, and renaming one re-rolls it.
//
// Every distribution below is a pure function of (seed, key, index): one Philox call per element.
// tests/reference/counter_rng.py is a bit-exact Python twin for the PyTorch reference.
//
// Which initialisation each model uses (the model code calls these with its parameter names):
//   gpt2 (GPT-2 / nanoGPT / llm.c): Linear and Embedding weights normal(0, 0.02); the residual
//     projections (attn.c_proj, mlp.c_proj) normal(0, 0.02 / sqrt(2 * n_layer)), so the residual
//     stream's variance does not grow with depth; every bias 0; LayerNorm weight 1, bias 0.
//   llama: every Linear and Embedding weight normal(0, 0.02) (LlamaConfig.initializer_range); RMSNorm weight 1.
//   toy, mlp (PyTorch defaults): nn.Linear weight kaiming_uniform(a = sqrt(5)), which works out to
//     U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and bias the same U(-1/sqrt(fan_in), 1/sqrt(fan_in));
//     nn.LayerNorm weight 1, bias 0.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string_view>

namespace fsdplab {

using PhiloxCounter = std::array<std::uint32_t, 4>;
using PhiloxKey = std::array<std::uint32_t, 2>;

// The bare block function; checked against Random123's known-answer vectors.
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// FNV-1a 64 of the UTF-8 bytes of `name`.
std::uint64_t stream_key(std::string_view name);

// The four words for element `index` of stream `key` under `seed`.
PhiloxCounter philox_at(std::uint64_t seed, std::uint64_t key, std::uint64_t index);

// U[lo, hi) as a float, lo < hi. The top 24 bits of word 0 give u = m / 2^24 in [0, 1), exact in
// float; then d = hi - lo, p = d * u, r = lo + p, each rounded to float in that order (no fused
// multiply-add: a CUDA port must use __fsub_rn/__fmul_rn/__fadd_rn). Where float spacing near hi is
// coarser than d / 2^24, r can round up to hi; it then becomes the float just below hi.
float uniform_at(std::uint64_t seed, std::uint64_t key, std::uint64_t index, float lo, float hi);

// N(mean, std^2) as a float by Box-Muller in double from the four words of one Philox call:
// u1 = ((w0:w1 >> 11) + 1) / 2^53 in (0, 1] (never 0, so the log is finite), u2 = (w2:w3 >> 11) /
// 2^53 in [0, 1), z = sqrt(-2 ln u1) cos(2 pi u2), result = float(mean + stddev * z). The sine half of
// the pair is dropped: pairing elements would make element i depend on its neighbour's counter, and
// a slice starting at an odd index would then differ from the whole.
float normal_at(std::uint64_t seed, std::uint64_t key, std::uint64_t index, float mean, float stddev);

// out[j] = uniform_at / normal_at of index first_index + j: fill this rank's slice of a parameter.
void fill_uniform(std::span<float> out, std::uint64_t seed, std::uint64_t key, std::uint64_t first_index, float lo,
                  float hi);
void fill_normal(std::span<float> out, std::uint64_t seed, std::uint64_t key, std::uint64_t first_index, float mean,
                 float stddev);

// The initialisations above as numbers.
inline constexpr float kGpt2InitStd = 0.02f;
// 0.02 / sqrt(2 * n_layer): the std of GPT-2's residual projections (c_proj).
float gpt2_residual_std(int n_layer);
// 1 / sqrt(fan_in): the bound of PyTorch's default nn.Linear weight and bias, U(-bound, bound).
float linear_default_bound(std::int64_t fan_in);

}  // namespace fsdplab
