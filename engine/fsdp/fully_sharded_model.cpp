#include "engine/fsdp/fully_sharded_model.hpp"

#include <algorithm>
#include <set>

#include "engine/runtime/error.hpp"

namespace fsdplab {

// ---- hooks -----------------------------------------------------------------------------------------

// Runs the unit lifecycle around one unit's module, with the unit as the label of the ops it launches.
class FullyShardedModel::UnitHooks final : public ModuleHooks {
 public:
  UnitHooks(FsdpUnit& unit, FsdpRank& rank, UnitLifecycle& lifecycle)
      : unit_(unit), rank_(rank), lifecycle_(lifecycle) {}

  void pre_forward(Module&, RunContext&) override {
    enter();
    lifecycle_.enter_forward();
    lifecycle_.pre_forward(unit_);
  }
  void post_forward(Module&, RunContext&) override {
    lifecycle_.post_forward(unit_);
    leave();
  }
  void pre_backward(Module&, RunContext&) override {
    enter();
    lifecycle_.enter_backward();
    lifecycle_.pre_backward(unit_);
  }
  void post_backward(Module&, RunContext&) override {
    lifecycle_.post_backward(unit_);
    lifecycle_.leave_backward_if_last();
    leave();
  }

 private:
  void enter() {
    OpLabels labels = rank_.device.labels();
    saved_unit_ = labels.unit;
    labels.unit = unit_.index;
    rank_.device.set_labels(std::move(labels));
  }
  void leave() {
    OpLabels labels = rank_.device.labels();
    labels.unit = saved_unit_;
    rank_.device.set_labels(std::move(labels));
  }

  FsdpUnit& unit_;
  FsdpRank& rank_;
  UnitLifecycle& lifecycle_;
  int saved_unit_ = -1;
};

// The model's sink for the input embeddings' gradient under --embedding-grad rows.
class FullyShardedModel::EmbeddingRows final : public InputEmbeddingGradientSink {
 public:
  explicit EmbeddingRows(UnitLifecycle& lifecycle) : lifecycle_(lifecycle) {}
  bool take(RunContext&, const InputEmbeddingGradient& grad) override { return lifecycle_.add_embedding_rows(grad); }

 private:
  UnitLifecycle& lifecycle_;
};

// ---- the wrapped model -----------------------------------------------------------------------------

void check_embedding_rows_fit(Model& model, std::span<const UnitPlan> plans) {
  const Model::InputEmbeddingTables tables = model.input_embedding_tables();
  check(tables.token, "--embedding-grad rows: model ", model.kind(),
        " has no learned token table to take the rows of (GPT-2 and Llama have); use --embedding-grad table");
  for (const Parameter* table : {tables.token, tables.position}) {
    if (!table) continue;
    const auto holds = [&](const UnitPlan& plan) {
      return std::find(plan.params.begin(), plan.params.end(), table) != plan.params.end();
    };
    const auto unit = std::find_if(plans.begin(), plans.end(), holds);
    check(unit == plans.begin() && unit->module->parent() == nullptr, "--embedding-grad rows: parameter '", table->name,
          "' is in unit '", unit == plans.end() ? std::string("(none)") : unit->name,
          "', not the root unit, into whose shard the rows are added; use --wrap block or model, or --embedding-grad "
          "table");
  }
}

void check_pool_units_take_turns(std::span<const UnitPlan> plans, const ForwardTask& forward,
                                 ShardingStrategy strategy) {
  // The units freed after their forward (the root stays gathered: it keeps its own buffer).
  const auto pooled = [&](const UnitPlan& plan) {
    return forward.reshard_after_forward(strategy, plan.module->parent() == nullptr);
  };
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const int parent = plans[i].parent;
    if (parent < 0 || parent >= static_cast<int>(i) || !pooled(plans[i])) continue;  // a bad parent: the constructor's
    const UnitPlan& outer = plans[static_cast<std::size_t>(parent)];
    check(!pooled(outer), "--buffers pool: FSDP unit '", plans[i].name, "' is nested in unit '", outer.name,
          "', so both are gathered at once and could need the same buffer; the two-buffer pool takes units that run "
          "one after another (wrap only the innermost, or use --buffers alloc)");
  }
}

FullyShardedModel::FullyShardedModel(Model& model, FsdpRank& rank, const FsdpTasks& tasks,
                                     std::span<const std::string> unit_kinds)
    : model_(model), rank_(rank), lifecycle_(rank, tasks) {
  tasks.check_complete();
  const FsdpOptions& options = rank.options;
  const int shards = rank.shard_group.world();
  const int me = rank.shard_group.rank();
  Device& device = rank.device;
  const std::vector<UnitPlan> plans = tasks.integration->plan_units(model, unit_kinds);
  // A parent indexes the units (the two-buffer pool reads it), and comes before its children (the plans are in
  // pre-order): one that does not (lab 07's root removed without renumbering makes the first unit its own parent)
  // is refused by name here, before any unit trains, rather than read out of range later.
  for (std::size_t i = 0; i < plans.size(); ++i)
    check(plans[i].parent >= -1 && plans[i].parent < static_cast<int>(i), "FSDP: unit ", i, " '", plans[i].name,
          "' has parent ", plans[i].parent, "; expected -1 (no enclosing unit) or the index of an earlier unit: ",
          "IntegrationTask::plan_units returns the ", plans.size(),
          " units outermost first, each unit's parent before it");
  // A parameter in no unit would never be given a value: said here, by name, rather than when a forward reads it.
  std::set<const Parameter*> planned;
  for (const UnitPlan& plan : plans) planned.insert(plan.params.begin(), plan.params.end());
  for (const Parameter* p : model.parameters())
    check(planned.count(p) > 0, "FSDP: parameter '", p->name, "' is in no unit: IntegrationTask::plan_units left it ",
          "out (", plans.size(), " units; the model itself, the root, is the first unit wherever a parameter is left ",
          "that no inner unit took, e.g. GPT-2's wte, wpe, ln_f)");
  // CPU offload: the f32 shards live in pinned host memory (the optimizer state follows them).
  const Lane shard_lane = options.offload ? Lane::host : Lane::compute;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const UnitPlan& plan = plans[i];
    auto unit = std::make_unique<FsdpUnit>();
    unit->index = static_cast<int>(i);
    unit->name = plan.name;
    unit->module = plan.module;
    unit->layout = tasks.flat_parameter->plan(plan.params, shards, options.align);
    const bool is_root = plan.module->parent() == nullptr;  // the model itself: a unit only if it kept parameters
    unit->reshard_after_forward = tasks.forward->reshard_after_forward(options.strategy, is_root);
    const std::int64_t shard = unit->layout.shard_numel();
    const std::int64_t padded = unit->layout.padded_numel;
    const Shape chunk_shape{shard};
    // With one rank per shard group the shard is the whole: the buffers are shards, by their tags.
    const MemTag whole_param_tag = shards == 1 ? MemTag::param_shard : MemTag::param_full;
    const MemTag whole_grad_tag = shards == 1 ? MemTag::grad_shard : MemTag::grad_full;
    if (parameters_replicated(options.strategy)) {
      unit->replica = Tensor::empty(device, {padded}, DType::f32, whole_param_tag, unit->name + ".flat_param");
      unit->master = unit->replica.view(me * shard, chunk_shape).set_name(unit->name + ".flat_param_shard");
    } else {
      unit->master = Tensor::empty(device, chunk_shape, DType::f32, MemTag::param_shard,
                                   unit->name + ".flat_param_shard", shard_lane);
    }
    unit->full = unit->replica.defined() && options.param_dtype == DType::f32
                     ? unit->replica
                     : Tensor::unallocated(device, {padded}, options.param_dtype, MemTag::param_full,
                                           unit->name + ".flat_param_full", Lane::all_gather);
    if (gradients_replicated(options.strategy)) {
      unit->grad_replica = Tensor::empty(device, {padded}, DType::f32, whole_grad_tag, unit->name + ".flat_grad");
      unit->grad_shard = unit->grad_replica.view(me * shard, chunk_shape).set_name(unit->name + ".flat_grad_shard");
    } else {
      unit->grad_shard = Tensor::empty(device, chunk_shape, DType::f32, MemTag::grad_shard,
                                       unit->name + ".flat_grad_shard", shard_lane);
    }
    unit->grad_full = unit->grad_replica.defined() && options.param_dtype == DType::f32
                          ? unit->grad_replica
                          : Tensor::unallocated(device, {padded}, options.param_dtype, MemTag::grad_full,
                                                unit->name + ".flat_grad_full");
    hooks_.push_back(std::make_unique<UnitHooks>(*unit, rank, lifecycle_));
    plan.module->add_hooks(hooks_.back().get());
    unit_ptrs_.push_back(unit.get());
    units_.push_back(std::move(unit));
  }
  if (options.buffers == UnshardBuffers::pool) {
    check_pool_units_take_turns(plans, *tasks.forward, options.strategy);
    use_buffer_pool();
  }
  if (options.embedding_grad == EmbeddingGradient::rows) {
    check_embedding_rows_fit(model, plans);
    embedding_rows_ = std::make_unique<EmbeddingRows>(lifecycle_);
    check(model.set_input_embedding_gradient_sink(embedding_rows_.get()), "--embedding-grad rows: model ", model.kind(),
          " names a token table but takes no sink for its gradient");
  }
  for (FsdpUnit* unit : unit_ptrs_) {
    tasks.flat_parameter->point_views(unit->layout, unit->full, &Parameter::value);
    tasks.flat_parameter->point_views(unit->layout, unit->grad_full, &Parameter::grad);
  }
  rank.schedule.units = unit_ptrs_;
}

void FullyShardedModel::use_buffer_pool() {
  OverlapState& s = rank_.schedule;
  const DType dtype = rank_.options.param_dtype;
  std::vector<FsdpUnit*> pooled;  // in the forward's order
  std::int64_t numel = 0;
  for (FsdpUnit* unit : unit_ptrs_) {
    if (!unit->reshard_after_forward) continue;  // the root stays gathered: it keeps its own buffer
    pooled.push_back(unit);
    numel = std::max(numel, unit->layout.padded_numel);
  }
  if (pooled.empty()) return;
  // Both slots as large as the largest unit: a unit takes whichever slot is free when it is gathered ([Note: one
  // unit at a time in a pool slot], unit_lifecycle.cpp), first the even or odd one of its place in the forward.
  for (std::size_t slot = 0; slot < 2; ++slot) {
    const std::string name = std::string("pool.") + (slot == 0 ? "even" : "odd");
    s.param_pool[slot] =
        Tensor::empty(rank_.device, {numel}, dtype, MemTag::param_full, name + ".flat_param", Lane::all_gather);
    s.grad_pool[slot] = Tensor::empty(rank_.device, {numel}, dtype, MemTag::grad_full, name + ".flat_grad");
  }
  for (std::size_t i = 0; i < pooled.size(); ++i) put_in_pool_slot(s, *pooled[i], static_cast<int>(i % 2));
}

FullyShardedModel::~FullyShardedModel() {
  if (embedding_rows_) model_.set_input_embedding_gradient_sink(nullptr);
  for (std::size_t i = 0; i < units_.size(); ++i) units_[i]->module->remove_hooks(hooks_[i].get());
}

std::vector<FullyShardedModel::LocalChunk> FullyShardedModel::local_chunks(const FsdpUnit& unit) const {
  if (!unit.replica.defined()) return {{rank_.shard_group.rank(), unit.master}};
  std::vector<LocalChunk> chunks;
  const std::int64_t shard = unit.layout.shard_numel();
  for (int c = 0; c < unit.layout.world; ++c) chunks.push_back({c, unit.replica.view(c * shard, {shard})});
  return chunks;
}

void FullyShardedModel::init_parameters(std::uint64_t seed) {
  const FsdpTasks& t = tasks();
  for (const FsdpUnit* unit : unit_ptrs_)
    for (const LocalChunk& c : local_chunks(*unit))
      t.meta_init->init_shard(t.flat_parameter->shard_slices(unit->layout, c.chunk), c.values, seed);
}

std::unique_ptr<Optimizer> FullyShardedModel::make_optimizer(const OptimizerSpec& spec) const {
  return lifecycle_.make_optimizer(unit_ptrs_, spec);
}

Tensor FullyShardedModel::optimizer_step(Optimizer& optimizer, NextForward next, double max_grad_norm) {
  return lifecycle_.optimizer_step(optimizer, unit_ptrs_, next, max_grad_norm);
}

void FullyShardedModel::load_parameters(const CheckpointFile& file) {
  if (rank_.device.dry_run()) return;
  for (const FsdpUnit* unit : unit_ptrs_) {
    for (const LocalChunk& c : local_chunks(*unit)) {
      std::vector<float> values(static_cast<std::size_t>(c.values.numel()), 0.0f);  // padding stays zero
      for (const ShardSlice& s : tasks().flat_parameter->shard_slices(unit->layout, c.chunk))
        file.read(*s.param, s.param_begin,
                  std::span<float>(values).subspan(static_cast<std::size_t>(s.shard_offset),
                                                   static_cast<std::size_t>(s.count)));
      rank_.device.synchronize();
      c.values.copy_from(values);
    }
  }
}

void FullyShardedModel::set_overlap_schedule(const FsdpOptions& schedule) {
  FsdpOptions& options = rank_.options;
  FsdpOptions expected = options;
  expected.mode = schedule.mode;
  expected.prefetch = schedule.prefetch;
  expected.max_inflight = schedule.max_inflight;
  check(schedule == expected, "FSDP: a schedule change between steps may change the overlap mode, prefetch and ",
        "rate limit only; expected this run's other options (", describe(options, rank_.world.world()), "), got ",
        describe(schedule, rank_.world.world()));
  OverlapState& s = rank_.schedule;
  check(s.pass == Pass::idle, "FSDP: the overlap schedule changes between steps only; a ",
        s.pass == Pass::forward ? "forward" : "backward", " pass is under way");
  for (const FsdpUnit* unit : unit_ptrs_)
    check(unit->state != UnitState::unsharded, "FSDP: the overlap schedule changes between steps only; unit '",
          unit->name, "' is gathered");
  if (schedule.mode == OverlapMode::sync) s.parked.release_all(rank_.device);
  options.mode = schedule.mode;
  options.prefetch = schedule.prefetch;
  options.max_inflight = schedule.max_inflight;
}

void FullyShardedModel::with_full_parameters(const std::function<void()>& body) {
  Device& device = rank_.device;
  std::vector<Tensor> whole;  // freed when this returns
  rank_.device.wait_stream(Lane::all_gather, Lane::compute);
  // A unit still gathering after a step is a prefetch its pass never used, which end_backward let through.
  check_prefetches_used(rank_.schedule);
  for (FsdpUnit* unit : unit_ptrs_) {
    check(unit->state == UnitState::sharded, "FSDP unit '", unit->name, "' is gathered; gather the full "
          "parameters between steps only");
    Tensor flat = unit->replica;
    if (!flat.defined()) {
      flat = Tensor::empty(device, {unit->layout.padded_numel}, DType::f32, MemTag::param_full,
                           unit->name + ".flat_param_f32", Lane::all_gather);
      const Tensor shard = lifecycle_.shard_on_device(*unit, "flat_param_shard_device");
      rank_.shard_group.all_gather(rank_.device.stream(Lane::all_gather), shard, flat);
      if (!shard.overlaps(unit->master)) whole.push_back(shard);  // kept until the synchronize below
    }
    tasks().flat_parameter->point_views(unit->layout, flat, &Parameter::value);
    whole.push_back(flat);
  }
  device.synchronize();
  body();
  for (FsdpUnit* unit : unit_ptrs_) tasks().flat_parameter->point_views(unit->layout, unit->full, &Parameter::value);
}

}  // namespace fsdplab
