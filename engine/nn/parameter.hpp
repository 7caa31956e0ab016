// parameter.hpp — a named parameter: its shape, how it is initialised, and where its value and
// gradient live right now.
//
// The model is built as shapes only (a meta model: task 1 of the lab). Whoever materialises it
// decides where `value` and `grad` point: the single-rank baseline gives each parameter tensors of
// its own; FSDP points them into views of a unit's FlatParameter, so the model code never knows
// whether it runs sharded. Modules therefore read `value` at every forward, never cache it.
#pragma once
#include <cstdint>
#include <limits>
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
  // Elements from this index on are 0 whatever the kind: a padded table's padding rows
  // (Parameter::padding_rows). Module::register_parameter sets it.
  std::uint64_t zero_from = std::numeric_limits<std::uint64_t>::max();

  static constexpr ParamInit normal(float mean, float std) { return {.kind = Kind::normal, .a = mean, .b = std}; }
  static constexpr ParamInit uniform(float lo, float hi) { return {.kind = Kind::uniform, .a = lo, .b = hi}; }
  static constexpr ParamInit constant(float value) { return {.kind = Kind::constant, .a = value}; }

  // out[j] = element first_index + j of parameter `name` under `seed`.
  void fill(std::span<float> out, std::uint64_t seed, std::string_view name, std::uint64_t first_index) const;
};

struct Parameter {
  std::string name;  // dotted, from the model's root: "transformer.h.0.attn.c_attn.weight"
  Shape shape;
  ParamInit init;
  Tensor value;  // f32 or bf16; undefined until materialised
  Tensor grad;   // same shape; undefined until the trainer (or FSDP) provides it
  // Trailing rows of shape[0] that exist only in storage, to give a table a size the GPU's tiles divide
  // (GPT-2's vocabulary: see [Note: the padded vocabulary] in gpt2_model.hpp). They start at 0 and their
  // gradient is always 0, so they stay 0; no file holds them.
  std::int64_t padding_rows = 0;

  std::int64_t numel() const { return shape_numel(shape); }  // in storage: what memory and FSDP count
  Shape logical_shape() const;  // without the padding rows: what files hold and the model counts
  std::int64_t logical_numel() const { return shape_numel(logical_shape()); }
};

// The parameter's value and gradient buffer as an op may use them: an Error naming the parameter when
// it has not been materialised (by the trainer or FSDP) or given a gradient buffer yet.
const Tensor& value_of(const Parameter& p);
const Tensor& grad_of(const Parameter& p);

}  // namespace fsdplab
