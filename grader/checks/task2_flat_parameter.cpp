// Task 2's checks: FlatParameterTask (engine/fsdp/flat_parameter.hpp, labs/02-flat-parameter).
// Direct calls compared with the reference's answers on the same parameters — the layout (alignment,
// padding to a multiple of W), each rank's slices (odd W, a parameter cut between ranks, a rank owning
// none of a small one), views not copies, the errors the contract names — then a whole training.
#include <random>
#include <sstream>

#include "engine/fsdp/sharding.hpp"
#include "engine/train/model_factory.hpp"
#include "grader/check_catalog.hpp"
#include "grader/graded_run.hpp"
#include "grader/rank_harness.hpp"

namespace fsdplab::grading {
namespace {

// Beside the reference: the FlatParameter map shows the layout (task 2 reports no events to break at), and names
// each unit laid out unlike the reference's; a failed check goes to a world where one is (see_it_where_it_differs).
constexpr const char* kShow = "fsdplab gui --model gpt2 --world 3 {impl} --compare impl";

// Parameters of the given sizes, named p0, p1, ....
struct Params {
  explicit Params(const std::vector<std::int64_t>& sizes) {
    for (std::size_t i = 0; i < sizes.size(); ++i)
      owned.push_back({"p" + std::to_string(i), {sizes[i]}, ParamInit::constant(0), {}, {}});
    for (Parameter& p : owned) pointers.push_back(&p);
  }
  std::vector<Parameter> owned;
  std::vector<Parameter*> pointers;
};

const FlatParameterTask& graded(const CheckContext& c) { return *c.tasks.flat_parameter; }
const FlatParameterTask& reference(const CheckContext& c) { return *c.reference.flat_parameter; }

std::string sizes_text(const Params& p) {
  std::string s;
  for (const Parameter& q : p.owned) s += (s.empty() ? "" : ", ") + std::to_string(q.numel());
  return "[" + s + "]";
}

// ---- comparing a plan and its slices with the reference's ------------------------------------------

// What a comparison with the reference found first. A check's cause follows from it: a layout whose padded_numel
// alone differs is the padding check's subject, one whose offsets differ the alignment check's, and a check that
// meets either names that check and the mistake instead of its own cause; a slice difference says which field of
// which slice is off, and in which space it was counted.
struct Finding {
  enum class Kind { none, padding, offsets, layout, slices };
  Kind kind = Kind::none;
  std::string text;   // the difference, for `got`
  std::string cause;  // the mistake it shows, "" where only the check knows what to suspect
  int rank = -1;      // a slice difference's rank
  const Parameter* param = nullptr;  // and the parameter of its expected slice (else of the slice it got)
  bool found() const { return kind != Kind::none; }
};

// What a padded_numel of `got` says, when used_numel `used` at W = `world` should give `want`.
std::string padding_mistake(std::int64_t used, std::int64_t got, std::int64_t want, int world) {
  const std::string formula = "round used_numel up to the next multiple of W, (used + W - 1) / W * W";
  if (used == 0 && got == 0)
    return "padded_numel 0 for a unit whose parameters are all empty: never 0, so that every rank has a shard to "
           "gather; round max(used_numel, 1) up to a multiple of W";
  if (got == used) return "no padding: padded_numel = used_numel, which W does not divide; " + formula;
  if (used % world == 0 && got == want + world)
    return "padding off by one: used_numel " + std::to_string(used) +
           " is already a multiple of W = " + std::to_string(world) +
           " and got a whole extra chunk, (used / W + 1) * W; pad only when it is not: " + formula;
  if (got < used) return "padded_numel below used_numel: the buffer cannot hold the parameters; " + formula;
  if (got % world != 0) return "padded_numel not a multiple of W: the shards are not equal; " + formula;
  return "padded past the next multiple of W: every gather moves the extra chunks; " + formula;
}

// The first difference between two layouts; nothing found when equal.
Finding layout_difference(const FlatParamLayout& got, const FlatParamLayout& want) {
  std::ostringstream s;
  if (got.entries.size() != want.entries.size()) {
    s << got.entries.size() << " entries for " << want.entries.size() << " parameters";
    return {Finding::Kind::layout, s.str(), ""};
  }
  for (std::size_t i = 0; i < want.entries.size(); ++i) {
    const FlatParamEntry &g = got.entries[i], &w = want.entries[i];
    if (g.param != w.param) {
      s << "entry " << i << " is '" << (g.param ? g.param->name : "null") << "', expected '" << w.param->name
        << "' (keep the order given)";
      return {Finding::Kind::layout, s.str(), ""};
    }
    if (g.offset != w.offset) {
      s << "'" << w.param->name << "' starts at element " << g.offset << ", expected " << w.offset;
      return {Finding::Kind::offsets, s.str(),
              g.offset % want.align != 0
                  ? "alignment left out: an offset that is not a multiple of align; each parameter starts at the "
                    "end of the previous one rounded UP to a multiple of align"
                  : "an offset past the next multiple of align after the previous parameter's end: round the end "
                    "up once, (end + align - 1) / align * align"};
    }
    if (g.numel != w.numel) {
      s << "'" << w.param->name << "' has numel " << g.numel << ", expected " << w.numel;
      return {Finding::Kind::layout, s.str(), ""};
    }
  }
  if (got.used_numel != want.used_numel) {
    s << "used_numel " << got.used_numel << ", expected " << want.used_numel;
    return {Finding::Kind::layout, s.str(), ""};
  }
  if (got.padded_numel != want.padded_numel) {
    s << "padded_numel " << got.padded_numel << ", expected " << want.padded_numel;
    if (want.used_numel == 0) {
      s << " (used 0: one element a rank, never 0)";
    } else {
      s << " (used " << want.used_numel << " rounded up to a multiple of W = " << want.world << ")";
    }
    return {Finding::Kind::padding, s.str(),
            padding_mistake(want.used_numel, got.padded_numel, want.padded_numel, want.world)};
  }
  if (got.world != want.world || got.align != want.align) {
    s << "world " << got.world << " and align " << got.align << " recorded, expected " << want.world << " and "
      << want.align;
    return {Finding::Kind::layout, s.str(), ""};
  }
  return {};
}

std::string slice_text(const ShardSlice& s) {
  std::ostringstream o;
  o << "{" << (s.param ? s.param->name : "null") << " [" << s.param_begin << ", " << s.param_begin + s.count
    << ") at shard offset " << s.shard_offset << "}";
  return o.str();
}

std::string slices_text(const std::vector<ShardSlice>& slices) {
  std::string text;
  for (const ShardSlice& s : slices) text += slice_text(s);
  return text;
}

// A slice `g` that should be `w` (rank `rank`'s of `layout`, both there, of one parameter and count) whose
// param_begin or shard_offset is the right element counted in another space; "" when it is not that.
std::string space_mistake(const ShardSlice& g, const ShardSlice& w, const FlatParamLayout& layout, int rank) {
  if (g.param != w.param || g.count != w.count) return "";
  const std::int64_t lo = rank * layout.shard_numel() + w.shard_offset;  // the overlap's first flat element
  if (g.shard_offset == w.shard_offset && g.param_begin != w.param_begin) {
    if (g.param_begin == w.shard_offset)
      return "param_begin in shard space (lo - begin, the slice's offset in the shard) instead of in the "
             "parameter's own (lo - e.offset)";
    if (g.param_begin == lo) return "param_begin in flat space (lo) instead of in the parameter's own (lo - e.offset)";
  }
  if (g.param_begin == w.param_begin && g.shard_offset != w.shard_offset) {
    if (g.shard_offset == w.param_begin)
      return "shard_offset in parameter space (lo - e.offset) instead of in the shard's (lo - begin)";
    if (g.shard_offset == lo) return "shard_offset in flat space (lo) instead of in the shard's (lo - begin)";
  }
  return "";
}

// What a slice `g` that should be `w` (either may be missing) shows of the slices' choice or size; "" where
// nothing stands out.
std::string slice_mistake(const ShardSlice* g, const ShardSlice* w) {
  if (!g)
    return w->count < w->param->numel()
               ? "a parameter cut by a chunk boundary left out: every entry that overlaps the chunk gets a slice of "
                 "the part inside it, even when the rest is on another rank"
               : "a slice left out: every entry that overlaps [rank * shard_numel, (rank + 1) * shard_numel) gets one";
  if (!w || g->param != w->param)
    return g->count == 0 ? "empty slices (count 0) kept: an entry that does not overlap the chunk gets no slice"
                         : "a slice of a parameter this slot does not hold: one slice per entry overlapping the chunk, "
                           "in flat order";
  if (g->count != w->count)
    return "a slice's count: the overlap of the parameter with the chunk, min(e.offset + numel, end) - "
           "max(e.offset, begin); a parameter cut by a chunk boundary gives each side its part";
  return "";
}

// Rank `rank`'s slices beside the reference's (`want[q]` is rank q's); nothing found when equal. The cause: a
// field counted in another space, else the slices of another rank's chunk, else what the slice shows.
Finding slices_difference(const std::vector<ShardSlice>& got, const std::vector<std::vector<ShardSlice>>& want,
                          const FlatParamLayout& layout, int rank) {
  const std::vector<ShardSlice>& mine = want[static_cast<std::size_t>(rank)];
  const std::size_t n = std::max(got.size(), mine.size());
  for (std::size_t i = 0; i < n; ++i) {
    const ShardSlice* g = i < got.size() ? &got[i] : nullptr;
    const ShardSlice* w = i < mine.size() ? &mine[i] : nullptr;
    const std::string gt = g ? slice_text(*g) : "nothing", wt = w ? slice_text(*w) : "nothing";
    if (gt == wt) continue;
    Finding f{Finding::Kind::slices,
              "rank " + std::to_string(rank) + ", slice " + std::to_string(i) + ": " + gt + ", expected " + wt, "",
              rank, w ? w->param : g->param};
    if (g && w) f.cause = space_mistake(*g, *w, layout, rank);
    for (int q = 0; q < layout.world && f.cause.empty(); ++q)
      if (q != rank && !got.empty() && slices_text(got) == slices_text(want[static_cast<std::size_t>(q)]))
        f.cause = "rank " + std::to_string(rank) + " given the slices of rank " + std::to_string(q) +
                  "'s chunk: rank r's chunk is [r * shard_numel, (r + 1) * shard_numel)";
    if (f.cause.empty()) f.cause = slice_mistake(g, w);
    return f;
  }
  return {};
}

// What compare_plan compares with the reference's: the graded plan's layout, the graded shard_slices of the
// reference's layout (so a slice check grades the slicing alone: a layout mistake is the padding and alignment
// checks' subject), or both.
enum class Compared { layout, slices, layout_and_slices };

// Plans `sizes` for `world` and compares what `compared` names with the reference's; nothing found when equal. With
// both, a layout that differs only in padded_numel is reported once the slices were compared too: a slice difference
// is reported first.
Finding compare_plan(const CheckContext& c, const std::vector<std::int64_t>& sizes, int world, std::int64_t align,
                     Compared compared) {
  Params mine(sizes);
  const FlatParamLayout want = reference(c).plan(mine.pointers, world, align);
  const std::string where = "parameters of " + sizes_text(mine) + " elements at W = " + std::to_string(world) +
                            ", align " + std::to_string(align) + ": ";
  Finding layout;
  if (compared != Compared::slices) {
    layout = layout_difference(graded(c).plan(mine.pointers, world, align), want);
    layout.text = where + layout.text;
  }
  if (compared == Compared::layout || (layout.found() && layout.kind != Finding::Kind::padding))
    return layout.found() ? layout : Finding{};
  std::vector<std::vector<ShardSlice>> wanted;
  for (int r = 0; r < world; ++r) wanted.push_back(reference(c).shard_slices(want, r));
  for (int r = 0; r < world; ++r)
    if (Finding f = slices_difference(graded(c).shard_slices(want, r), wanted, want, r); f.found()) {
      f.text = where + f.text;
      return f;
    }
  return layout.found() ? layout : Finding{};
}

// The cause a check gives for `f`: another check's subject is named with the mistake it shows; otherwise what
// the difference shows, or, where it shows nothing definite, the check's own suspicion `own`.
std::string cause_of(const Finding& f, const std::string& own) {
  switch (f.kind) {
    case Finding::Kind::padding:
      return "the layout's padded_numel differs (see the padding check): " + f.cause;
    case Finding::Kind::offsets:
      return "the layout's offsets differ (see the alignment check): " + f.cause;
    default:
      return f.cause.empty() ? own : f.cause;
  }
}

CheckOutcome from_finding(const Finding& f, std::string expected, const std::string& own_cause) {
  if (!f.found()) return CheckOutcome::pass();
  return CheckOutcome::fail(std::move(expected), f.text, cause_of(f, own_cause));
}

// ---- the command that shows a difference -----------------------------------------------------------

// A check's small parameters are not the dashboard's model: a padding off by one at W = 4 may change no unit of gpt2
// test-small at kShow's W = 3, and the map would show nothing wrong. So a failed check's command goes to the first
// world, 2 to 8, at which the graded task 2 lays out a unit of gpt2 test-small, else of the toy model (whose sizes
// are not all multiples of the default align, as gpt2's are), unlike the reference, or cannot (as the map plans it:
// the reference's units, the default align); kShow where none does.
std::string see_it_where_it_differs(const CheckContext& c) {
  const std::int64_t align = FsdpOptions{}.align;
  for (const auto& [model, preset] : {std::pair{"gpt2", "test-small"}, std::pair{"toy", ""}}) {
    for (int world = 2; world <= 8; ++world) {
      RunConfig run;
      run.model = model;
      run.preset = preset;
      run.world = world;
      run.batch = world;
      const BuiltModel built = build_model(run);
      const auto differs = [&] {
        for (const UnitPlan& plan : c.reference.integration->plan_units(*built.model, built.unit_kinds)) {
          const FlatParamLayout want = reference(c).plan(plan.params, world, align);
          const FlatParamLayout got = graded(c).plan(plan.params, world, align);
          if (layout_difference(got, want).found()) return true;
          for (int rank = 0; rank < world; ++rank)
            if (slices_text(graded(c).shard_slices(got, rank)) != slices_text(reference(c).shard_slices(want, rank)))
              return true;
        }
        return false;
      };
      bool found = false;
      try {
        found = differs();
      } catch (const std::exception&) {  // the graded task throws here: the map says what
        found = true;
      }
      if (found)
        return "fsdplab gui --model " + std::string(model) + (*preset ? " --preset " + std::string(preset) : "") +
               " --world " + std::to_string(world) + " {impl} --compare impl";
    }
  }
  return kShow;
}

// A check of the layout or the slices: its command goes to the map where it differs (see_it_where_it_differs).
Check make(std::string id, std::string title, int points, std::function<CheckOutcome(const CheckContext&)> run) {
  return {2, std::move(id), std::move(title), points, kShow, [run = std::move(run)](const CheckContext& c) {
            CheckOutcome outcome = run(c);
            if (!outcome.passed() && outcome.show.empty()) outcome.show = see_it_where_it_differs(c);
            return outcome;
          }};
}

// A check the map cannot show (every layout in it may be right): its own command, "" for none.
Check make_shown(std::string id, std::string title, int points, std::string show,
                 std::function<CheckOutcome(const CheckContext&)> run) {
  return {2, std::move(id), std::move(title), points, std::move(show), std::move(run)};
}

// ---- direct calls of plan, shard_slices and point_views --------------------------------------------

CheckOutcome padding_to_a_multiple_of_w(const CheckContext& c) {
  Finding f;
  for (const auto& [sizes, world] : std::vector<std::pair<std::vector<std::int64_t>, int>>{{{100, 10, 10, 50}, 4},
                                                                                           {{100, 10, 10, 52}, 4},
                                                                                           {{7, 5}, 3},
                                                                                           {{8}, 8},
                                                                                           {{9}, 2},
                                                                                           {{5, 3, 4}, 1},
                                                                                           {{0, 0}, 3}})
    if (!f.found()) f = compare_plan(c, sizes, world, 1, Compared::layout);
  if (!f.found()) return CheckOutcome::pass();
  // This check's subject: the padding's mistake as it is, without the pointer to this very check.
  return CheckOutcome::fail(
      "used_numel as the parameters need it, padded_numel = used_numel rounded up to a multiple of W", f.text,
      f.kind == Finding::Kind::padding
          ? f.cause
          : cause_of(f,
                     "the layout differs before any padding: one entry per parameter in the order given, each "
                     "at the end of the previous one (align 1 here), used_numel the end of the last"));
}

CheckOutcome offsets_aligned_in_order(const CheckContext& c) {
  Finding f;
  for (const auto& [sizes, world] :
       std::vector<std::pair<std::vector<std::int64_t>, int>>{{{3, 5, 1}, 3}, {{4, 4, 9}, 2}, {{1, 1, 1, 1}, 4}})
    if (!f.found()) f = compare_plan(c, sizes, world, 4, Compared::layout);
  const std::string expected = "each offset rounded up to a multiple of align (the gaps count in used_numel)";
  if (f.kind == Finding::Kind::offsets) return CheckOutcome::fail(expected, f.text, f.cause);  // this check's subject
  return from_finding(f, expected, "alignment left out, or applied to the sizes instead of the offsets");
}

CheckOutcome each_rank_holds_its_slices(const CheckContext& c) {
  Finding f = compare_plan(c, {100, 10, 10, 50}, 4, 1, Compared::slices);
  if (!f.found()) f = compare_plan(c, {64, 16, 64, 16}, 2, 4, Compared::slices);
  // A unit of billions of elements (a whole-model unit of Llama 7B, --wrap model): offsets and slices past 2^31 and
  // 2^32, which an int would wrap. Parameters here are shapes only: nothing is allocated.
  if (!f.found())
    f = compare_plan(c, {(std::int64_t{1} << 31) + 5, 7, (std::int64_t{1} << 32) + 3}, 3, 4,
                     Compared::layout_and_slices);
  return from_finding(f, "rank r's shard is flat elements [r * shard_numel, (r + 1) * shard_numel)",
                      "the slices of the wrong rank's chunk, or a slice's offsets counted in the wrong space: "
                      "param_begin in the parameter's (lo - e.offset), shard_offset in the shard's (lo - begin)");
}

CheckOutcome odd_world_sizes_and_random_sizes(const CheckContext& c) {
  std::mt19937 rng(11);
  Finding f;
  for (int trial = 0; trial < 40 && !f.found(); ++trial) {
    std::vector<std::int64_t> sizes(1 + rng() % 6);
    for (auto& n : sizes) n = 1 + static_cast<std::int64_t>(rng() % 40);
    const int world = 3 + 2 * static_cast<int>(rng() % 3);
    f = compare_plan(c, sizes, world, 1 + static_cast<std::int64_t>(rng() % 4), Compared::layout_and_slices);
  }
  return from_finding(f, "the reference's layout and slices for every case",
                      "a computation that only works when W divides the sizes (integer division rounding down)");
}

// 20 + 40 over W = 4 (shard 15): p0 is cut between ranks 0 and 1; p1 starts at rank 1's offset 5 and is cut twice,
// its middle slice all of rank 2's shard.
CheckOutcome a_cut_parameter_split_in_two(const CheckContext& c) {
  return from_finding(compare_plan(c, {20, 40}, 4, 1, Compared::slices),
                      "p0 [0, 15) on rank 0 and [15, 20) on rank 1; p1 [0, 10) on rank 1 at shard offset 5, [10, 25) "
                      "on rank 2, [25, 40) on rank 3",
                      "a parameter assigned whole to the rank where it starts");
}

CheckOutcome no_slice_for_a_rank_owning_none(const CheckContext& c) {
  return from_finding(compare_plan(c, {40, 2, 2, 40}, 4, 1, Compared::slices),
                      "the two small parameters on rank 1 alone; ranks 0, 2 and 3 without a slice of them",
                      "empty slices (count 0) kept, or a slice given to every rank");
}

CheckOutcome parameters_are_views_not_copies(const CheckContext& c) {
  auto device = make_graded_device(0);
  Params mine({6, 3, 5});
  const FlatParamLayout layout = reference(c).plan(mine.pointers, 2, 4);
  for (Tensor Parameter::*field : {&Parameter::value, &Parameter::grad}) {
    const std::string which = field == &Parameter::value ? "value" : "grad";
    const Tensor flat = Tensor::empty(*device, {layout.padded_numel}, DType::f32, MemTag::param_full, "flat");
    std::vector<float> numbers(static_cast<std::size_t>(layout.padded_numel));
    for (std::size_t i = 0; i < numbers.size(); ++i) numbers[i] = static_cast<float>(i);
    flat.copy_from(numbers);
    graded(c).point_views(layout, flat, field);
    for (const FlatParamEntry& e : layout.entries) {
      const Tensor& t = e.param->*field;
      if (!t.defined())
        return CheckOutcome::fail("every parameter's " + which + " pointed at its view",
                                  "'" + e.param->name + "'." + which + " is undefined",
                                  "point_views does not set the field it is given");
      if (t.shape() != e.param->shape || t.dtype() != flat.dtype())
        return CheckOutcome::fail("the parameter's shape and the flat buffer's dtype",
                                  "'" + e.param->name + "'." + which + " is " + t.describe(),
                                  "the view made with the flat shape or another dtype");
      if (t.storage_ptr() != flat.storage_ptr() || t.offset() != e.offset)
        return CheckOutcome::fail(
            "a view of the flat buffer's storage at the parameter's offset",
            "'" + e.param->name + "'." + which +
                (t.storage_ptr() != flat.storage_ptr()
                     ? " has storage of its own (a copy)"
                     : " views offset " + std::to_string(t.offset()) + " instead of " + std::to_string(e.offset)),
            "views that copy: a gather into the flat buffer would never reach the parameters");
      // A write through the flat buffer shows in the parameter.
      std::vector<float> changed = numbers;
      changed[static_cast<std::size_t>(e.offset)] = -1;
      flat.copy_from(changed);
      if (t.to_vector().front() != -1.f)
        return CheckOutcome::fail("a write to the flat buffer to change the parameter",
                                  "'" + e.param->name + "' did not change", "views that copy");
      flat.copy_from(numbers);
    }
  }
  return CheckOutcome::pass();
}

CheckOutcome errors_for_bad_input(const CheckContext& c) {
  Params mine({4, 4});
  std::vector<Parameter*> twice = {mine.pointers[0], mine.pointers[0]};
  // A tied weight comes back further on (GPT-2's wte ... lm_head), not next to itself.
  std::vector<Parameter*> twice_apart = {mine.pointers[0], mine.pointers[1], mine.pointers[0]};
  const FlatParamLayout layout = reference(c).plan(mine.pointers, 2, 1);
  const std::vector<std::pair<std::string, std::function<void()>>> cases = {
      {"plan of an empty unit", [&] { graded(c).plan({}, 2, 1); }},
      {"plan with W = 0", [&] { graded(c).plan(mine.pointers, 0, 1); }},
      {"plan with align = 0", [&] { graded(c).plan(mine.pointers, 2, 0); }},
      {"plan with p0 given twice", [&] { graded(c).plan(twice, 2, 1); }},
      {"plan with p0, p1, p0 (p0 given twice, apart)", [&] { graded(c).plan(twice_apart, 2, 1); }},
      {"shard_slices of rank 2 at W = 2", [&] { graded(c).shard_slices(layout, 2); }},
      {"shard_slices of rank -1", [&] { graded(c).shard_slices(layout, -1); }},
  };
  int missed = 0;
  std::string first;
  for (const auto& [what, call] : cases)
    if (error_raised(call).empty()) {
      ++missed;
      if (first.empty()) first = what;
    }
  if (missed == 0) return CheckOutcome::pass();
  return CheckOutcome::fail(
      "an Error (fsdplab::fail / check) for each bad input",
      std::to_string(missed) + " of " + std::to_string(cases.size()) + " returned normally, first: " + first,
      "the contract's errors not raised: bad input must be refused with a message, not produce a layout",
      1.0 - static_cast<double>(missed) / static_cast<double>(cases.size()));
}

// ---- why a training differs from the baseline ------------------------------------------------------

// Why a training of `run` differs from the baseline: what the run shows, and the graded plan, shard_slices and
// point_views asked about the very units it trained, beside the reference's. A W that divides few sizes (3) cuts
// parameters at chunk boundaries and leaves the last chunk short: a slice difference names where it lies. "" when
// every answer is the reference's.
std::string training_cause(const CheckContext& c, const GradeCase& run, const GradedRun& trained,
                           const GradedRun& baseline, double tolerance) {
  const std::string shows = divergence_text(trained, baseline, tolerance) + "; ";
  // Before the units: the views point_views gives their parameters must go before the device that holds them.
  auto device = make_graded_device(0);
  const CaseUnits units = case_units(run);
  for (std::size_t u = 0; u < units.plans.size(); ++u) {
    const FlatParamLayout& want = units.layouts[u];
    const std::string unit = "this run's unit '" + units.plans[u].name + "' at W = " + std::to_string(want.world);
    const Finding layout = layout_difference(graded(c).plan(units.plans[u].params, want.world, want.align), want);
    if (layout.found() && layout.kind != Finding::Kind::padding)
      return shows + unit + ": " + layout.text + ": " + cause_of(layout, "the layout differs from the reference's");
    std::vector<std::vector<ShardSlice>> wanted;
    for (int r = 0; r < want.world; ++r) wanted.push_back(reference(c).shard_slices(want, r));
    for (int r = 0; r < want.world; ++r) {
      const Finding f = slices_difference(graded(c).shard_slices(want, r), wanted, want, r);
      if (!f.found()) continue;
      std::string where = chunk_text(want, r);
      if (f.param && !cut_text(want, *f.param).empty()) where += ", " + f.param->name + " " + cut_text(want, *f.param);
      return shows + unit + ", " + where + ": " + f.text + ": " +
             cause_of(f, "the slices do not match the rank's chunk [r * shard_numel, (r + 1) * shard_numel)");
    }
    if (layout.found())
      return shows + unit + ": " + layout.text + ": " + cause_of(layout, "the layout differs from the reference's");
  }
  // Every slice right: what the ranks gather reaches the forward only through the views.
  for (std::size_t u = 0; u < units.plans.size(); ++u) {
    const FlatParamLayout& layout = units.layouts[u];
    const Tensor flat = Tensor::empty(*device, {layout.padded_numel}, DType::f32, MemTag::param_full, "flat");
    graded(c).point_views(layout, flat, &Parameter::value);
    for (const FlatParamEntry& e : layout.entries) {
      const Tensor& t = e.param->value;
      if (t.defined() && t.storage_ptr() == flat.storage_ptr() && t.offset() == e.offset) continue;
      return shows + "point_views on this run's unit '" + units.plans[u].name + "': '" + e.param->name +
             "' is not a view of the flat buffer at its offset " + std::to_string(e.offset) +
             ": views that copy, so what the ranks gather never reaches the parameters the forward reads";
    }
  }
  return "";
}

}  // namespace

// ---- the checks ------------------------------------------------------------------------------------

std::vector<Check> flat_parameter_checks() {
  return {
      make("padding", "the flat buffer is padded to the next multiple of W, no more", 2, padding_to_a_multiple_of_w),
      make("alignment", "every parameter starts at a multiple of align, in the order given", 1,
           offsets_aligned_in_order),
      make("slices",
           "each rank's shard holds the right slices of the right parameters, in a unit of billions of elements too", 2,
           each_rank_holds_its_slices),
      make("odd-world", "odd world sizes (3, 5, 7) and random sizes: every element in exactly one shard", 1,
           odd_world_sizes_and_random_sizes),
      make("cut-parameter", "a parameter cut by chunk boundaries is split into a slice on each rank it spans", 1,
           a_cut_parameter_split_in_two),
      make("rank-owns-none", "a rank that owns no element of a small parameter gets no slice of it", 1,
           no_slice_for_a_rank_owning_none),
      // A copy trains on values the gathers never write: the run shows it (NaN, or the race detector's stop).
      make_shown("views", "parameters are views of the flat buffer, not copies (value and grad)", 2,
                 "fsdplab run --model gpt2 --world 2 --steps 2 {impl}", parameters_are_views_not_copies),
      // No run plans a unit the contract refuses: the diagnostic is all there is to see.
      make_shown("bad-input", "errors for an empty unit, W < 1, align < 1, a parameter given twice, a rank outside W",
                 1, "", errors_for_bad_input),
      equivalence_check(2, "training-W3", "gpt2 test-tiny on 3 ranks trains equal to the single-rank baseline", 2,
                        small_gpt2(3), "the layout or the slices differ between ranks, or a view copies",
                        training_cause),
  };
}

}  // namespace fsdplab::grading
