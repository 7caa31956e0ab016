// integration_task.hpp — task 7 of the lab: a whole model as nested FSDP units.
//
// The wrap policy names module kinds (GPT-2's "Block") or dotted module names ("transformer.wpe"): each
// such module starts a unit, inside the unit of its nearest wrapped ancestor if any (nested units), and
// the root unit takes every parameter no inner unit took (GPT-2's wte, wpe and ln_f). The engine then
// builds each unit's FlatParameter (task 2), hooks the unit's module so its forward and backward run the
// lifecycle (tasks 3, 4, 6), and trains the model equal to the single-rank baseline.
// Exercise: labs/07-integration.
#pragma once
#include <span>
#include <string>
#include <vector>

#include "engine/fsdp/fsdp_task.hpp"
#include "engine/fsdp/unit_plan.hpp"

namespace fsdplab {

class IntegrationTask : public FsdpTask {
 public:
  // The implementing class's file and line, for step-through (fsdp_task.hpp).
  explicit IntegrationTask(std::source_location origin = std::source_location::current()) : FsdpTask(origin) {}

  // Splits `model` into units, outermost first (pre-order: a unit's parent comes before it, the root
  // unit first). An Error for a wrapped module with no parameters, for a tied parameter used in a unit
  // that neither owns it nor runs inside its owner (its gradient would have no full buffer to go to),
  // and for a model with no parameters at all. A root unit left holding no parameter gets no unit.
  virtual std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const = 0;
};

// The reference implementation (integration_reference.cpp).
const IntegrationTask& reference_integration();

}  // namespace fsdplab
