#include "engine/nn/module.hpp"

#include "engine/runtime/error.hpp"

namespace fsdplab {

std::string Module::child_name(std::string_view local) const {
  check(!local.empty() && local.find('.') == std::string_view::npos, "module '", name_,
        "': a child or parameter name must be one non-empty component, got '", local, "'");
  return name_.empty() ? std::string(local) : name_ + "." + std::string(local);
}

Parameter& Module::register_parameter(std::string_view local_name, Shape shape, ParamInit init,
                                      std::int64_t padding_rows) {
  std::string full = child_name(local_name);
  for (const Parameter* p : own_)
    check(p->name != full, "module '", name_, "' registers parameter '", full, "' twice");
  if (padding_rows != 0) {
    check(!shape.empty() && padding_rows > 0 && padding_rows < shape[0], "parameter '", full,
          "': expected padding rows in [0, ", shape.empty() ? 0 : shape[0], ") of ", shape_str(shape), ", got ",
          padding_rows);
    init.zero_from = static_cast<std::uint64_t>(shape_numel(shape) / shape[0] * (shape[0] - padding_rows));
  }
  storage_.push_back(std::make_unique<Parameter>(
      Parameter{.name = std::move(full), .shape = std::move(shape), .init = init, .padding_rows = padding_rows}));
  own_.push_back(storage_.back().get());
  return *own_.back();
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> out;
  for (Module* m : modules())
    for (Parameter* p : m->own_) out.push_back(p);
  return out;
}

std::int64_t Module::parameter_count() {
  std::int64_t n = 0;
  for (const Parameter* p : parameters()) n += p->logical_numel();
  return n;
}

std::vector<Module*> Module::modules() {
  std::vector<Module*> out{this};
  for (const auto& child : children_) {
    std::vector<Module*> sub = child->modules();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

Module& Module::module(std::string_view dotted_name) {
  for (Module* m : modules())
    if (m->name_ == dotted_name) return *m;
  fail("the model has no module '", dotted_name, "'");
}

Parameter& Module::parameter(std::string_view dotted_name) {
  for (Parameter* p : parameters())
    if (p->name == dotted_name) return *p;
  fail("the model has no parameter '", dotted_name, "'");
}

const Module& Module::root() const { return parent_ ? parent_->root() : *this; }
Module& Module::root() { return parent_ ? parent_->root() : *this; }

void Module::enter_forward(RunContext& ctx) {
  if (!parent_) backward_order_.clear();  // a new pass begins at the root
  for (ModuleHooks* h : hooks_) h->pre_forward(*this, ctx);
}

void Module::exit_forward(RunContext& ctx) {
  for (ModuleHooks* h : hooks_) h->post_forward(*this, ctx);
}

void Module::enter_backward(RunContext& ctx) {
  root().backward_order_.push_back(this);
  for (ModuleHooks* h : hooks_) h->pre_backward(*this, ctx);
}

void Module::exit_backward(RunContext& ctx) {
  for (ModuleHooks* h : hooks_) h->post_backward(*this, ctx);
}

}  // namespace fsdplab
