// Task 1's checks: MetaInitTask (engine/fsdp/meta_init.hpp, labs/01-meta-init).
// Direct calls on small units whose layouts (the reference's task 2) isolate one pitfall each, every
// shard compared with the same chunk of the unsharded initialisation: the seed reaching the values, the
// values not depending on the rank that draws them, a parameter cut between ranks drawn at its own
// element indices, several slices at their shard offsets, gaps and padding zero even in memory that held
// something before, a dry run left alone, no device memory, the host's write after the device is done with the
// shard, no whole parameter on the host (a parameter no
// host could hold, over enough ranks that its shard is small). Then the initial model of gpt2 test-tiny at
// W = 1, 2, 3, 4 and 8 against the single-rank baseline's, bit for bit, and a training.
#include <algorithm>
#include <cmath>
#include <limits>
#include <new>

#include "engine/fsdp/lab_todo.hpp"
#include "engine/tensor/elementwise.hpp"
#include "grader/check_catalog.hpp"
#include "grader/diagnostic_text.hpp"
#include "grader/graded_run.hpp"
#include "grader/rank_harness.hpp"

namespace fsdplab::grading {
namespace {

constexpr const char* kShow = "fsdplab gui --model gpt2 --preset test-tiny --world 3 {impl} --compare impl";

const MetaInitTask& graded(const CheckContext& c) { return *c.tasks.meta_init; }

// ---- a unit, its layout, and the shard init_shard should draw --------------------------------------

// A unit of named parameters of the given sizes, each drawn from a normal distribution (so that every
// element differs from its neighbours and from zero).
struct Unit {
  explicit Unit(const std::vector<std::pair<std::string, std::int64_t>>& sizes) {
    for (const auto& [name, numel] : sizes) owned.push_back({name, {numel}, ParamInit::normal(0, 1), {}, {}});
    for (Parameter& p : owned) pointers.push_back(&p);
  }
  std::vector<Parameter> owned;
  std::vector<Parameter*> pointers;
};

// The layout and the slices come from the reference's task 2, whatever is graded.
FlatParamLayout layout_of(const Unit& unit, int world, std::int64_t align) {
  return reference_flat_parameter().plan(unit.pointers, world, align);
}

std::vector<ShardSlice> slices_of(const FlatParamLayout& layout, int rank) {
  return reference_flat_parameter().shard_slices(layout, rank);
}

float drawn_at(const Parameter& p, std::uint64_t seed, std::int64_t index) {
  float value = 0;
  p.init.fill(std::span<float>(&value, 1), seed, p.name, static_cast<std::uint64_t>(index));
  return value;
}

// Chunk `rank` of the unsharded initialisation laid out flat: what rank `rank`'s shard must hold.
std::vector<float> expected_shard(const FlatParamLayout& layout, int rank, std::uint64_t seed) {
  std::vector<float> flat(static_cast<std::size_t>(layout.padded_numel), 0.0f);
  for (const FlatParamEntry& e : layout.entries)
    e.param->init.fill(
        std::span<float>(flat).subspan(static_cast<std::size_t>(e.offset), static_cast<std::size_t>(e.numel)), seed,
        e.param->name, 0);
  const auto first = flat.begin() + rank * layout.shard_numel();
  return std::vector<float>(first, first + layout.shard_numel());
}

// The graded init_shard of rank `rank`'s chunk, on `device`, into shard memory that held NaN before:
// an element it leaves unwritten shows.
std::vector<float> drawn_shard(const CheckContext& c, Device& device, const FlatParamLayout& layout, int rank,
                               std::uint64_t seed) {
  const Tensor shard = Tensor::empty(device, {layout.shard_numel()}, DType::f32, MemTag::param_shard, "shard");
  shard.copy_from(
      std::vector<float>(static_cast<std::size_t>(layout.shard_numel()), std::numeric_limits<float>::quiet_NaN()));
  graded(c).init_shard(slices_of(layout, rank), shard, seed);
  device.synchronize();
  return shard.to_vector();
}

// The parameter element `i` of rank `rank`'s shard belongs to; null for an alignment gap or padding.
const FlatParamEntry* entry_at(const FlatParamLayout& layout, int rank, std::int64_t i) {
  const std::int64_t flat = rank * layout.shard_numel() + i;
  for (const FlatParamEntry& e : layout.entries)
    if (flat >= e.offset && flat < e.offset + e.numel) return &e;
  return nullptr;
}

// What element `i` of rank `rank`'s shard is in the unit: "element 8 of fc1.weight", an alignment gap, padding.
std::string element_name(const FlatParamLayout& layout, int rank, std::int64_t i) {
  const std::int64_t flat = rank * layout.shard_numel() + i;
  if (const FlatParamEntry* e = entry_at(layout, rank, i))
    return "element " + std::to_string(flat - e->offset) + " of " + e->param->name;
  return flat >= layout.used_numel ? "padding" : "an alignment gap";
}

// The likely mistake behind element `i` holding `got`, tried against the pitfalls of the README; "" when
// none explains it.
std::string likely_cause(const FlatParamLayout& layout, int rank, std::int64_t i, float got, std::uint64_t seed) {
  if (std::isnan(got))
    return "element never written: the shard's memory holds whatever was there before; write the whole shard, the "
           "slices' values and zero everywhere else";
  const std::vector<ShardSlice> slices = slices_of(layout, rank);
  for (const ShardSlice& s : slices) {
    if (i >= s.shard_offset && i < s.shard_offset + s.count && got == drawn_at(*s.param, seed, i - s.shard_offset))
      return "the slice of " + s.param->name + " drawn from element 0 of the parameter: pass s.param_begin (" +
             std::to_string(s.param_begin) + ") as ParamInit::fill's first_index";
  }
  for (const ShardSlice& s : slices) {
    if (s.shard_offset != 0 && i < s.count && got == drawn_at(*s.param, seed, s.param_begin + i))
      return "the slice of " + s.param->name +
             " written at element 0 of the shard: write each slice at its shard_offset (" +
             std::to_string(s.shard_offset) + ")";
  }
  if (!entry_at(layout, rank, i))
    return "a gap or the padding is not zero: both are gathered with the parameters; start each call from a zeroed "
           "host buffer, std::vector<float>(n, 0.0f), never one kept from an earlier call";
  return "";
}

// The first element of `got` that is not `want`, as a diagnostic's "got" and cause; empty when equal.
struct ShardDifference {
  std::string got;
  std::string cause;
  std::int64_t at = -1;  // the element of the shard
  bool empty() const { return got.empty(); }
};

ShardDifference shard_difference(const FlatParamLayout& layout, int rank, std::uint64_t seed,
                                 const std::vector<float>& got, const std::vector<float>& want,
                                 const std::string& where) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    // Bit for bit: == also refuses a NaN.
    if (got[i] == want[i]) continue;
    const auto at = static_cast<std::int64_t>(i);
    return {where + "rank " + std::to_string(rank) + "'s shard element " + std::to_string(i) + " is " + number(got[i]) +
                ", expected " + number(want[i]) + " (" + element_name(layout, rank, at) + ")",
            likely_cause(layout, rank, at, got[i], seed), at};
  }
  return {};
}

CheckOutcome from_difference(const ShardDifference& d, std::string expected, std::string cause, double fraction = 0) {
  if (d.empty()) return CheckOutcome::pass();
  return CheckOutcome::fail(std::move(expected), d.got, d.cause.empty() ? std::move(cause) : d.cause, fraction);
}

std::string layout_text(const FlatParamLayout& layout) {
  std::string s;
  for (const FlatParamEntry& e : layout.entries)
    s += (s.empty() ? "" : ", ") + e.param->name + " (" + std::to_string(e.numel) + ")";
  return "[" + s + "] at W = " + std::to_string(layout.world) + ", align " + std::to_string(layout.align) + ": ";
}

Check make(std::string id, std::string title, int points, std::function<CheckOutcome(const CheckContext&)> run,
           std::string show = kShow) {
  return {1, std::move(id), std::move(title), points, std::move(show), std::move(run)};
}

// ---- the initial model of a training, bit for bit --------------------------------------------------

// The first element of `run`'s initial model that is not the baseline's, bit for bit; "" when none.
std::string initial_difference(const GradedRun& run, const GradedRun& baseline) {
  if (!run.trained()) return failure_text(run);
  for (const auto& [name, values] : baseline.params) {
    const auto it = run.params.find(name);
    if (it == run.params.end() || it->second.size() != values.size())
      return "the model has no parameter '" + name + "' of " + std::to_string(values.size()) + " elements";
    for (std::size_t i = 0; i < values.size(); ++i)
      if (!(it->second[i] == values[i]))
        return "element " + std::to_string(i) + " of " + name + " is " + number(it->second[i]) + ", the baseline's " +
               number(values[i]);
  }
  return "";
}

// The initial model of gpt2 test-tiny at each of `worlds` (--steps 0), bit for bit the baseline's.
CheckOutcome initial_model_at(const CheckContext& c, const std::vector<int>& worlds) {
  GradeCase run = small_gpt2(1);
  run.run.batch = 24;  // split evenly over every world size tried
  run.run.steps = 0;
  run.run.seed = c.seed;
  const GradedRun baseline = train_baseline(run, c.scratch);
  int equal = 0;
  std::string first;
  std::string first_stopped;  // why the first run that differs stopped (stopped_cause); "" where it ran
  bool first_raced = false;
  for (int world : worlds) {
    run.run.world = world;
    const GradedRun graded = train_graded(run, c.tasks, c.scratch);
    const std::string difference = initial_difference(graded, baseline);
    if (difference.empty()) {
      ++equal;
    } else if (first.empty()) {
      // What the student runs to see it: lab 01's README, check 3, at this W.
      GradeCase single = run;
      single.run.world = 1;
      const std::string dir = "init" + std::to_string(world);
      first = "W = " + std::to_string(world) + ": " + difference + " (" + run.command("run", c.impl_flag()) +
              " --save-init " + dir + ", then the baseline's " + single.command("run", "") +
              " --save-init baseline and cmp " + dir + "/model.safetensors baseline/model.safetensors)";
      if (!graded.trained()) first_stopped = stopped_cause(graded);
      first_raced = graded.race.has_value();
    }
  }
  if (first.empty()) return CheckOutcome::pass();
  CheckOutcome differs = CheckOutcome::fail(
      "the initial parameters at W = 1, 2, 3, 4 and 8 bit for bit the single-rank baseline's", first,
      first_stopped.empty() ? "a shard that is not the same chunk of the unsharded initialisation: a slice drawn at "
                              "the wrong indices or written at the wrong offset, nonzero gaps, or a draw that depends "
                              "on the rank"
                            : first_stopped,
      static_cast<double>(equal) / static_cast<double>(worlds.size()));
  differs.raced = first_raced;
  return differs;
}

// ---- direct calls of init_shard --------------------------------------------------------------------

// A shard whose every element is 0 where its drawn values belong: no slice was drawn into it (a loop that stops one
// short, a slice skipped), which no seed or rank explains. "" when it holds something.
std::string nothing_drawn(const std::vector<float>& got, const std::vector<float>& want) {
  const auto zero = [](float v) { return v == 0.0f; };
  if (!std::all_of(got.begin(), got.end(), zero) || std::all_of(want.begin(), want.end(), zero)) return "";
  return "nothing drawn: the shard is all zero where its slice's values belong; draw every slice the engine hands "
         "you (a loop over all of `slices`, none skipped)";
}

CheckOutcome the_seed_reaches_every_value(const CheckContext& c) {
  const Unit unit({{"transformer.wte.weight", 64}});
  const FlatParamLayout layout = layout_of(unit, 2, 1);
  auto device = make_graded_device(0);
  const std::vector<float> seven = drawn_shard(c, *device, layout, 0, 7), eight = drawn_shard(c, *device, layout, 0, 8);
  const std::string expected = "seed 7's and seed 8's initial values, which differ";
  if (seven == eight) {
    if (const std::string none = nothing_drawn(seven, expected_shard(layout, 0, 7)); !none.empty())
      return CheckOutcome::fail(expected, "rank 0's shard is all zero under seed 7 and seed 8", none);
    return CheckOutcome::fail(
        expected, "rank 0's shard is the same under seed 7 and seed 8 (element 0: " + number(seven[0]) + ")",
        "the seed given is ignored: pass `seed` to ParamInit::fill, or every --seed trains the same model");
  }
  ShardDifference d = shard_difference(layout, 0, 7, seven, expected_shard(layout, 0, 7), "seed 7: ");
  if (d.empty()) d = shard_difference(layout, 0, 8, eight, expected_shard(layout, 0, 8), "seed 8: ");
  return from_difference(d, expected, "the values drawn under another seed than the one given");
}

CheckOutcome same_values_whichever_rank_draws(const CheckContext& c) {
  const Unit unit({{"transformer.h.0.attn.c_attn.weight", 64}});
  const FlatParamLayout layout = layout_of(unit, 4, 1);
  const std::vector<float> want = expected_shard(layout, 0, 5);
  for (int rank : {0, 3}) {
    auto device = make_graded_device(rank);
    const std::vector<float> got = drawn_shard(c, *device, layout, 0, 5);
    if (got == want) continue;
    const std::string expected = "chunk 0 of " + unit.owned[0].name + " drawn on rank " + std::to_string(rank) +
                                 " equal to the baseline's, as on every rank";
    const ShardDifference d = shard_difference(layout, 0, 5, got, want, "drawn on rank " + std::to_string(rank) + ": ");
    if (const std::string none = nothing_drawn(got, want); !none.empty())
      return CheckOutcome::fail(expected, d.got, none);
    // Wrong on rank 0 already: the rank is not what differs.
    if (rank == 0) return from_difference(d, expected, "a shard that is not its chunk of the parameter");
    return CheckOutcome::fail(
        expected, d.got,
        "the rank enters the draw (a seed per rank?): an element's value must depend only on the seed, "
        "the parameter's name and the element's index, so that the shards of any W form the baseline's model");
  }
  return CheckOutcome::pass();
}

CheckOutcome a_cut_parameter_drawn_at_its_own_indices(const CheckContext& c) {
  const Unit unit({{"transformer.h.0.mlp.c_fc.weight", 96}});
  const std::vector<int> worlds = {2, 3, 4, 8};
  int right = 0;
  ShardDifference first;
  for (int world : worlds) {
    const FlatParamLayout layout = layout_of(unit, world, 1);
    ShardDifference d;
    for (int r = 0; r < world && d.empty(); ++r) {
      auto device = make_graded_device(r);
      d = shard_difference(layout, r, 11, drawn_shard(c, *device, layout, r, 11), expected_shard(layout, r, 11),
                           layout_text(layout));
    }
    if (d.empty())
      ++right;
    else if (first.empty())
      first = d;
  }
  return from_difference(
      first, "rank r's shard: the parameter's elements [r * n, (r + 1) * n), drawn at those indices",
      "the slice's values are not the parameter's elements [param_begin, param_begin + count) under the seed given",
      static_cast<double>(right) / static_cast<double>(worlds.size()));
}

// The README's picture (a, b, c over W = 4, align 4) and an MLP-like unit over W = 3; each rank draws
// its own shard on its own thread and device, as in a run.
CheckOutcome each_slice_at_its_shard_offset(const CheckContext& c) {
  const Unit readme({{"a", 6}, {"b", 3}, {"c", 5}});
  const Unit mlp({{"fc.weight", 30}, {"fc.bias", 5}, {"ln.weight", 7}, {"ln.bias", 7}});
  for (const auto& [unit, world] : {std::pair<const Unit*, int>{&readme, 4}, {&mlp, 3}}) {
    const FlatParamLayout layout = layout_of(*unit, world, 4);
    std::vector<ShardDifference> found(static_cast<std::size_t>(world));
    on_ranks(world, [&](GradedRank& r) {
      found[static_cast<std::size_t>(r.rank)] =
          shard_difference(layout, r.rank, 3, drawn_shard(c, r.device, layout, r.rank, 3),
                           expected_shard(layout, r.rank, 3), layout_text(layout));
    });
    for (const ShardDifference& d : found)
      if (!d.empty())
        return from_difference(
            d, "each slice's values at elements [shard_offset, shard_offset + count) of the shard, zero in the gaps",
            "a slice written at the wrong place in the shard");
  }
  return CheckOutcome::pass();
}

// As the engine does, each rank draws one unit after the other on its thread: first a unit its shard is
// full of, then one with alignment gaps and padding. The shard memory held NaN before each call.
// Then a unit of 5 elements at align 4 over 4 ranks (shards of 2): rank 3's shard is all padding and gets no slice,
// and must still be zeroed.
CheckOutcome gaps_and_padding_zero(const CheckContext& c) {
  const Unit full({{"transformer.h.1.ln_1.weight", 20}});
  const Unit gaps({{"a", 6}, {"b", 3}, {"c", 5}});
  const Unit small({{"transformer.h.1.ln_2.bias", 5}});
  const FlatParamLayout first = layout_of(full, 4, 1), second = layout_of(gaps, 4, 4), third = layout_of(small, 4, 4);
  std::vector<ShardDifference> found(4);
  on_ranks(4, [&](GradedRank& r) {
    drawn_shard(c, r.device, first, r.rank, 2);
    ShardDifference& d = found[static_cast<std::size_t>(r.rank)];
    d = shard_difference(second, r.rank, 2, drawn_shard(c, r.device, second, r.rank, 2),
                         expected_shard(second, r.rank, 2), "the second unit, " + layout_text(second));
    if (d.empty())
      d = shard_difference(
          third, r.rank, 2, drawn_shard(c, r.device, third, r.rank, 2), expected_shard(third, r.rank, 2),
          std::string("the third unit") + (r.rank == 3 ? " (no slice on this rank)" : "") + ", " + layout_text(third));
  });
  for (const ShardDifference& d : found)
    if (!d.empty())
      return from_difference(
          d, "zero in every alignment gap and in the padding, whatever the memory or an earlier call held",
          "gaps or padding not zeroed");
  return CheckOutcome::pass();
}

// A dry run plans shapes far beyond any memory: here a shard of 2^45 elements (128 TB as f32), which a dry-run
// tensor holds without memory. Drawing its values (before a write the dry run would refuse) cannot even begin.
CheckOutcome nothing_written_on_a_dry_run(const CheckContext& c) {
  const Unit unit({{"transformer.wte.weight", std::int64_t{1} << 46}});
  const FlatParamLayout layout = layout_of(unit, 2, 1);
  auto device = make_graded_device(0, /*dry_run=*/true);
  const Tensor shard = Tensor::empty(*device, {layout.shard_numel()}, DType::f32, MemTag::param_shard, "shard");
  const std::vector<ShardSlice> slices = slices_of(layout, 0);
  const std::string cause =
      "values drawn or written on a dry run, where tensors have no data and shapes may be any size: return first "
      "thing when shard.device().dry_run(), before drawing anything";
  std::string error;
  try {
    error = error_raised([&] { graded(c).init_shard(slices, shard, 1); });
  } catch (const TaskNotImplemented&) {
    throw;
  } catch (const std::exception& e) {  // std::bad_alloc, std::length_error: a draw of the dry run's shard
    error = std::string(e.what()) + " (drawing the shard's " + std::to_string(layout.shard_numel()) + " elements)";
  }
  if (error.empty()) return CheckOutcome::pass();
  return CheckOutcome::fail(
      "init_shard to return at once on a dry run (a shard of " + std::to_string(layout.shard_numel()) + " elements)",
      "it threw: " + error, cause);
}

CheckOutcome no_device_memory_allocated(const CheckContext& c) {
  const Unit unit({{"transformer.h.0.attn.c_proj.weight", 48}, {"transformer.h.0.attn.c_proj.bias", 8}});
  const FlatParamLayout layout = layout_of(unit, 2, 4);
  auto device = make_graded_device(1);
  const Tensor shard = Tensor::empty(*device, {layout.shard_numel()}, DType::f32, MemTag::param_shard, "shard");
  const std::vector<ShardSlice> slices = slices_of(layout, 1);
  // Only the shard is allocated: anything init_shard allocates, kept or freed, raises a peak.
  const TagBytes peak_before = device->ledger().peak_by_tag();
  graded(c).init_shard(slices, shard, 4);
  device->synchronize();
  const TagBytes& peak_after = device->ledger().peak_by_tag();
  for (MemTag tag : kAllMemTags) {
    const auto t = static_cast<std::size_t>(tag);
    if (peak_after[t] != peak_before[t])
      return CheckOutcome::fail(
          "no device memory allocated by init_shard",
          "it allocated " + std::to_string(peak_after[t] - peak_before[t]) + " bytes of " +
              std::string(mem_tag_name(tag)) + " at its peak",
          "a device tensor made inside init_shard (a staging copy, a whole unit): the shard is already "
          "allocated; draw on the host and copy_from into it");
  }
  return CheckOutcome::pass();
}

// The shard's memory may still be in a stream's hands when init_shard runs (a run that initialises again, a block
// an earlier tensor's ops used): the host writes it only once the device is done. Here a stream is still filling the
// shard when init_shard is called, and the race detector checks the host's write against it.
CheckOutcome the_host_waits_before_it_writes(const CheckContext& c) {
  const Unit unit({{"transformer.wte.weight", 64}});
  const FlatParamLayout layout = layout_of(unit, 2, 1);
  auto device = make_graded_device(0);
  const Tensor shard = Tensor::empty(*device, {layout.shard_numel()}, DType::f32, MemTag::param_shard, "shard");
  // The block still in use on two streams, as a reused block may be: filled on compute, then (ordered after it) on
  // the memcpy stream. A wait for the compute stream alone leaves the memcpy stream's fill racing the host's write.
  fill(device->stream(Lane::compute), shard, 0.5f);
  device->wait_stream(Lane::memcpy, Lane::compute);
  fill(device->stream(Lane::memcpy), shard, 0.25f);
  try {
    graded(c).init_shard(slices_of(layout, 0), shard, 9);
  } catch (const RaceError& e) {
    CheckOutcome out = CheckOutcome::fail(
        "the host to write the shard after the device is done with it",
        "the race detector stopped it: " + without_failed_rank(e.what()),
        "shard.copy_from wrote the shard from the host while a stream was still filling it (here the compute stream, "
        "then the memcpy stream): call shard.device().synchronize(), which waits for every stream, before "
        "shard.copy_from(values)");
    out.raced = true;
    return out;
  }
  return CheckOutcome::pass();
}

// 256 TB as f32: more than a process's address space, so a host copy of the whole parameter cannot be
// made, whatever the machine or its overcommit setting. Each rank's shard is 65,536 elements.
CheckOutcome only_the_shard_drawn(const CheckContext& c) {
  constexpr std::int64_t kNumel = std::int64_t{1} << 46;
  const Unit unit({{"transformer.wte.weight", kNumel}});
  const FlatParamLayout layout = layout_of(unit, 1 << 30, 1);
  const int rank = (1 << 30) - 1;  // the last: its slice begins near 2^46, far past what an int holds
  auto device = make_graded_device(rank);
  const std::string expected = "rank " + std::to_string(rank) + "'s " + std::to_string(layout.shard_numel()) +
                               " values drawn at their own indices, with no more than the shard on the host";
  std::vector<float> got;
  try {
    got = drawn_shard(c, *device, layout, rank, 3);
  } catch (const std::bad_alloc&) {
    return CheckOutcome::fail(expected,
                              "std::bad_alloc: init_shard asked the host for more memory than any process has",
                              "the whole parameter built on the host and then cut (ParamInit::fill over "
                              "param->numel() elements): FSDP exists so that no rank holds a whole parameter; draw "
                              "each slice alone, param_begin as fill's first_index");
  }
  std::vector<float> want(static_cast<std::size_t>(layout.shard_numel()));
  unit.owned[0].init.fill(want, 3, unit.owned[0].name, static_cast<std::uint64_t>(rank * layout.shard_numel()));
  return from_difference(shard_difference(layout, rank, 3, got, want, ""), expected,
                         "a shard that is not its chunk of the parameter");
}

// ---- why a training differs from the baseline ------------------------------------------------------

// What a shard `got` of rank `rank` that is not its chunk `want` under `seed` shows when no element explains it
// (likely_cause): the same chunk drawn right on rank 0, or drawn under seed 0; "" when neither.
std::string draw_mistake(const CheckContext& c, const FlatParamLayout& layout, int rank, std::uint64_t seed,
                         const std::vector<float>& got, const std::vector<float>& want) {
  auto rank0 = make_graded_device(0);
  if (rank != 0 && drawn_shard(c, *rank0, layout, rank, seed) == want)
    return "the same chunk drawn on rank 0 is right: the rank enters the draw (a seed per rank?); a value must "
           "depend only on the seed, the parameter's name and the element's index";
  if (seed != 0 && got == expected_shard(layout, rank, 0))
    return "the shard is seed 0's: the seed given is ignored; pass `seed` to ParamInit::fill";
  return "";
}

// Why a training of `run` differs from the baseline: what the run shows, and init_shard asked for every shard of
// the very units it trained, each beside its chunk of the unsharded initialisation. A W that divides few sizes (3)
// cuts parameters at chunk boundaries and leaves the last chunk short: the first element off names where it lies.
// "" when every shard is right.
std::string training_cause(const CheckContext& c, const GradeCase& run, const GradedRun& trained,
                           const GradedRun& baseline, double tolerance) {
  const std::uint64_t seed = run.run.seed;
  const CaseUnits units = case_units(run);
  for (std::size_t u = 0; u < units.plans.size(); ++u) {
    const FlatParamLayout& layout = units.layouts[u];
    for (int rank = 0; rank < layout.world; ++rank) {
      auto device = make_graded_device(rank);
      const std::vector<float> got = drawn_shard(c, *device, layout, rank, seed);
      const std::vector<float> want = expected_shard(layout, rank, seed);
      const ShardDifference d = shard_difference(layout, rank, seed, got, want, "");
      if (d.empty()) continue;
      std::string where = "in " + chunk_text(layout, rank);
      if (const FlatParamEntry* e = entry_at(layout, rank, d.at); e && !cut_text(layout, *e->param).empty())
        where += ", " + e->param->name + " " + cut_text(layout, *e->param);
      std::string mistake = d.cause.empty() ? draw_mistake(c, layout, rank, seed, got, want) : d.cause;
      if (mistake.empty()) mistake = "a shard that is not its chunk of the unsharded initialisation";
      return divergence_text(trained, baseline, tolerance) + "; init_shard on this run's unit '" + units.plans[u].name +
             "' at W = " + std::to_string(layout.world) + ": " + d.got + ", " + where + ": " + mistake;
    }
  }
  return "";
}

}  // namespace

// ---- the checks ------------------------------------------------------------------------------------

std::vector<Check> meta_init_checks() {
  return {
      make("seed", "the seed reaches every value: two seeds, two initialisations, each the baseline's", 1,
           the_seed_reaches_every_value),
      make("same-on-every-rank",
           "a chunk has the same values whichever rank draws it (no_shard draws every chunk on every rank)", 1,
           same_values_whichever_rank_draws),
      make("cut-parameter", "a parameter cut between ranks: each part drawn at the parameter's own element indices", 3,
           a_cut_parameter_drawn_at_its_own_indices),
      make("shard-offsets",
           "several parameters in one shard: each slice at its shard_offset, the gaps between them zero", 2,
           each_slice_at_its_shard_offset),
      make("gaps-and-padding", "gaps and padding zero in reused memory and on a second call from the same thread", 2,
           gaps_and_padding_zero),
      make("dry-run", "on a dry-run device (no values) init_shard writes nothing and succeeds", 1,
           nothing_written_on_a_dry_run, "fsdplab run --model gpt2 --preset gpt2 --world 4 --steps 2 --dry-run {impl}"),
      make("no-device-memory", "init_shard allocates nothing on the device", 1, no_device_memory_allocated),
      // No run shows these two: the host's order of writes and the elements it draws leave the same parameters.
      make("host-waits", "the host writes the shard after the device is done with it (a stream still filling it)", 1,
           the_host_waits_before_it_writes, ""),
      make("shard-only", "only the rank's shard is drawn: a parameter of 2^46 elements over 2^30 ranks", 1,
           only_the_shard_drawn, ""),
      make(
          "initial-model", "gpt2 test-tiny's initial model at W = 1, 2, 3, 4, 8 is the baseline's, bit for bit", 2,
          [](const CheckContext& c) {
            return initial_model_at(c, {1, 2, 3, 4, 8});
          },
          "fsdplab run --model gpt2 --world 3 --batch 6 --steps 0 {impl} --save-init init3"),
      equivalence_check(1, "training-W3", "gpt2 test-tiny on 3 ranks trains equal to the single-rank baseline", 1,
                        small_gpt2(3), "the shards do not start from the baseline's initial values", training_cause),
  };
}

}  // namespace fsdplab::grading
