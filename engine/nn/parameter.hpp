// parameter.hpp — a named parameter: its shape, how it is initialised, and where its value and
// gradient live right now.
//
// The model is built as shapes only (a meta model: task 1 of the lab). Whoever materialises it
// decides where `value` and `grad` point: the single-rank baseline gives each parameter tensors of
// its own; FSDP points them into views of a unit's FlatParameter, so the model code never knows
// whether it runs sharded. Modules therefore read `value` at every forward, never cache it.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// How a parameter's initial values are drawn. Every value is a pure function of (seed, the
// parameter's name, the element's index) through the counter-based RNG (counter_rng.hpp), so any
// slice can be generated alone and equals the same slice of the whole.
struct ParamInit {
  enum class Kind { normal, uniform, constant };
  Kind kind = Kind::constant;
  float a = 0;  // normal: mean; uniform: low; constant: the value
  float b = 0;  // normal: std; uniform: high

  static ParamInit normal(float mean, float std) { return {Kind::normal, mean, std}; }
  static ParamInit uniform(float lo, float hi) { return {Kind::uniform, lo, hi}; }
  static ParamInit constant(float value) { return {Kind::constant, value, 0}; }

  // out[j] = element first_index + j of parameter `name` under `seed`.
  void fill(std::span<float> out, std::uint64_t seed, std::string_view name, std::uint64_t first_index) const;
};

struct Parameter {
  std::string name;  // dotted, from the model's root: "transformer.h.0.attn.c_attn.weight"
  Shape shape;
  ParamInit init;
  Tensor value;  // f32 or bf16; undefined until materialised
  Tensor grad;   // same shape; undefined until the trainer (or FSDP) provides it

  std::int64_t numel() const { return shape_numel(shape); }
};

// The parameter's value and gradient buffer as an op may use them: an Error naming the parameter when
// it has not been materialised (by the trainer or FSDP) or given a gradient buffer yet.
const Tensor& value_of(const Parameter& p);
const Tensor& grad_of(const Parameter& p);

}  // namespace fsdplab
