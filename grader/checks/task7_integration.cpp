// Task 7's checks: IntegrationTask::plan_units (engine/fsdp/integration_task.hpp, labs/07-integration).
// The units of real models under the CLI's wrap policies, compared unit by unit with the reference's plan
// (names, modules, each unit's own parameters in order, the enclosing unit): one unit per Block; nested
// units holding only their own parameters; a module wrapped by its dotted name; no empty root; the
// errors the contract names; then whole trainings under the nested and block policies.
#include <algorithm>
#include <map>

#include "engine/fsdp/lab_todo.hpp"
#include "engine/nn/gpt2_model.hpp"
#include "engine/nn/model.hpp"
#include "engine/runtime/error.hpp"
#include "engine/train/model_factory.hpp"
#include "grader/check_catalog.hpp"
#include "grader/graded_run.hpp"

namespace fsdplab::grading {
namespace {

// The dashboard on the case a check plans: the same model (gpt2 at test-tiny) under the same policy.
std::string show(const std::string& model, const std::string& wrap) {
  return "fsdplab gui --model " + model + (model == "gpt2" ? " --preset test-tiny" : "") + " --world 2 --wrap " + wrap +
         " {impl} --compare impl" + break_flag(7, FsdpOptions{}, 2);
}

const IntegrationTask& graded(const CheckContext& c) { return *c.tasks.integration; }
const IntegrationTask& reference(const CheckContext& c) { return *c.reference.integration; }

std::string names(const std::vector<Parameter*>& params) {
  std::string s;
  for (const Parameter* p : params) s += (s.empty() ? "" : ", ") + p->name;
  return "[" + s + "]";
}

std::string unit_names(const std::vector<UnitPlan>& plans) {
  std::string s;
  for (const UnitPlan& p : plans) s += (s.empty() ? "" : ", ") + p.name;
  return "[" + s + "]";
}

// The first difference between two plans, "" when they agree.
std::string plan_difference(const std::vector<UnitPlan>& got, const std::vector<UnitPlan>& want) {
  if (got.size() != want.size())
    return std::to_string(got.size()) + " units " + unit_names(got) + ", expected " + std::to_string(want.size()) +
           " " + unit_names(want);
  for (std::size_t u = 0; u < want.size(); ++u) {
    const UnitPlan &g = got[u], &w = want[u];
    const std::string which = "unit " + std::to_string(u) + " ('" + w.name + "')";
    if (g.module != w.module)
      return "unit " + std::to_string(u) + " is '" + g.name + "', expected '" + w.name +
             "' (outermost first, pre-order)";
    if (g.name != w.name) return "unit " + std::to_string(u) + ", module '" + w.name + "', is named '" + g.name + "'";
    if (g.params != w.params) return which + " holds " + names(g.params) + ", expected " + names(w.params);
    if (g.parent != w.parent)
      return which + " has parent " + std::to_string(g.parent) + ", expected " + std::to_string(w.parent) +
             (w.parent >= 0 ? " ('" + want[static_cast<std::size_t>(w.parent)].name + "')" : " (none)");
  }
  return "";
}

// The mistake the difference between two plans points at: no root unit where one is due, a unit the policy names by
// its module's name() missing, a parameter held twice by one unit or by two, an empty root, parents off; "" when it
// points at none of them.
std::string plan_mistake(const std::vector<UnitPlan>& got, const std::vector<UnitPlan>& want,
                         std::span<const std::string> policy) {
  const auto in_policy = [&](const std::string& entry) {
    return std::find(policy.begin(), policy.end(), entry) != policy.end();
  };
  const auto has_unit = [](const std::vector<UnitPlan>& plans, const Module* m) {
    return std::any_of(plans.begin(), plans.end(), [m](const UnitPlan& p) { return p.module == m; });
  };
  for (const UnitPlan& w : want)
    if (w.module->parent() == nullptr && !has_unit(got, w.module))
      return "no root unit: the model itself is the first unit wherever parameters are left that no inner unit "
             "took (GPT-2's wte, wpe, ln_f), policy or not; without it they are in no unit";
  for (const UnitPlan& w : want)
    if (!has_unit(got, w.module) && in_policy(w.module->name()) && !in_policy(std::string(w.module->kind())))
      return "'" + w.name +
             "' is no unit though the policy names it: the policy matched against kind() only, and "
             "an entry may also be a module's name()";
  for (const UnitPlan& g : got)
    if (!has_unit(want, g.module) && g.module->parent() == nullptr && g.params.empty())
      return "an empty root unit kept (task 2 refuses it)";
  std::map<const Parameter*, int> units_holding;
  for (const UnitPlan& g : got) {
    std::map<const Parameter*, int> held;
    for (const Parameter* p : g.params)
      if (++held[p] == 2)
        return "unit '" + g.name + "' holds " + p->name +
               " twice: a module's shared_parameters() (a tied weight "
               "another unit already owns) added to the unit that uses it";
    for (const auto& [p, n] : held) ++units_holding[p];
  }
  for (const auto& [p, n] : units_holding)
    if (n > 1)
      return p->name + " is held by " + std::to_string(n) +
             " units: a unit took the parameters of modules an inner unit covers (module->parameters(), the whole "
             "subtree, or a walk of the modules under it that does not stop at an inner unit's), where a unit holds "
             "only the parameters of the modules it alone covers";
  if (got.size() != want.size()) return "";
  for (std::size_t u = 0; u < want.size(); ++u)
    if (got[u].module == want[u].module && got[u].name != want[u].name)
      return "unit " + std::to_string(u) + " is named '" + got[u].name + "', expected '" + want[u].name +
             "': a unit takes its module's dotted name(), and the root (whose name() is empty) \"(root)\"";
  const auto modules = [](const std::vector<UnitPlan>& plans) {
    std::vector<const Module*> out;
    for (const UnitPlan& p : plans) out.push_back(p.module);
    return out;
  };
  std::vector<const Module*> got_modules = modules(got), want_modules = modules(want);
  if (got_modules != want_modules) {
    std::sort(got_modules.begin(), got_modules.end(), std::less<const Module*>());
    std::sort(want_modules.begin(), want_modules.end(), std::less<const Module*>());
    if (got_modules == want_modules)
      return "the right units in another order: outermost first, in pre-order (each module before the modules "
             "inside it, children in the order they were registered), as the model's walk from its root visits them";
  }
  bool parents_one_too_high = true, parents_differ = false;
  for (std::size_t u = 0; u < want.size(); ++u) {
    parents_differ |= got[u].parent != want[u].parent;
    // A unit whose parent was the root becomes parentless either way (-1): only the others show the renumbering.
    parents_one_too_high &= got[u].parent == want[u].parent || got[u].parent == want[u].parent + 1;
  }
  if (parents_differ && parents_one_too_high) return "the parents not renumbered after removing the empty root";
  if (parents_differ) return "a parent that is not the nearest wrapped ancestor";
  return "";
}

// The model and unit kinds the CLI builds for `model` under `wrap`.
BuiltModel built(const std::string& model, const std::string& wrap) {
  RunConfig run;
  run.model = model;
  if (model == "gpt2") run.preset = "test-tiny";
  run.wrap = wrap;
  return build_model(run);
}

CheckOutcome compare_plans(const CheckContext& c, const std::string& model, const std::string& wrap,
                           std::string expected, std::string cause) {
  BuiltModel m = built(model, wrap);
  const std::vector<UnitPlan> want = reference(c).plan_units(*m.model, m.unit_kinds);
  std::vector<UnitPlan> got;
  try {
    got = graded(c).plan_units(*m.model, m.unit_kinds);
  } catch (const TaskNotImplemented&) {
    throw;
  } catch (const Error& e) {
    // The graded task's own check fired on a model the reference plans: named with the model and policy it refused.
    return CheckOutcome::fail(
        std::move(expected), model + " --wrap " + wrap + ": plan_units raised: " + e.what(),
        "an Error on a model the contract accepts (the reference plans it: " + std::to_string(want.size()) +
            " units): the units' parameters are taken otherwise than the reference's, so one "
            "looks empty or a tie looks crossed; compare the units in the map (see it)");
  }
  const std::string difference = plan_difference(got, want);
  if (difference.empty()) return CheckOutcome::pass();
  const std::string mistake = plan_mistake(got, want, m.unit_kinds);
  // The right units misnamed cost half: the names are what checkpoints and the dashboard call the units, the
  // units themselves train right.
  const bool only_names = got.size() == want.size() &&
                          std::equal(got.begin(), got.end(), want.begin(), [](const UnitPlan& g, const UnitPlan& w) {
                            return g.module == w.module && g.params == w.params && g.parent == w.parent;
                          });
  return CheckOutcome::fail(std::move(expected), model + " --wrap " + wrap + ": " + difference,
                            mistake.empty() ? std::move(cause) : mistake, only_names ? 0.5 : 0);
}

// A model with no parameter at all.
class EmptyModel final : public Model {
 public:
  std::string_view kind() const override { return "EmptyModel"; }
  Tensor forward(RunContext&, const Batch&) override { fail("EmptyModel is never run"); }
  void backward(RunContext&) override {}
};

// The tie models: a few modules of made-up kinds (the policy wraps them by kind), each owning a weight where
// `owns`, one of them the owner of `table`, one computing with it from elsewhere. Shapes only: never run.
class TieModule final : public Module {
 public:
  TieModule(std::string name, std::string kind, bool owns, Parameter* table)
      : Module(std::move(name)), kind_(std::move(kind)) {
    if (owns) register_parameter("weight", {4, 4}, ParamInit::constant(1));
    if (table) use_parameter(*table);
  }
  std::string_view kind() const override { return kind_; }
  Parameter& own_table() { return register_parameter("table", {8, 4}, ParamInit::constant(1)); }
  TieModule& add(std::string_view name, std::string kind, bool owns, Parameter* table = nullptr) {
    return register_module<TieModule>(name, std::move(kind), owns, table);
  }

 private:
  std::string kind_;
};

class TieModel final : public Model {
 public:
  std::string_view kind() const override { return "TieModel"; }
  Tensor forward(RunContext&, const Batch&) override { fail("TieModel is never run"); }
  void backward(RunContext&) override {}
  Parameter& own_table() { return register_parameter("table", {8, 4}, ParamInit::constant(1)); }
  TieModule& add(std::string_view name, std::string kind, bool owns, Parameter* table = nullptr) {
    return register_module<TieModule>(name, std::move(kind), owns, table);
  }
};

// A tie the contract allows: the root owns `table`, and `block.head` computes with it from the wrapped `block`, a
// unit inside the root's.
struct TiedInsideOwner {
  TieModel model;
  TiedInsideOwner() {
    Parameter& table = model.own_table();
    model.add("block", "TiedBlock", true).add("head", "TiedHead", false, &table);
  }
};
// The same two units deep: `block.inner.head` uses the root's `table` from `inner`, a unit inside `block`'s, itself
// inside the root's.
struct TiedTwoUnitsDeep {
  TieModel model;
  TiedTwoUnitsDeep() {
    Parameter& table = model.own_table();
    model.add("block", "TiedBlock", true).add("inner", "TiedInner", true).add("head", "TiedHead", false, &table);
  }
};
// A tie the contract refuses: `a` owns `table`, and `b.head` uses it from `b`, a unit beside `a`'s (after it in
// the plan's order), not inside it: its gradient would land in `a`'s buffer after `a` freed it.
struct TiedFromASibling {
  TieModel model;
  TiedFromASibling() {
    Parameter& table = model.add("a", "TableOwner", true).own_table();
    model.add("b", "TableUser", true).add("head", "TiedHead", false, &table);
  }
};

Check make(std::string id, std::string title, int points, std::string show,
           std::function<CheckOutcome(const CheckContext&)> run) {
  return {7, std::move(id), std::move(title), points, std::move(show), std::move(run)};
}

CheckOutcome one_unit_per_block(const CheckContext& c) {
  return compare_plans(c, "gpt2", "block", "the reference's units, each parameter in exactly one unit",
                       "a tied parameter counted in its user's unit too, or the root taking what the Blocks own");
}

CheckOutcome nested_units_own_only_their_parameters(const CheckContext& c) {
  return compare_plans(c, "gpt2", "nested",
                       "each unit with the parameters no inner unit took, and its enclosing unit as parent",
                       "module->parameters() (the whole subtree) taken for a unit instead of the parameters of the "
                       "modules it alone covers, or a parent that is not the nearest wrapped ancestor");
}

CheckOutcome a_module_wrapped_by_its_name(const CheckContext& c) {
  return compare_plans(c, "gpt2", "linear", "transformer.wpe a unit of its own (named in the policy)",
                       "the policy matched against kind() only: an entry may also be a module's name()");
}

CheckOutcome no_empty_root(const CheckContext& c) {
  const CheckOutcome flat = compare_plans(c, "toy", "block", "fc1, ln, fc2 as units, parent -1 each; no '(root)'",
                                          "an empty root unit kept (task 2 refuses it), or parents not renumbered "
                                          "after removing it");
  if (!flat.passed()) return flat;
  // Units inside units under an empty root: each parent's index moves down by one with the root gone.
  CheckOutcome nested =
      compare_plans(c, "mlp", "nested", "each MlpBlock a unit with no parent, its Linears units inside it; no '(root)'",
                    "parents not renumbered after removing the empty root");
  if (!nested.passed()) nested.show = show("mlp", "nested");
  return nested;
}

// The checks that compare plans with the reference's, whose first failing cause (first_failing_cause) is a
// training's: the units it trained are those plans.
const std::vector<DirectCheck> kPlanChecks = {one_unit_per_block, nested_units_own_only_their_parameters,
                                              a_module_wrapped_by_its_name, no_empty_root};

CheckOutcome errors_the_contract_names(const CheckContext& c) {
  Gpt2Model model(gpt2_preset("test-tiny"));
  EmptyModel empty;
  TiedFromASibling sibling;
  const std::string sibling_case =
      "a tied weight used from a unit beside its owner's ('a' owns 'table', 'b.head' uses it)";
  const std::vector<std::pair<std::string, std::function<void()>>> cases = {
      {"gpt2 with {ModuleList, Block} (transformer.h is left with nothing)",
       [&] {
         graded(c).plan_units(model, std::vector<std::string>{"ModuleList", "Block"});
       }},
      {"gpt2 with {LMHead} (the head only uses the tied wte)",
       [&] { graded(c).plan_units(model, std::vector<std::string>{"LMHead"}); }},
      {"gpt2 with {Embedding} (lm_head in the root uses wte from outside wte's unit)",
       [&] { graded(c).plan_units(model, std::vector<std::string>{"Embedding"}); }},
      {"a model with no parameters", [&] { graded(c).plan_units(empty, {}); }},
      {sibling_case,
       [&] {
         graded(c).plan_units(sibling.model, std::vector<std::string>{"TableOwner", "TableUser"});
       }},
  };
  int missed = 0;
  std::string first;
  for (const auto& [what, call] : cases)
    if (error_raised(call).empty()) {
      if (missed++ == 0) first = what;
    }
  // And none where the contract allows a tied weight: its user in a unit nested inside the owner's, at any depth.
  TiedInsideOwner inside;
  TiedTwoUnitsDeep deep;
  std::string refused =
      error_raised([&] { graded(c).plan_units(inside.model, std::vector<std::string>{"TiedBlock"}); });
  std::string refused_case = "a model whose root owns 'table' and whose wrapped 'block' uses it (through 'block.head')";
  if (refused.empty()) {
    refused = error_raised([&] {
      graded(c).plan_units(deep.model, std::vector<std::string>{"TiedBlock", "TiedInner"});
    });
    refused_case =
        "a model whose root owns 'table' and whose wrapped 'block.inner', inside the wrapped 'block', uses "
        "it (through 'block.inner.head')";
  }
  if (!refused.empty()) {
    // A plan already off (no root unit: the root's 'table' then has no unit to own it) refuses for that reason.
    const std::string plan_mistake = first_failing_cause(c, kPlanChecks);
    return CheckOutcome::fail(
        "an Error for each, and none for a tied weight whose user runs in a unit nested inside the owner's",
        refused_case + " was refused: " + refused,
        plan_mistake.empty()
            ? "the walk from the user's unit up to the owner stopped short (at the user's own unit, or its parent): a "
              "tied weight may be used from the owner's unit or any unit inside it, at any depth (follow "
              "UnitPlan::parent up until the owner, or -1)"
            : "the plans are off before the tie is looked at: " + plan_mistake,
        1.0 - static_cast<double>(missed + 1) / static_cast<double>(cases.size() + 1));
  }
  if (missed == 0) return CheckOutcome::pass();
  // A plan that is off already (a unit given its whole subtree, say) may leave no unit empty for a check to find.
  const std::string plan_mistake = first_failing_cause(c, kPlanChecks);
  return CheckOutcome::fail(
      "an Error for each",
      std::to_string(missed) + " of " + std::to_string(cases.size()) + " planned without a word, first: " + first,
      !plan_mistake.empty() ? "the plans are off before any check of the contract's can fire (its cases may then not "
                              "be empty or tied at all): " +
                                  plan_mistake
      : first == sibling_case
          ? "a tie let through from a unit that is not inside the owner's (one after it in the plan is not "
            "necessarily inside it): walk UnitPlan::parent up from the user's unit, and refuse unless the walk meets "
            "the owner; its gradient would land in the owner's buffer after the owner freed it"
          : "the contract's checks left out: an empty unit fails later in task 2, and a tied weight's gradient would "
            "land in a freed buffer",
      1.0 - static_cast<double>(missed) / static_cast<double>(cases.size()));
}

GradeCase nested_case(int world) {
  GradeCase c = small_gpt2(world);
  c.run.wrap = "nested";
  c.name += " nested";
  return c;
}

}  // namespace

std::vector<Check> integration_checks() {
  return {
      make("block-units", "gpt2 --wrap block: a root unit (wte once, wpe, ln_f), then one unit per Block", 2,
           show("gpt2", "block"), one_unit_per_block),
      make("nested-units", "gpt2 --wrap nested: Linears as units inside their Block, each unit only its own parameters",
           2, show("gpt2", "nested"), nested_units_own_only_their_parameters),
      make("wrap-by-name", "gpt2 --wrap linear: transformer.wpe wrapped by its dotted name", 1, show("gpt2", "linear"),
           a_module_wrapped_by_its_name),
      make("no-empty-root", "toy, mlp --wrap nested: no root unit, parents renumbered without it", 1,
           show("toy", "block"), no_empty_root),
      // No run plans a model the contract refuses: the diagnostic is all there is to see.
      make("errors", "errors: a wrapped module with no parameters, a tied weight used outside its unit, no parameters",
           2, "", errors_the_contract_names),
      equivalence_check(7, "training-nested-W2", "gpt2 --wrap nested on 2 ranks equals the single-rank baseline", 2,
                        nested_case(2), "units whose parameters overlap or miss some, or a wrong parent",
                        first_failing_cause(kPlanChecks)),
      equivalence_check(7, "training-block-W4", "gpt2 --wrap block on 4 ranks equals the single-rank baseline", 1,
                        small_gpt2(4), "the units of the default policy differ from the reference's",
                        first_failing_cause(kPlanChecks)),
  };
}

}  // namespace fsdplab::grading
