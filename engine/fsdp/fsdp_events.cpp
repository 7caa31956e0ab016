#include "engine/fsdp/fsdp_events.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "engine/fsdp/unit_lifecycle.hpp"
#include "engine/runtime/byte_text.hpp"

namespace fsdplab {
namespace {

const IssuedCollective* own_collective(const FsdpActivity& activity, const FsdpUnit& unit,
                                       std::string_view collective) {
  const auto it = std::find_if(activity.issued.begin(), activity.issued.end(), [&](const IssuedCollective& c) {
    return c.unit == unit.index && !c.prefetch && c.collective == collective;
  });
  return it == activity.issued.end() ? nullptr : &*it;
}

// The gathered size of `unit` on this rank, in the dtype it computes in.
std::string full_size(const FsdpRank& rank, const FsdpUnit& unit) {
  const DType dtype = rank.options.param_dtype;
  return size_text(unit.layout.padded_numel * static_cast<std::int64_t>(dtype_size(dtype)), dtype);
}

// pre-forward and pre-backward: whether the task gathered the unit, found it prefetched or still gathered.
std::string describe_unshard(const FsdpRank& rank, const FsdpUnit& unit, UnitState before, bool backward) {
  const std::string title = unit_title(rank, unit.index);
  std::string what;
  if (const IssuedCollective* gather = own_collective(rank.activity, unit, "all_gather")) {
    what = "gathered " + title + (backward ? " again for its backward" : "") + " (" + gather->size +
           ") on the all_gather stream; " +
           (rank.async() ? "compute waits on its event"
                         : "SYNC: it waited for all earlier compute, and compute waits for it");
  } else if (before == UnitState::gathering) {
    what = title + " was prefetched earlier; compute waits on its gather's event";
  } else if (before == UnitState::unsharded) {
    what = title + " is still gathered" + (backward ? " from its forward" : "") + "; nothing to gather";
  } else {
    what = title + " is whole on this rank (" + std::string(strategy_name(rank.options.strategy)) +
           "): nothing to gather";
  }
  if (backward) {
    what += unit.grad_accumulated ? "; its backward adds to the gradient held from earlier micro-batches"
                                  : "; zeroed its full gradient buffer";
  }
  return what;
}

std::string describe_reshard(const FsdpRank& rank, const FsdpUnit& unit, UnitState before) {
  const std::string title = unit_title(rank, unit.index);
  if (unit.state != UnitState::sharded || before == UnitState::sharded)
    return title + " stays gathered until its backward";
  if (unit.full.overlaps(unit.replica))
    return "resharded " + title + "; its parameters are the replica: nothing to free";
  if (unit.pool_slot >= 0)
    return "resharded " + title + ": its pool buffer (" + (unit.pool_slot == 0 ? "even" : "odd") +
           ") goes to the next unit once compute is done with it";
  return "resharded " + title + ": released its gathered parameters (" + full_size(rank, unit) + ")" +
         (rank.async() ? ", parked until compute is done with them" : "");
}

std::string describe_reduction(const FsdpRank& rank, const FsdpUnit& unit) {
  const std::string title = unit_title(rank, unit.index);
  const std::string world = std::to_string(rank.world.world());
  std::string what;
  if (const IssuedCollective* rs = own_collective(rank.activity, unit, "reduce_scatter")) {
    what = "reduce-scattered " + title + "'s gradient (" + rs->size + ") into this rank's f32 shard, averaged over " +
           world + " ranks";
    if (own_collective(rank.activity, unit, "all_reduce")) what += " (then all-reduced across the replica group)";
  } else if (const IssuedCollective* ar = own_collective(rank.activity, unit, "all_reduce")) {
    what = "all-reduced " + title + "'s whole gradient (" + ar->size + "), averaged over " + world + " ranks";
  } else if (unit.grad_accumulated) {
    return "kept " + title + "'s full gradient for the next micro-batch (accumulating: no reduction)";
  } else if (rank.options.embedding_grad == EmbeddingGradient::rows && rank.world.world() > 1) {
    // [Note: the embedding's gradient as rows] (unit_lifecycle.cpp): the root's reduction was issued in parts and
    // by the rows; under ASYNC the backward's last inner unit has its reduce-scatter held for the rows.
    if (unit.module->parent() == nullptr)
      return "reduce-scattered " + title + "'s gradient in " +
             std::to_string(root_reduction_parts(rank.schedule.units.size())) +
             " parts beside the inner units' backward, and added the embedding's rows, gathered from " + world +
             " ranks, into this rank's f32 shard (its parameters were freed at the first part)";
    what = "held " + title + "'s reduce-scatter until the embedding's rows are gathered: the root's update waits " +
           "for them, and this reduction runs beside it";
  } else {
    what = title + "'s gradient is final on this rank (one rank: nothing to reduce)";
  }
  return what + "; freed its gathered parameters";
}

std::string describe_prefetches(const FsdpRank& rank, FsdpEventKind kind) {
  const std::string_view which = kind == FsdpEventKind::pre_forward    ? "forward prefetch"
                                 : kind == FsdpEventKind::pre_backward ? "backward prefetch, in pre-backward"
                                                                       : "backward prefetch, in post-backward";
  std::string what;
  for (const IssuedCollective& c : rank.activity.issued)
    if (c.prefetch)
      what += "; prefetched " + unit_title(rank, c.unit) + " (" + c.size + ", " + std::string(which) + ")";
  return what;
}

}  // namespace

CodeSite task_site(int task, std::string_view methods, const FsdpTask& impl) {
  return {task, std::string(methods) + " (in the class at " + impl.where() + ")"};
}

ActivityScope::ActivityScope(FsdpRank& rank, int task, std::string_view methods, const FsdpTask& impl, int unit,
                             IssuedTo issued)
    : issued_(issued) {
  if (!rank.observer) return;
  rank_ = &rank;
  enter(task_site(task, methods, impl), unit);
}

ActivityScope::ActivityScope(FsdpRank& rank, CodeSite site, int unit) {
  if (!rank.observer) return;
  rank_ = &rank;
  enter(std::move(site), unit);
}

void ActivityScope::enter(CodeSite site, int unit) {
  saved_ = std::exchange(rank_->activity, FsdpActivity{site.task, std::move(site.code), unit, {}});
}

ActivityScope::~ActivityScope() {
  if (!rank_) return;
  std::vector<IssuedCollective> issued = std::move(rank_->activity.issued);
  rank_->activity = std::move(saved_);
  if (issued_ == IssuedTo::enclosing)
    rank_->activity.issued.insert(rank_->activity.issued.end(), issued.begin(), issued.end());
}

FsdpEvent make_event(FsdpEventKind kind, int task, std::string code, std::string what) {
  FsdpEvent event;
  event.kind = kind;
  event.task = task;
  event.code = std::move(code);
  event.what = std::move(what);
  return event;
}

void report(FsdpRank& rank, FsdpEvent event) {
  event.rank = rank.device.rank();
  event.step = rank.device.labels().step;
  event.host_time = rank.device.host_time();
  rank.observer->on_fsdp_event(event);
}

void report_unit_event(FsdpRank& rank, const FsdpUnit& unit, FsdpEventKind kind, UnitState before) {
  if (!rank.observer) return;
  std::string what;
  switch (kind) {
    case FsdpEventKind::pre_forward: what = describe_unshard(rank, unit, before, false); break;
    case FsdpEventKind::post_forward: what = describe_reshard(rank, unit, before); break;
    case FsdpEventKind::pre_backward: what = describe_unshard(rank, unit, before, true); break;
    case FsdpEventKind::post_backward: what = describe_reduction(rank, unit); break;
    default: break;  // not a hook: collectives and the optimizer step are reported where they happen
  }
  what += describe_prefetches(rank, kind);
  FsdpEvent event = make_event(kind, rank.activity.task, rank.activity.code, std::move(what));
  event.unit = unit.index;
  event.unit_name = unit.name;
  event.unit_state = unit.state;
  report(rank, std::move(event));
}

void report_optimizer_step(FsdpRank& rank, std::span<FsdpUnit* const> units, std::string_view optimizer,
                           double max_grad_norm) {
  if (!rank.observer) return;
  std::int64_t shard_bytes = 0;
  for (const FsdpUnit* unit : units) shard_bytes += unit->master.nbytes();
  const auto issued = [&](std::string_view collective) {
    return std::count_if(rank.activity.issued.begin(), rank.activity.issued.end(),
                         [&](const IssuedCollective& c) { return c.collective == collective; });
  };
  std::string what;
  if (max_grad_norm > 0) {
    // What the task did, not what it should: the all-reduces it issued for the norm.
    const auto all_reduces = issued("all_reduce");
    const std::string how = all_reduces == 0   ? "no all-reduce issued (a norm of this rank's own)"
                            : all_reduces == 1 ? "the squared norm all-reduced once over the shard group"
                                               : std::to_string(all_reduces) + " all-reduces issued";
    char clip[200];
    std::snprintf(clip, sizeof clip, "clipped the gradient shards to 2-norm <= %g, %s; ", max_grad_norm, how.c_str());
    what += clip;
  }
  what += std::string(optimizer) + " updated this rank's f32 shards of " + std::to_string(units.size()) + " units (" +
          size_text(shard_bytes, DType::f32) + ")";
  const auto gathers = issued("all_gather");
  if (gathers > 0) what += "; all-gathered the updated chunks of " + std::to_string(gathers) + " units";
  report(rank, make_event(FsdpEventKind::optimizer_step, rank.activity.task, rank.activity.code, std::move(what)));
}

std::string unit_title(const FsdpRank& rank, int unit) {
  const auto& units = rank.schedule.units;
  if (unit < 0 || unit >= static_cast<int>(units.size())) return "";
  return "unit " + std::to_string(unit) + " '" + units[static_cast<std::size_t>(unit)]->name + "'";
}

std::string size_text(std::int64_t bytes, DType dtype) {
  return format_bytes(bytes) + " " + std::string(dtype_name(dtype));
}

}  // namespace fsdplab
