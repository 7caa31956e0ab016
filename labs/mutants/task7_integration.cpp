// Task 7's mutants: unit plans with one mistake each (the pitfalls of labs/07-integration).
#include <algorithm>
#include <map>

#include "engine/fsdp/integration_task.hpp"
#include "engine/runtime/error.hpp"
#include "labs/mutants/mutants.hpp"

namespace fsdplab {
namespace {

const IntegrationTask& reference() { return reference_integration(); }

// Takes module->parameters() (the whole subtree) for every unit below the root, or (RootToo) for the root's unit as
// well: a Block unit also holds its Linear units' parameters, and the root then the whole model once more.
template <bool RootToo>
class SubtreeParameters final : public IntegrationTask {
 public:
  std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const override {
    std::vector<UnitPlan> plans = reference().plan_units(model, unit_kinds);
    for (UnitPlan& p : plans)
      if (RootToo || p.module != &model) p.params = p.module->parameters();
    return plans;
  }
};

// Matches the policy against kind() only: an entry that names a module ("transformer.wpe") is never met.
class KindOnly final : public IntegrationTask {
 public:
  std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const override {
    std::vector<std::string> kinds;
    for (const std::string& k : unit_kinds) {
      const std::vector<Module*> modules = model.modules();
      if (std::any_of(modules.begin(), modules.end(), [&](const Module* m) { return m->kind() == k; }))
        kinds.push_back(k);
    }
    return reference().plan_units(model, kinds);
  }
};

// Keeps a root unit that owns nothing (and counts the parents from it).
class EmptyRootKept final : public IntegrationTask {
 public:
  std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const override {
    std::vector<UnitPlan> plans = reference().plan_units(model, unit_kinds);
    if (!plans.empty() && plans.front().module == &model) return plans;
    for (UnitPlan& p : plans) p.parent += 1;
    plans.insert(plans.begin(), UnitPlan{&model, "(root)", {}, -1});
    return plans;
  }
};

// Sets every unit's parent to the root, whatever encloses it.
class FlatParents final : public IntegrationTask {
 public:
  std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const override {
    std::vector<UnitPlan> plans = reference().plan_units(model, unit_kinds);
    const bool has_root = !plans.empty() && plans.front().module == &model;
    for (std::size_t u = 0; u < plans.size(); ++u)
      if (!(has_root && u == 0)) plans[u].parent = has_root ? 0 : -1;
    return plans;
  }
};

// The reference's plan without its checks: empty units and tied weights used outside their unit pass.
class NoChecks final : public IntegrationTask {
 public:
  std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const override {
    std::vector<UnitPlan> plans;
    std::map<const Module*, int> unit_of_module;
    const auto wrapped = [&](const Module& m) {
      return std::any_of(unit_kinds.begin(), unit_kinds.end(),
                         [&](const std::string& k) { return k == m.kind() || k == m.name(); });
    };
    for (Module* m : model.modules()) {
      int unit = m->parent() ? unit_of_module.at(m->parent()) : -1;
      if (!m->parent() || wrapped(*m)) {
        plans.push_back({m, m->parent() ? m->name() : "(root)", {}, unit});
        unit = static_cast<int>(plans.size()) - 1;
      }
      unit_of_module[m] = unit;
      for (Parameter* p : m->own_parameters()) plans[static_cast<std::size_t>(unit)].params.push_back(p);
    }
    if (plans.front().params.empty() && plans.size() > 1) {
      plans.erase(plans.begin());
      for (UnitPlan& p : plans) p.parent = p.parent <= 0 ? -1 : p.parent - 1;
    }
    return plans;
  }
};

// Adds each module's shared_parameters() to the unit that runs it: GPT-2's tied wte, which the root owns,
// is put in the root a second time (by the LM head).
class SharedInUsersUnit final : public IntegrationTask {
 public:
  std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const override {
    std::vector<UnitPlan> plans = reference().plan_units(model, unit_kinds);
    const auto plan_of = [&](const Module* m) {
      return std::find_if(plans.begin(), plans.end(), [m](const UnitPlan& p) { return p.module == m; });
    };
    for (Module* m : model.modules()) {
      const Module* holder = m;  // the nearest enclosing module that is a unit
      while (holder != nullptr && plan_of(holder) == plans.end()) holder = holder->parent();
      if (holder == nullptr) continue;
      for (Parameter* p : m->shared_parameters()) plan_of(holder)->params.push_back(p);
    }
    return plans;
  }
};

// Removes the empty root but leaves the parent indices as they were counted with it: each is one too high,
// and the root's children point at unit 0, the first of them itself (which the engine refuses).
class RootRemovedParentsKept final : public IntegrationTask {
 public:
  std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const override {
    std::vector<UnitPlan> plans = reference().plan_units(model, unit_kinds);
    if (!plans.empty() && plans.front().module == &model) return plans;
    for (UnitPlan& p : plans) p.parent += 1;  // -1 (the root's children) becomes 0, k becomes k + 1
    return plans;
  }
};

// Removes the empty root and makes its children parentless, but leaves the other parents as counted with the root:
// a unit inside a unit (mlp --wrap nested) points one past its parent.
class ParentsNotRenumbered final : public IntegrationTask {
 public:
  std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const override {
    std::vector<UnitPlan> plans = reference().plan_units(model, unit_kinds);
    if (!plans.empty() && plans.front().module == &model) return plans;
    for (UnitPlan& p : plans)
      if (p.parent >= 0) p.parent += 1;
    return plans;
  }
};

// Allows a tied weight's user only in its owner's unit itself, not in a unit nested inside it (the walk up the
// parents left out): a plan the contract allows is refused.
class TiedUserInOwnerOnly final : public IntegrationTask {
 public:
  std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const override {
    std::vector<UnitPlan> plans = reference().plan_units(model, unit_kinds);
    const auto unit_running = [&](const Module* m) {  // the nearest enclosing module that is a unit
      for (; m != nullptr; m = m->parent())
        for (const UnitPlan& p : plans)
          if (p.module == m) return &p;
      return static_cast<const UnitPlan*>(nullptr);
    };
    for (Module* m : model.modules())
      for (Parameter* shared : m->shared_parameters()) {
        const auto owner = std::find_if(plans.begin(), plans.end(), [&](const UnitPlan& p) {
          return std::find(p.params.begin(), p.params.end(), shared) != p.params.end();
        });
        const UnitPlan* user = unit_running(m);
        check(owner != plans.end() && user == &*owner, "tied parameter '", shared->name, "' is used by module '",
              m->name(), "' from unit '", user ? user->name : "", "', not its owner's");
      }
    return plans;
  }
};

// Names the root unit by its module's name(), which is empty for the root, instead of "(root)".
class RootNamedEmpty final : public IntegrationTask {
 public:
  std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const override {
    std::vector<UnitPlan> plans = reference().plan_units(model, unit_kinds);
    for (UnitPlan& p : plans)
      if (p.module == &model) p.name = model.name();
    return plans;
  }
};

// Makes the model itself a unit only when the policy names its kind, like any module: GPT-2's root is then no unit,
// and wte, wpe and ln_f, which no inner unit takes, are in none (the parents renumbered without it).
class NoRoot final : public IntegrationTask {
 public:
  std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const override {
    std::vector<UnitPlan> plans = reference().plan_units(model, unit_kinds);
    if (plans.empty() || plans.front().module != &model ||
        std::find(unit_kinds.begin(), unit_kinds.end(), model.kind()) != unit_kinds.end())
      return plans;
    plans.erase(plans.begin());
    for (UnitPlan& p : plans) p.parent -= 1;  // the root's children: -1
    return plans;
  }
};

// Lists the units sorted by name instead of in pre-order, the parents renumbered to match: every unit right, in
// another order (the root stays first, but transformer.wpe, registered before transformer.h, comes after every
// Block).
class UnitsByName final : public IntegrationTask {
 public:
  std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const override {
    std::vector<UnitPlan> plans = reference().plan_units(model, unit_kinds);
    std::vector<int> order(plans.size());
    for (std::size_t u = 0; u < order.size(); ++u) order[u] = static_cast<int>(u);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return plans[static_cast<std::size_t>(a)].module->name() < plans[static_cast<std::size_t>(b)].module->name();
    });
    std::vector<int> position(plans.size());
    for (std::size_t at = 0; at < order.size(); ++at)
      position[static_cast<std::size_t>(order[at])] = static_cast<int>(at);
    std::vector<UnitPlan> sorted;
    for (int u : order) {
      UnitPlan p = plans[static_cast<std::size_t>(u)];
      if (p.parent >= 0) p.parent = position[static_cast<std::size_t>(p.parent)];
      sorted.push_back(std::move(p));
    }
    return sorted;
  }
};

// The reference's plan (NoChecks') with the contract's checks and its own rule for a tie: `allowed(plans, user,
// owner)` says whether a module running in unit `user` may use a tied weight unit `owner` owns.
template <class TieRule>
std::vector<UnitPlan> plan_with_tie_rule(Module& model, std::span<const std::string> unit_kinds, TieRule allowed) {
  std::vector<UnitPlan> plans = NoChecks().plan_units(model, unit_kinds);
  for (const UnitPlan& p : plans)
    check(!p.params.empty(), "FSDP unit '", p.name, "' has no parameters; a unit must own at least one");
  const auto index_of = [&](const Module* m) {  // the unit of the nearest enclosing module that is one, or -1
    for (; m != nullptr; m = m->parent())
      for (std::size_t u = 0; u < plans.size(); ++u)
        if (plans[u].module == m) return static_cast<int>(u);
    return -1;
  };
  for (Module* m : model.modules())
    for (Parameter* shared : m->shared_parameters()) {
      const auto owner = std::find_if(plans.begin(), plans.end(), [&](const UnitPlan& p) {
        return std::find(p.params.begin(), p.params.end(), shared) != p.params.end();
      });
      const int user = index_of(m);
      check(owner != plans.end() && user >= 0 && allowed(plans, user, static_cast<int>(owner - plans.begin())),
            "tied parameter '", shared->name, "' is used by module '", m->name(), "' from outside its owner's unit");
    }
  return plans;
}

// Lets a tied weight's user through when its unit comes after the owner's in the plan ("a unit inside the owner comes
// after it"), nested or not: a user in a unit beside the owner's is accepted, and its gradient lands in a freed buffer.
class TieCheckByIndex final : public IntegrationTask {
 public:
  std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const override {
    return plan_with_tie_rule(model, unit_kinds,
                              [](const std::vector<UnitPlan>&, int user, int owner) { return user >= owner; });
  }
};

// Walks one level up only (the user's unit or its parent): a user two units deep inside the owner's, which the
// contract allows, is refused.
class TieCheckOneLevel final : public IntegrationTask {
 public:
  std::vector<UnitPlan> plan_units(Module& model, std::span<const std::string> unit_kinds) const override {
    return plan_with_tie_rule(model, unit_kinds, [](const std::vector<UnitPlan>& plans, int user, int owner) {
      return user == owner || plans[static_cast<std::size_t>(user)].parent == owner;
    });
  }
};

}  // namespace

std::span<const Mutant> integration_mutants() {
  static const Mutant mutants[] = {
      {7, "subtree-parameters",
       "takes module->parameters(), the whole subtree, for each unit: nested units' parameters are held twice",
       instance<SubtreeParameters<false>>},
      {7, "subtree-parameters-root-too",
       "takes module->parameters() for the root's unit too: it holds the whole model, every unit's parameters again",
       instance<SubtreeParameters<true>>},
      {7, "kind-only",
       "matches the wrap policy against kind() only, so a module named by its dotted name is never wrapped",
       instance<KindOnly>},
      {7, "empty-root-kept", "keeps a root unit that owns no parameter", instance<EmptyRootKept>},
      {7, "flat-parents", "gives every unit the root as parent instead of its nearest wrapped ancestor",
       instance<FlatParents>},
      {7, "no-checks",
       "raises none of the contract's errors (an empty unit, a tied weight used outside its unit, no parameters)",
       instance<NoChecks>},
      {7, "shared-in-users-unit",
       "adds each module's shared_parameters() to its unit: a tied weight is put in a unit twice",
       instance<SharedInUsersUnit>},
      {7, "root-removed-parents-kept", "removes the empty root unit without renumbering the other units' parents",
       instance<RootRemovedParentsKept>},
      {7, "parents-not-renumbered",
       "removes the empty root unit and makes its children parentless, but leaves the other parents one too high",
       instance<ParentsNotRenumbered>},
      {7, "tied-user-in-owner-only",
       "refuses a tied weight used from a unit nested inside its owner's, which the contract allows",
       instance<TiedUserInOwnerOnly>},
      {7, "tie-check-by-index",
       "lets a tied weight's user through when its unit comes after the owner's in the plan: a unit beside the "
       "owner's is accepted",
       instance<TieCheckByIndex>},
      {7, "tie-check-one-level",
       "refuses a tied weight used from a unit two levels inside its owner's (the walk up stops at the parent)",
       instance<TieCheckOneLevel>},
      {7, "root-named-empty", "names the root unit by its module's empty name() instead of \"(root)\"",
       instance<RootNamedEmpty>},
      {7, "units-by-name", "lists the units sorted by name instead of outermost first in pre-order",
       instance<UnitsByName>},
      {7, "no-root", "makes the model a unit only when the policy names it: GPT-2's wte, wpe and ln_f are in no unit",
       instance<NoRoot>},
  };
  return mutants;
}

}  // namespace fsdplab
