// Task 9's checks: CpuOffloadTask (engine/fsdp/cpu_offload_task.hpp, labs/09-cpu-offload).
// Each method is called on one sim device with the tensors the unit lifecycle hands it, behind work
// already running on the other streams (1 ms ops that touch no memory, so the order is read from the virtual
// clock and named in the diagnostic rather than left to the race detector): the copy up is one
// copy_to_device on the memcpy stream, after the earlier gathers and waiting for no other stream, before the gather
// that reads it, with no host wait (a host sync in the copy path stops the host running ahead: "`.cpu()` breaks
// prefetch"); the copy back is one copy_to_host on the memcpy stream after the reduction and waiting for nothing else
// (a gather in flight); the host waits for `landed`, and for nothing else. Then two offloaded trainings against the
// single-rank baseline, ASYNC and SYNC (SYNC's reuse of staging blocks is where a copy racing an earlier gather shows).

#include <set>

#include "grader/check_catalog.hpp"
#include "grader/diagnostic_text.hpp"
#include "grader/graded_run.hpp"
#include "grader/rank_harness.hpp"

namespace fsdplab::grading {
namespace {

// Beside the reference: the copies on the memcpy lanes (task 9 reports no events to break at).
constexpr const char* kShow = "fsdplab gui --model gpt2 --world 2 --offload {impl} --compare impl";
// The graded code under SYNC alone: a copy up that does not wait for the earlier gathers races only there, where
// staging blocks are handed out again at once (the timeline marks the race).
constexpr const char* kShowSync = "fsdplab gui --model gpt2 --world 2 --offload {impl} --compare sync";
constexpr std::int64_t kShard = 64;           // elements of the unit's shard
constexpr SimTime kRunning = 1'000'000;       // 1 ms: the work already issued when the graded method runs

const CpuOffloadTask& graded(const CheckContext& c) { return *c.tasks.cpu_offload; }

Check make(std::string id, std::string title, int points, std::function<CheckOutcome(const CheckContext&)> run,
           std::string show = kShow) {
  return {9, std::move(id), std::move(title), points, std::move(show), std::move(run)};
}

std::vector<float> shard_values() {
  std::vector<float> v;
  for (std::int64_t i = 0; i < kShard; ++i) v.push_back(static_cast<float>(i % 11) / 4 - 1);
  return v;
}

// "'copy_to_device x' on the memcpy stream [0.001 ms, 0.002 ms]"
std::string op_text(const OpRecord& op) {
  return "'" + op.name + "' on the " + std::string(lane_name(op.lane)) + " stream [" + ms(op.begin) + ", " +
         ms(op.end) + "]";
}

// "the compute and the reduce_scatter": `lanes` as a diagnostic names streams.
std::string streams_text(const std::set<Lane>& lanes) {
  std::string text;
  for (const Lane lane : lanes) text += (text.empty() ? "the " : " and the ") + std::string(lane_name(lane));
  return text;
}

// The first issued op whose name starts with `name`, or null.
const OpRecord* find_op(const std::vector<OpRecord>& ops, std::string_view name) {
  for (const OpRecord& op : ops)
    if (op.name.starts_with(name)) return &op;
  return nullptr;
}

// ---- copy_shard_to_device --------------------------------------------------------------------------

// One copy_shard_to_device call, issued while the previous unit's gather runs (1 ms) and the unit computing now and a
// reduction run on the compute and reduce-scatter streams (2 ms, past the gather's end: a copy that waits for them
// starts late, and its dependencies name them), followed by this unit's gather on the all-gather stream.
struct CopyUp {
  std::vector<OpRecord> issued, next_work;  // next_work: on the compute and reduce-scatter streams, after the gather
  std::vector<OpRecord> running;            // on the compute and reduce-scatter streams, before the call
  OpRecord earlier_gather, gather;
  SimTime host_before = 0, host_after = 0;
  std::vector<float> sent, arrived;
};

CopyUp observe_copy_up(const CheckContext& c) {
  auto device = make_graded_device(0);
  CopyUp out;
  out.sent = shard_values();
  const Tensor host_shard =
      Tensor::empty(*device, {kShard}, DType::f32, MemTag::param_shard, "transformer.h.1.flat_param_shard", Lane::host);
  host_shard.copy_from(out.sent);
  const Tensor device_copy = Tensor::empty(*device, {kShard}, DType::f32, MemTag::comm_buffer,
                                           "transformer.h.1.flat_param_shard_device", Lane::memcpy);
  out.earlier_gather = busy_op(*device, Lane::all_gather, OpCategory::all_gather,
                               "all_gather transformer.h.0.flat_param_full (earlier)", kRunning);
  out.running = {
      busy_op(*device, Lane::compute, OpCategory::compute, "matmul transformer.h.0 (computing now)", 2 * kRunning),
      busy_op(*device, Lane::reduce_scatter, OpCategory::compute, "work on the reduce-scatter stream", 2 * kRunning)};
  const std::size_t first = device->ops().size();
  out.host_before = device->host_time();
  graded(c).copy_shard_to_device(*device, host_shard, device_copy);
  out.host_after = device->host_time();
  out.issued = ops_since(*device, first);
  out.gather = busy_op(*device, Lane::all_gather, OpCategory::all_gather,
                       "all_gather transformer.h.1.flat_param_full (reads the copy)", 10'000);
  for (const Lane lane : {Lane::compute, Lane::reduce_scatter})
    out.next_work.push_back(busy_op(*device, lane, OpCategory::compute, "work issued next", 10'000));
  device->synchronize();
  out.arrived = device_copy.to_vector();
  return out;
}

CheckOutcome check_copy_up(const CheckContext& c) {
  const CopyUp s = observe_copy_up(c);
  const std::string expected = "one copy_to_device of host_shard into device_copy, on the memcpy stream";
  const OpRecord* copy = find_op(s.issued, "copy_to_device");
  if (!copy)
    return CheckOutcome::fail(
        expected,
        s.issued.empty()
            ? "no op issued"
            : std::to_string(s.issued.size()) + " op(s), none a copy_to_device: " + op_text(s.issued.front()),
        "the shard never reaches the device: the gather would read whatever device_copy held (copy_to_device(stream, "
        "host, device_dst) copies up, copy_to_host the other way)");
  if (s.issued.size() != 1)
    return CheckOutcome::fail(expected,
                              std::to_string(s.issued.size()) + " ops issued, the first " + op_text(s.issued.front()),
                              "one copy_to_device(memcpy stream, host_shard, device_copy) does it");
  if (copy->lane != Lane::memcpy)
    return CheckOutcome::fail(
        expected, op_text(*copy),
        "the copy on another stream than the memcpy stream, whose lane the dashboard then shows empty: on the "
        "all_gather stream a copy waits for every gather issued before it and can no longer run under the previous "
        "one (the step may still be no slower where the copies are short: the contract is the stream)");
  if (s.arrived != s.sent)
    return CheckOutcome::fail(expected, "device_copy does not hold host_shard after the copy",
                              "the copy between other tensors");
  return CheckOutcome::pass();
}

CheckOutcome check_copy_up_order(const CheckContext& c) {
  const CopyUp s = observe_copy_up(c);
  const std::string expected = "the copy starts after the all-gather stream's earlier work (" +
                               op_text(s.earlier_gather) +
                               ") and waits for no other stream's, the next gather waits for the copy, and no other "
                               "stream does; events only";
  const OpRecord* copy = find_op(s.issued, "copy_to_device");
  if (!copy)
    return CheckOutcome::fail(expected, "no copy_to_device issued",
                              "copy_shard_to_device copies nothing: there is no order to check");
  std::vector<std::pair<std::string, std::string>> failed;
  if (copy->begin < s.earlier_gather.end)
    failed.emplace_back(
        "the copy " + op_text(*copy) + " starts before the earlier gather ends at " + ms(s.earlier_gather.end),
        "the copy not ordered after the all-gather stream's earlier work: device_copy may be a block an earlier "
        "gather still reads (record on all_gather, wait on memcpy, before the copy: device.wait_stream(Lane::memcpy, "
        "Lane::all_gather), the waiting stream first; SYNC shows it as a race)");
  // An event wait, read from the gather's dependencies (the earlier gather may end after the copy anyway). A copy on
  // the all-gather stream itself is ordered by stream order (the copy-up check names that stream), one the host waited
  // for by the host (copy-up-no-host-wait names that).
  if (copy->lane != s.gather.lane && s.host_after < copy->end && !waited_for(s.gather, copy->id))
    failed.emplace_back(
        "the gather " + op_text(s.gather) + " is not ordered after the copy by an event (the copy ends at " +
            ms(copy->end) + ")",
        "the all-gather stream not made to wait for the copy: the gather may read the shard half copied "
        "(record on memcpy after the copy, wait on all_gather: device.wait_stream(Lane::all_gather, Lane::memcpy))");
  std::set<Lane> waiting;
  for (const OpRecord& next : s.next_work)
    if (waited_for(next, copy->id)) waiting.insert(next.lane);
  if (!waiting.empty())
    failed.emplace_back(
        streams_text(waiting) + " stream made to wait for the copy",
        "a stream other than the all-gather stream made to wait for the copy up (\"to be safe\"): only the gather "
        "reads device_copy; on compute the unit computing now waits for the next unit's copy, so the copies no "
        "longer hide under compute (GPT-2 124M, W = 2, --offload: 68.254 against 63.499 ms a step)");
  if (const std::set<Lane> lanes = lanes_waited_for(*copy, s.running); !lanes.empty()) {
    failed.emplace_back(
        "the copy " + op_text(*copy) + " waits for " + streams_text(lanes) + " stream's work",
        "the copy up made to wait for a stream other than the all-gather stream (\"to be safe\"): device_copy is a "
        "block only gathers read, so only the all-gather stream's earlier work must end first; " +
            std::string(lanes.contains(Lane::compute)
                            ? "waiting for compute, the copy and the gather behind it no longer run under the unit "
                              "computing now (GPT-2 124M, W = 2, --offload: 66.396 against 63.499 ms a step)"
                            : "waiting for the reductions, each copy up queues behind those issued before it (no "
                              "slower on the sim's one link, where gathers and reductions take turns anyway: the "
                              "contract is what the copy reads)"));
  }
  return CheckOutcome::from_parts(expected, failed, 4);
}

CheckOutcome check_copy_up_no_host_wait(const CheckContext& c) {
  const CopyUp s = observe_copy_up(c);
  if (s.host_after < s.earlier_gather.end) return CheckOutcome::pass();
  return CheckOutcome::fail(
      "the host back from copy_shard_to_device at once (events only), well before the earlier gather ends at " +
          ms(s.earlier_gather.end),
      "the host clock went from " + ms(s.host_before) + " to " + ms(s.host_after) + " inside copy_shard_to_device",
      "a host sync in the copy path (synchronize): the host stops running ahead of the device at every "
      "gather, so nothing is prefetched (the lecture's \".cpu() breaks implicit prefetch\")");
}

// ---- copy_grad_to_host -----------------------------------------------------------------------------

// One copy_grad_to_host call, issued while the reduction that writes device_grad runs (1 ms) and a prefetch's gather
// runs on the all-gather stream (2 ms), then the work the backward issues next on the other streams: none of it needs
// the copy back, so each starts as early as its stream allows (all but the reduction of category compute, which takes
// no link: only a stream wait delays them).
struct CopyBack {
  std::vector<OpRecord> issued, next_work;
  OpRecord reduction, prefetch;
  SimTime host_before = 0, host_after = 0;
  std::vector<float> sent, landed;
};

CopyBack observe_copy_back(const CheckContext& c) {
  auto device = make_graded_device(0);
  CopyBack out;
  out.sent = shard_values();
  const Tensor device_grad = Tensor::empty(*device, {kShard}, DType::f32, MemTag::comm_buffer,
                                           "transformer.h.1.flat_grad_shard_device", Lane::reduce_scatter);
  device_grad.copy_from(out.sent);
  const Tensor host_grad =
      Tensor::empty(*device, {kShard}, DType::f32, MemTag::grad_shard, "transformer.h.1.flat_grad_shard", Lane::host);
  out.reduction = busy_op(*device, Lane::reduce_scatter, OpCategory::reduce_scatter,
                          "reduce_scatter transformer.h.1.flat_grad_shard_device", kRunning);
  out.prefetch = busy_op(*device, Lane::all_gather, OpCategory::compute,
                         "all_gather transformer.h.0.flat_param_full (a prefetch)", 2 * kRunning);
  const std::size_t first = device->ops().size();
  out.host_before = device->host_time();
  graded(c).copy_grad_to_host(*device, device_grad, host_grad);
  out.host_after = device->host_time();
  out.issued = ops_since(*device, first);
  out.next_work = {
      busy_op(*device, Lane::reduce_scatter, OpCategory::reduce_scatter,
              "reduce_scatter transformer.h.0.flat_grad_shard_device (the next unit's reduction)", 10'000),
      busy_op(*device, Lane::compute, OpCategory::compute, "matmul transformer.h.0 (the backward goes on)", 10'000),
      busy_op(*device, Lane::all_gather, OpCategory::compute, "work on the all-gather stream", 10'000)};
  device->synchronize();
  out.landed = host_grad.to_vector();
  return out;
}

CheckOutcome check_copy_back(const CheckContext& c) {
  const CopyBack s = observe_copy_back(c);
  const std::string expected =
      "one copy_to_host of device_grad into host_grad, on the memcpy stream, starting after the reduction (" +
      op_text(s.reduction) +
      ") and not waiting for the gather in flight, no other stream and not the host waiting for it";
  const OpRecord* copy = find_op(s.issued, "copy_to_host");
  if (!copy)
    return CheckOutcome::fail(
        expected, s.issued.empty() ? "no op issued" : std::to_string(s.issued.size()) + " op(s), none a copy_to_host",
        "the reduced gradient never reaches the host: the CPU step would read a stale grad_shard");
  if (s.issued.size() != 1 || s.landed != s.sent)
    return CheckOutcome::fail(expected,
                              std::to_string(s.issued.size()) + " op(s) issued, and host_grad " +
                                  (s.landed == s.sent ? "holds" : "does not hold") + " device_grad after them",
                              "one copy_to_host(memcpy stream, device_grad, host_grad) does it");
  std::vector<std::pair<std::string, std::string>> failed;
  if (copy->lane != Lane::memcpy)
    failed.emplace_back(
        op_text(*copy),
        "the copy back on another stream than memcpy: the engine records `landed` on the memcpy stream, so "
        "it covers neither the copy (the CPU optimizer may read the shard before it lands) nor, without the "
        "memcpy stream's wait, the reduction (the gradient buffers are reused too early)");
  if (copy->begin < s.reduction.end)
    failed.emplace_back(
        "the copy " + op_text(*copy) + " starts before the reduction ends at " + ms(s.reduction.end),
        "the copy back does not wait for the reduction: it reads the gradient shard half reduced (record on "
        "reduce_scatter, wait on memcpy, before the copy)");
  if (waited_for(*copy, s.prefetch.id))
    failed.emplace_back(
        "the copy " + op_text(*copy) + " waits for " + op_text(s.prefetch),
        "the copy back made to wait for the all-gather stream (the copy up's wait, pasted): it reads device_grad, "
        "which only the reduction writes, and each gradient then reaches the CPU optimizer only after every "
        "prefetch issued before it (no slower on the sim's one link, where gathers and reductions take turns anyway: "
        "the contract is what the copy reads)");
  if (s.host_after >= s.reduction.end)
    failed.emplace_back(
        "the host clock went from " + ms(s.host_before) + " to " + ms(s.host_after) + " inside copy_grad_to_host",
        "a host wait in the copy back: an event orders the copy after the reduction, and the host goes on "
        "with the backward");
  // An event wait, read from the later work's dependencies: work that merely starts later (behind the copy on its
  // own stream, or issued late by a host wait) is not waiting for it.
  std::string waited;
  for (const OpRecord& next : s.next_work)
    if (waited_for(next, copy->id)) waited += (waited.empty() ? "" : ", ") + op_text(next);
  if (!waited.empty())
    failed.emplace_back(
        "the copy " + op_text(*copy) + " is waited for by the work issued after it: " + waited,
        "another stream made to wait for the copy back (a wait_stream or an event wait after the copy): nothing on "
        "the device reads host_grad, and the stream's later work (the next units' reductions, on the reduce-scatter "
        "stream) queues behind every copy; only the host waits for it, in wait_for_grad_on_host (wait_stream's first "
        "argument is the stream that waits)");
  return CheckOutcome::from_parts(expected, failed, 5);
}

// ---- wait_for_grad_on_host -------------------------------------------------------------------------

CheckOutcome check_host_wait(const CheckContext& c) {
  auto device = make_graded_device(0);
  const OpRecord copy =
      busy_op(*device, Lane::memcpy, OpCategory::memcpy, "copy_to_host transformer.h.1.flat_grad_shard", kRunning);
  Event landed("transformer.h.1.reduced");
  device->record(landed, Lane::memcpy);
  // Work issued after `landed` on the same stream, as a prefetch's copy up is: a wait for the whole stream waits for
  // it too.
  const OpRecord later_copy =
      busy_op(*device, Lane::memcpy, OpCategory::memcpy,
              "copy_to_device transformer.h.0.flat_param_shard (a prefetch's copy up)", 2 * kRunning);
  const OpRecord unrelated = busy_op(*device, Lane::all_gather, OpCategory::all_gather,
                                     "all_gather (root).flat_param_full (the next forward's prefetch)", 5 * kRunning);
  const std::size_t first = device->ops().size();
  const SimTime host_before = device->host_time();
  graded(c).wait_for_grad_on_host(*device, landed);
  const SimTime host_after = device->host_time();
  const std::vector<OpRecord> issued = ops_since(*device, first);
  const std::string expected = "the host waits until `landed` (the copy " + op_text(copy) + ", done at " +
                               ms(landed.time()) + ") and no longer: not for " + op_text(later_copy) + ", nor for " +
                               op_text(unrelated);
  const std::string moved =
      "the host clock went from " + ms(host_before) + " to " + ms(host_after) + " in wait_for_grad_on_host";
  if (!issued.empty())
    return CheckOutcome::fail(expected,
                              std::to_string(issued.size()) + " op(s) issued, the first " + op_text(issued.front()),
                              "a host wait issues no work: device.synchronize(landed)");
  if (host_after < landed.time())
    return CheckOutcome::fail(
        expected, moved + ", before the copy lands",
        "the host did not wait until `landed`: device.synchronize(landed) (a sync of a stream the copy is not on "
        "waits for other work); without it the CPU optimizer reads a gradient shard still in flight (the race "
        "detector stops a training at the step)");
  if (host_after >= unrelated.end)
    return CheckOutcome::fail(
        expected, moved + ": it waited for the all-gather stream too",
        "the whole device (or another stream) synchronized instead of the event: the host waits for "
        "work that has nothing to do with this unit's gradient; wait for `landed` only",
        0.5);
  if (host_after >= later_copy.end)
    return CheckOutcome::fail(
        expected, moved + ": it waited for the memcpy stream's later copy too",
        "the memcpy stream synchronized instead of the event: the host also waits for the copies issued after this "
        "one (the next units' copies up), so it stops running ahead; wait for `landed` only",
        0.5);
  return CheckOutcome::pass();
}

GradeCase offload_case(bool sync) {
  GradeCase c = small_gpt2(2);
  c.options.offload = true;
  if (sync) c.options = sync_schedule(c.options);
  return c;
}

}  // namespace

std::vector<Check> cpu_offload_checks() {
  const DifferenceCause direct_mistake = first_failing_cause(
      {check_copy_up, check_copy_up_order, check_copy_up_no_host_wait, check_copy_back, check_host_wait});
  return {
      make("copy-up", "copy_shard_to_device: one copy_to_device of the shard, on the memcpy stream", 2, check_copy_up),
      make("copy-up-order",
           "the copy up after the earlier gathers only, the gather after the copy, nothing else waiting for it (op "
           "graph)",
           2, check_copy_up_order, kShowSync),
      make("copy-up-no-host-wait", "no host wait in copy_shard_to_device (the host clock)", 2,
           check_copy_up_no_host_wait),
      make("copy-back",
           "copy_grad_to_host: one copy_to_host on the memcpy stream after the reduction only, nothing waiting for it",
           2, check_copy_back),
      make("host-wait", "wait_for_grad_on_host: the host waits for `landed`, and for nothing else", 2, check_host_wait),
      equivalence_check(9, "training-offload",
                        "gpt2 test-tiny, --offload on 2 ranks (ASYNC): equal to the single-rank baseline", 2,
                        offload_case(false),
                        "a copy or the CPU step not ordered after what it reads: a missing event wait, or no host wait "
                        "before the CPU step",
                        direct_mistake),
      equivalence_check(9, "training-offload-sync",
                        "gpt2 test-tiny, --offload --mode sync on 2 ranks: equal to the baseline", 1,
                        offload_case(true),
                        "a copy or the CPU step not ordered after what it reads; under SYNC staging blocks are "
                        "reused at once, so a copy up not ordered after the earlier gathers overwrites a block a "
                        "gather still reads",
                        direct_mistake),
  };
}

}  // namespace fsdplab::grading
