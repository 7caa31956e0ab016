// unit_plan.hpp — what task 7 decides and the engine builds: which modules are FSDP units, which
// parameters each holds, and which unit encloses which.
#pragma once
#include <string>
#include <vector>

#include "engine/nn/module.hpp"

namespace fsdplab {

struct UnitPlan {
  Module* module = nullptr;
  std::string name;                // the module's dotted name, "(root)" for the root
  std::vector<Parameter*> params;  // in registration order, each once
  int parent = -1;                 // the enclosing unit, -1 for none
};

}  // namespace fsdplab
