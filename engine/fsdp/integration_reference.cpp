// The reference integration (task 7): which modules become FSDP units, nested inside one another, and
// what the root unit keeps.
#include <algorithm>
#include <map>

#include "engine/fsdp/integration_task.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

class ReferenceIntegration final : public IntegrationTask {
 public:
  std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const override {
    std::vector<UnitPlan> plans;
    std::map<const Module*, int> unit_of_module;
    std::map<const Parameter*, int> unit_of_param;
    const auto wrapped = [&](const Module& m) {
      return std::any_of(unit_kinds.begin(), unit_kinds.end(),
                         [&](const std::string& k) { return k == m.kind() || k == m.name(); });
    };
    // Pre-order, so a unit's parent is planned before it and the root unit comes first.
    for (Module* m : model.modules()) {
      int unit = m->parent() ? unit_of_module.at(m->parent()) : -1;
      if (!m->parent() || wrapped(*m)) {
        plans.push_back({m, m->parent() ? m->name() : "(root)", {}, unit});
        unit = static_cast<int>(plans.size()) - 1;
      }
      unit_of_module[m] = unit;
      for (Parameter* p : m->own_parameters()) {
        plans[static_cast<std::size_t>(unit)].params.push_back(p);
        unit_of_param[p] = unit;
      }
    }
    for (std::size_t u = 1; u < plans.size(); ++u)
      check(!plans[u].params.empty(), "FSDP unit '", plans[u].name, "' (", plans[u].module->kind(),
            ") has no parameters; a unit must own at least one (wrap a module that has some)");
    // A tied parameter's gradient goes to its owner unit's full gradient buffer, which exists while the
    // owner or a unit inside it runs its backward: the user must be the owner or nested in it.
    for (Module* m : model.modules()) {
      for (Parameter* p : m->shared_parameters()) {
        const auto owned = unit_of_param.find(p);
        check(owned != unit_of_param.end(), "module '", m->name(), "' uses parameter '", p->name,
              "', which no module of this model registers");
        const int owner = owned->second;
        int u = unit_of_module.at(m);
        while (u != -1 && u != owner) u = plans[static_cast<std::size_t>(u)].parent;
        check(u == owner, "tied parameter '", p->name, "' belongs to FSDP unit '",
              plans[static_cast<std::size_t>(owner)].name, "' but module '", m->name(), "' uses it from unit '",
              plans[static_cast<std::size_t>(unit_of_module.at(m))].name,
              "', which does not run inside it; put the parameter's users in one unit");
      }
    }
    if (plans.front().params.empty()) {
      check(plans.size() > 1, "FSDP: the model has no parameters to shard");
      plans.erase(plans.begin());  // the root owns nothing: no root unit; its children have no parent unit
      for (UnitPlan& p : plans) p.parent = p.parent <= 0 ? -1 : p.parent - 1;
    }
    return plans;
  }
};

}  // namespace

const IntegrationTask& reference_integration() {
  static const ReferenceIntegration task;
  return task;
}

}  // namespace fsdplab
