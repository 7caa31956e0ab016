// module.hpp — the module tree: PyTorch-style dotted names, explicit forward and backward, and the
// four hook points FSDP uses around each module.
//
// There is no autograd. A module's forward saves what its backward needs (as llm.c does) and its
// backward takes the output's gradient, ADDS its parameters' gradients into Parameter::grad, and
// returns the input's gradient. Each forward and backward is bracketed by enter_/exit_ calls, which
// run the hooks in this order, as torch.distributed.fsdp registers them:
//   pre_forward   before the module computes   (FSDP: all-gather the unit's parameters)
//   post_forward  after it computed            (FSDP: reshard)
//   pre_backward  before its backward          (FSDP: gather again if resharded)
//   post_backward after its backward           (FSDP: reduce-scatter the gradients)
// The root records the order in which modules ran their backward (backward_order(), which the model tests read;
// FSDP keeps its own orders, overlap_state.hpp).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/nn/parameter.hpp"
#include "engine/runtime/device.hpp"

namespace fsdplab {

class Module;

// What every forward and backward needs: where to launch, and in which dtype activations live.
struct RunContext {
  Device& device;
  DType dtype = DType::f32;  // activations and compute; parameters arrive in this dtype too
  // Backward computes the gradient of loss_scale × loss: gradient accumulation over N micro-batches
  // sets 1/N, so the gradients summed over them are those of the whole batch's mean loss.
  float loss_scale = 1.0f;
  Stream stream() const { return device.stream(Lane::compute); }
  // A tensor for an activation or an activation's gradient, in the run's dtype.
  Tensor activation(Shape shape, std::string name) const {
    return Tensor::empty(device, std::move(shape), dtype, MemTag::activation, std::move(name));
  }
};

class ModuleHooks {
 public:
  virtual ~ModuleHooks() = default;
  virtual void pre_forward(Module&, RunContext&) {}
  virtual void post_forward(Module&, RunContext&) {}
  virtual void pre_backward(Module&, RunContext&) {}
  virtual void post_backward(Module&, RunContext&) {}
};

class Module {
 public:
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Dotted path from the root ("transformer.h.0.attn"); empty for the root.
  const std::string& name() const { return name_; }
  // The class, for display ("Linear", "Block").
  virtual std::string_view kind() const = 0;
  Module* parent() const { return parent_; }
  const std::vector<std::unique_ptr<Module>>& children() const { return children_; }
  // Parameters registered by this module itself (a tied parameter belongs to its first owner only).
  const std::vector<Parameter*>& own_parameters() const { return own_; }
  // Parameters this module computes with but another module owns (tied weights).
  const std::vector<Parameter*>& shared_parameters() const { return used_; }
  // Every parameter of the subtree once, in registration order: the order of a state dict.
  std::vector<Parameter*> parameters();
  // Their elements as Hugging Face counts them (sum(p.numel() for p in model.parameters())): without padding
  // rows (Parameter::logical_numel), which only memory and FSDP count.
  std::int64_t parameter_count();
  // Every module of the subtree, this one first (pre-order).
  std::vector<Module*> modules();
  // The module or parameter with this dotted name; an Error naming what is missing.
  Module& module(std::string_view dotted_name);
  Parameter& parameter(std::string_view dotted_name);

  void add_hooks(ModuleHooks* hooks) { hooks_.push_back(hooks); }
  void remove_hooks(ModuleHooks* hooks) { std::erase(hooks_, hooks); }

  // Modules in the order their backward ran in the last backward pass (recorded at the root).
  const std::vector<Module*>& backward_order() const { return root().backward_order_; }

 protected:
  explicit Module(std::string name, Module* parent = nullptr) : name_(std::move(name)), parent_(parent) {}

  // The last `padding_rows` rows of shape[0] are storage only (Parameter::padding_rows): init draws 0 there.
  Parameter& register_parameter(std::string_view local_name, Shape shape, ParamInit init,
                                std::int64_t padding_rows = 0);
  // Uses a parameter another module registered (GPT-2's LM head is the token embedding).
  void use_parameter(Parameter& shared) { used_.push_back(&shared); }
  template <class M, class... Args>
  M& register_module(std::string_view local_name, Args&&... args) {
    auto child = std::make_unique<M>(child_name(local_name), std::forward<Args>(args)...);
    child->parent_ = this;
    M& ref = *child;
    children_.push_back(std::move(child));
    return ref;
  }

  void enter_forward(RunContext& ctx);
  void exit_forward(RunContext& ctx);
  void enter_backward(RunContext& ctx);
  void exit_backward(RunContext& ctx);

 private:
  std::string child_name(std::string_view local) const;
  const Module& root() const;
  Module& root();

  std::string name_;
  Module* parent_;
  std::vector<std::unique_ptr<Module>> children_;
  std::vector<std::unique_ptr<Parameter>> storage_;
  std::vector<Parameter*> own_;
  std::vector<Parameter*> used_;
  std::vector<ModuleHooks*> hooks_;
  std::vector<Module*> backward_order_;  // kept by the root only
};

// Children named by their index, as nn.ModuleList names them: "blocks.0", "blocks.1", ...
class ModuleList final : public Module {
 public:
  explicit ModuleList(std::string name) : Module(std::move(name)) {}
  std::string_view kind() const override { return "ModuleList"; }
  template <class M, class... Args>
  M& append(Args&&... args) {
    return register_module<M>(std::to_string(children().size()), std::forward<Args>(args)...);
  }
};

}  // namespace fsdplab
