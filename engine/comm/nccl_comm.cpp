#include "engine/comm/nccl_comm.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <exception>

#include "engine/comm/collective_checks.hpp"
#include "engine/comm/local_comm.hpp"
#include "engine/runtime/error.hpp"

#if FSDPLAB_HAVE_NCCL
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include "engine/cuda/comm_kernels.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cuda_device.hpp"
#endif

namespace fsdplab {

#if FSDPLAB_HAVE_NCCL

std::optional<std::string> nccl_unavailable() { return std::nullopt; }

namespace {

using Clock = std::chrono::steady_clock;
using cuda::check_cuda;

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
  }
  fail("NCCL: no type for dtype ", static_cast<int>(dtype), "; expected f32, bf16 or i32");
}

// NCCL's error and its last message. The message is the process's, not the communicator's (NCCL keeps one,
// and reads no argument): with several ranks in one process it may be another rank's, so it is said so.
std::string nccl_reason(ncclResult_t result) {
  std::string reason = ncclGetErrorString(result);
  const char* last = ncclGetLastError(nullptr);
  if (last && *last) reason += std::string(" (NCCL's last message, possibly another rank's: ") + last + ")";
  return reason;
}

// How long a join or a split may take before its rank gives up on it: a collective's timeout is about the
// pace of training, but NCCL's setup of a communicator (its topology search, its buffers, NVLink SHARP on
// several GPUs) can take seconds on its own, and longer under a tool that slows the GPU down.
constexpr std::chrono::milliseconds kMinSetupTimeout{60'000};

// [Note: aborting several communicators]
// A process holds several communicators (the world, a shard group, a replica group), and their kernels may
// wait on each other: one rank's all-gather kernel on the world spins for a peer that is itself stuck in a
// kernel of another group. ncclCommAbort frees the communicator's memory, and cudaFree waits for every kernel
// on the GPU, including the other communicators' that only their own abort would stop: aborting them one after
// the other can hang in the first (NCCL issues 549 and 1013). NCCL 2.28's ncclCommRevoke stops a
// communicator's kernels without freeing anything, so every communicator is revoked first and then aborted.
// With an older NCCL (the GPU machine's own library may be one) the symbol is absent and the aborts go alone.
// Only a communicator with no call in progress is revoked (Handle::revoke_locked), and its abort waits for the
// revoke to finish. Returns whether the revoke started (false: no ncclCommRevoke here, or NCCL refused it).
bool revoke_in_flight(ncclComm_t comm) {
  using Revoke = ncclResult_t (*)(ncclComm_t, int);
  static const auto revoke = reinterpret_cast<Revoke>(dlsym(RTLD_DEFAULT, "ncclCommRevoke"));
  if (!revoke) return false;
  const ncclResult_t result = revoke(comm, 0);  // NCCL_REVOKE_DEFAULT
  return result == ncclSuccess || result == ncclInProgress;
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // Non-blocking: joining and splitting return at once, so a rank whose peer died never sits inside NCCL
  // where nobody could abort it.
  config.blocking = 0;
  return config;
}

}  // namespace

NcclId make_nccl_id() {
  ncclUniqueId id;
  const ncclResult_t result = ncclGetUniqueId(&id);
  if (result != ncclSuccess) fail("ncclGetUniqueId failed: ", nccl_reason(result));
  NcclId out;
  static_assert(sizeof id == sizeof out.bytes);
  std::memcpy(out.bytes.data(), &id, sizeof id);
  return out;
}

// [Note: a non-blocking communicator's state]
// With config.blocking = 0 a call returns at once: ncclInProgress, or even ncclSuccess, says only that NCCL
// took it. Whether it is done is the communicator's state, read by ncclCommGetAsyncError: ncclInProgress
// while the join, split, enqueue or finalize goes on, then its result. A split writes the new communicator
// through its output pointer when it completes, possibly after ncclCommSplit returned, and the new
// communicator must not be read (its size, its rank) before its own state has settled: on an H100 reading it
// at once failed, and on an H200 a pointer read right after the call was still null. So every call, whatever
// it answered, is followed by polling the state of the communicator it concerns until it is not in progress
// (Handle::settle).
// One thread at a time may operate a communicator (NCCL's thread-safety rule), and reading the state is an
// operation: it completes the group job a finished call left attached to the communicator, and two threads
// reading at once could both complete it. So each read holds the handle's mutex, as the watchdog's reads
// and an abort do, and a handle aborted meanwhile is never read again (ncclCommAbort freed it). The mutex is
// let go between reads, so the watchdog can abort a rank that waits.
struct NcclComm::Handle {
  ncclComm_t comm = nullptr;
  int gpu = 0;
  std::chrono::milliseconds timeout{0};  // how long a collective, and the teardown, may stay in progress
  cudaStream_t barrier_stream = nullptr;
  void* barrier_value = nullptr;  // one float on the GPU (cudaMalloc: the ledger is the device's, this is NCCL's)
  bool aborted = false;
  bool revoked = false;  // its kernels stopped; its abort follows (NcclAbortGroup), no call may come between
  struct InFlight {
    std::string what;  // "rank R: NCCL all_gather #N of B bytes", as errors name it
    cudaEvent_t done = nullptr;
    Clock::time_point issued;
  };
  std::deque<InFlight> in_flight;
  std::mutex mutex;  // the NCCL handle's users: the rank's thread, the watchdog, an abort

  // The barrier's stream and one float on the GPU, for a communicator just joined or split off.
  void make_barrier(const std::string& what) {
    check_cuda(cudaStreamCreateWithFlags(&barrier_stream, cudaStreamNonBlocking), what, ": NCCL's barrier stream");
    check_cuda(cudaMalloc(&barrier_value, sizeof(float)), what, ": NCCL's barrier buffer");
    check_cuda(cudaMemsetAsync(barrier_value, 0, sizeof(float), barrier_stream), what, ": NCCL's barrier buffer");
  }

  // Stops the communicator's kernels without freeing it, before every communicator is aborted ([Note:
  // aborting several communicators]); the caller holds `mutex`. Only one with no call in progress: reading its
  // state completes the call it finished, while a revoke of one whose call still runs (an enqueue waiting for
  // a peer to connect, a split) would leave that call's job to be freed a second time by the abort (NCCL 2.28's
  // ncclCommEnsureReady). Such a communicator is aborted alone, which ends its call once.
  void revoke_locked() {
    if (aborted || revoked || !comm) return;
    ncclResult_t state = ncclInProgress;
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess || state != ncclSuccess) return;
    revoked = revoke_in_flight(comm);
  }

  // Frees the communicator and aborts whatever of it still runs; once only (the caller holds `mutex`, or is
  // the only user left). A revoke runs on as a call of its own, which waits for the work already on the
  // communicator's streams: it is let finish first (until `revoke_deadline`; a group aborting several
  // communicators gives them one deadline together), or the abort would free the communicator under it.
  void abort_locked(std::optional<Clock::time_point> revoke_deadline = std::nullopt) {
    if (aborted || !comm) return;
    if (revoked) {
      const Clock::time_point deadline = revoke_deadline.value_or(Clock::now() + setup_limit());
      settled(ncclInProgress, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    }
    ncclCommAbort(comm);
    aborted = true;
  }

  // Polls the communicator's state after a call that answered `result` until it is not in progress
  // ([Note: a non-blocking communicator's state]); fails with `what` if the call failed, the group was
  // stopped, or `limit` passed. Time while the run holds a rank (a step-through pause) does not count. Past
  // the limit a communicator the group knows (`registered`: a collective's, a split's parent) stops the whole
  // group, revoked first like any ([Note: aborting several communicators]), and the peers fail naming this
  // call; one not registered yet (a join, a split's child, which nothing else can reach) is aborted alone.
  void settle(ncclResult_t result, NcclAbortGroup& aborts, const std::string& what, std::chrono::milliseconds limit,
              bool registered) {
    auto start = Clock::now();
    while (result == ncclSuccess || result == ncclInProgress) {
      if (auto failure = aborts.failure()) fail_as<PeerFailed>(what, ": stopped, ", *failure);
      if (aborts.held()) start = Clock::now();
      bool overdue = false;
      {
        std::lock_guard lock(mutex);
        if (aborted || revoked) fail_as<PeerFailed>(what, ": stopped, NCCL was aborted");
        ncclResult_t state = ncclSuccess;
        const ncclResult_t read = ncclCommGetAsyncError(comm, &state);
        if (read != ncclSuccess) fail(what, ": cannot read the communicator's state: ", nccl_reason(read));
        if (state != ncclInProgress) {
          result = state;
          break;
        }
        overdue = Clock::now() - start > limit;
        if (overdue && !registered) {
          abort_locked();
          fail(what, ": no answer after ", limit.count(), " ms (a peer never joined)");
        }
      }
      if (overdue) {  // the handle's lock let go: the group takes it to revoke and abort
        const std::string reason = what + ": no answer after " + std::to_string(limit.count()) +
                                   " ms (a peer never reached it, or stalls)";
        aborts.give_up(reason);
        // Another rank's failure may have come first: that one is the cause.
        if (auto first = aborts.failure(); first && *first != reason) fail_as<PeerFailed>(what, ": stopped, ", *first);
        fail(reason);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    if (result != ncclSuccess) fail(what, " failed: ", nccl_reason(result));
  }

  // The communicator's state once nothing is in progress, waiting up to `limit` (ncclInProgress if it never
  // settles); `state` is what the last call answered.
  ncclResult_t settled(ncclResult_t state, std::chrono::milliseconds limit) const {
    const auto start = Clock::now();
    while (state == ncclInProgress && Clock::now() - start < limit) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    }
    return state;
  }

  // How long a join or split may stay in progress.
  std::chrono::milliseconds setup_limit() const { return std::max(timeout, kMinSetupTimeout); }

  // Watched until the work enqueued so far on `stream` completes: a collective a peer never joins is found by
  // the watchdog (NcclComm::overdue).
  void watch_until_done(cudaStream_t stream, const std::string& what) {
    InFlight flight{what, nullptr, Clock::now()};
    check_cuda(cudaEventCreateWithFlags(&flight.done, cudaEventDisableTiming), what);
    const cudaError_t recorded = cudaEventRecord(flight.done, stream);
    if (recorded != cudaSuccess) cudaEventDestroy(flight.done);
    check_cuda(recorded, what);
    std::lock_guard lock(mutex);
    in_flight.push_back(flight);
  }

  ~Handle() {
    end_communicator();
    // Only now: cudaFree may wait for the whole device, which a kernel of a communicator still alive could
    // hold forever.
    for (InFlight& f : in_flight) cudaEventDestroy(f.done);
    if (barrier_value) cudaFree(barrier_value);
    if (barrier_stream) cudaStreamDestroy(barrier_stream);
  }

  // No other thread uses the handle now (its NcclComm left the watchdog's group). A healthy communicator ends
  // cleanly: finalize flushes every collective issued, answering ncclInProgress on a non-blocking one until
  // it has, then destroy frees it. One in error, one whose finalize does not settle, and one still in the
  // middle of a call (a join or split its rank gave up on, which will not finish) are aborted instead.
  void end_communicator() {
    if (!comm || aborted) return;
    if (revoked) {
      abort_locked();
      return;
    }
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclInternalError;
    if (state == ncclSuccess) state = settled(ncclCommFinalize(comm), timeout);
    if (state == ncclSuccess) {
      ncclCommDestroy(comm);
    } else {
      abort_locked();
    }
  }
};

// ---- NcclAbortGroup -------------------------------------------------------------------------------

NcclAbortGroup::NcclAbortGroup(std::chrono::milliseconds timeout, std::function<void(const std::string&)> on_failure,
                               std::function<bool()> hold)
    : timeout_(timeout), on_failure_(std::move(on_failure)), hold_(std::move(hold)), watchdog_([this] { watch(); }) {}

NcclAbortGroup::~NcclAbortGroup() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  watchdog_.join();
}

void NcclAbortGroup::add(NcclComm* comm) {
  std::lock_guard lock(mutex_);
  comms_.push_back(comm);
}

void NcclAbortGroup::remove(NcclComm* comm) {
  std::lock_guard lock(mutex_);
  comms_.erase(std::remove(comms_.begin(), comms_.end(), comm), comms_.end());
}

std::optional<std::string> NcclAbortGroup::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

void NcclAbortGroup::abort(int rank, const std::string& reason) {
  give_up(rank_failed_text(rank, reason));  // the rank named once, as LocalComm's failures name it
}

void NcclAbortGroup::give_up(const std::string& reason) {
  // Processes: the MPI world ends first (on_failure_ need not return), whatever an abort might wait for.
  if (!failure()) report(reason);
  std::lock_guard lock(mutex_);
  abort_locked(reason);
}

bool NcclAbortGroup::held() const { return hold_ && hold_(); }

void NcclAbortGroup::report(const std::string& reason) {
  if (on_failure_ && !reported_.exchange(true)) on_failure_(reason);
}

void NcclAbortGroup::stop_device(const Device& device) {
  // Processes: the rank's own failure ends the MPI world (rank_launch.cpp), and every kernel with it; an abort
  // here could only keep it from getting there.
  if (on_failure_) return;
  std::lock_guard lock(mutex_);
  stop_locked(&device);
}

void NcclAbortGroup::abort_locked(const std::string& reason) {
  if (failure_) return;
  failure_ = reason;
  stop_locked(nullptr);
}

void NcclAbortGroup::stop_locked(const Device* only) {
  const auto stops = [&](const NcclComm* comm) { return only == nullptr || &comm->device_ == only; };
  // Every communicator's kernels stopped before any is freed: see [Note: aborting several communicators].
  for (NcclComm* comm : comms_)
    if (stops(comm)) comm->revoke_nccl();
  // One deadline for every revoke to finish: they run at once.
  const auto deadline = Clock::now() + std::max(timeout_, kMinSetupTimeout);
  for (NcclComm* comm : comms_)
    if (stops(comm)) comm->abort_nccl(deadline);
}

void NcclAbortGroup::watch() {
  // Every 100 ms: NCCL's asynchronous errors, and collectives that never complete (a peer that stalls
  // or died before joining them), as PyTorch's NCCL watchdog does. While the run holds a rank, the
  // collectives' clocks start again: a peer paused in step-through is not a peer that stalls.
  for (;;) {
    std::optional<std::string> failed;
    {
      std::unique_lock lock(mutex_);
      if (stopping_) return;
      if (!failure_) {
        const bool holding = held();
        for (NcclComm* comm : comms_) {
          if (!failed) failed = comm->async_error();
          if (holding) {
            comm->restart_watch();
          } else if (!failed) {
            failed = comm->overdue(timeout_);
          }
        }
      }
    }
    if (failed) give_up(*failed);  // without the lock: on_failure_ (processes) comes before the aborts
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// ---- NcclComm -------------------------------------------------------------------------------------

NcclComm::NcclComm(const NcclId& id, int world, int rank, Device& device, NcclAbortGroup& aborts)
    : handle_(std::make_unique<Handle>()), world_(world), rank_(rank), device_(device), aborts_(aborts) {
  auto* gpu_device = dynamic_cast<CudaDevice*>(&device);
  check(gpu_device, "--comm nccl moves data between GPUs: rank ", rank, " is on the ",
        device.kind() == DeviceKind::sim ? "sim" : "cuda",
        " device; use --device cuda (or --comm local / mpi on the sim device)");
  check(world >= 1 && rank >= 0 && rank < world, "NcclComm: rank ", rank, " of a world of ", world,
        "; expected a world of at least 1 and 0 <= rank < world");
  handle_->gpu = gpu_device->gpu();
  check_cuda(cudaSetDevice(handle_->gpu), "rank ", rank, ": selecting GPU ", handle_->gpu, " for NCCL");
  ncclUniqueId unique;
  std::memcpy(&unique, id.bytes.data(), sizeof unique);
  ncclConfig_t config = nonblocking_config();
  const std::string what = "rank " + std::to_string(rank) + ": joining NCCL (" + std::to_string(world) +
                           " ranks) on GPU " + std::to_string(handle_->gpu);
  handle_->timeout = aborts.timeout_;
  const ncclResult_t joined = ncclCommInitRankConfig(&handle_->comm, world, unique, rank, &config);
  if (!handle_->comm) fail(what, " failed: ", nccl_reason(joined));
  handle_->settle(joined, aborts, what, handle_->setup_limit(), false);
  handle_->make_barrier(what);
  aborts_.add(this);
}

NcclComm::NcclComm(std::unique_ptr<Handle> handle, int world, int rank, Device& device, NcclAbortGroup& aborts)
    : handle_(std::move(handle)), world_(world), rank_(rank), device_(device), aborts_(aborts) {
  aborts_.add(this);
}

// A failing rank (its exception unwinding) does not finalize its communicators: a finalize waits for the peers
// to finish the collectives this rank issued, up to the timeout for each communicator, and meanwhile the peers'
// watchdog would report their own wait as the failure instead of this rank's error. All of this rank's
// communicators are stopped at once instead (revoked first), and its error reaches the peers through the run
// (LocalWorld::abort in a thread, the MPI world's end in a process).
NcclComm::~NcclComm() {
  if (std::uncaught_exceptions() > 0) aborts_.stop_device(device_);
  aborts_.remove(this);
}

void NcclComm::revoke_nccl() {
  std::lock_guard lock(handle_->mutex);
  handle_->revoke_locked();
}

void NcclComm::abort_nccl(std::chrono::steady_clock::time_point revoke_deadline) {
  std::lock_guard lock(handle_->mutex);
  handle_->abort_locked(revoke_deadline);
}

std::optional<std::string> NcclComm::async_error() {
  std::lock_guard lock(handle_->mutex);
  if (handle_->aborted || !handle_->comm) return std::nullopt;
  ncclResult_t state = ncclSuccess;
  if (ncclCommGetAsyncError(handle_->comm, &state) != ncclSuccess || state == ncclSuccess || state == ncclInProgress)
    return std::nullopt;
  return "rank " + std::to_string(rank_) + ": NCCL reported an asynchronous error: " + nccl_reason(state);
}

void NcclComm::restart_watch() {
  std::lock_guard lock(handle_->mutex);
  const auto now = Clock::now();
  for (Handle::InFlight& flight : handle_->in_flight) flight.issued = now;
}

std::optional<std::string> NcclComm::overdue(std::chrono::milliseconds timeout) {
  std::lock_guard lock(handle_->mutex);
  auto& in_flight = handle_->in_flight;
  // The watchdog's thread queries events of every rank's GPU: on the communicator's own, or its first CUDA call
  // would make a context on GPU 0 in every process of an MPI launch.
  if (!in_flight.empty()) cudaSetDevice(handle_->gpu);
  while (!in_flight.empty()) {
    Handle::InFlight& oldest = in_flight.front();
    const cudaError_t state = cudaEventQuery(oldest.done);
    if (state == cudaErrorNotReady) {
      if (Clock::now() - oldest.issued < timeout) return std::nullopt;
      return oldest.what + " has not completed after " + std::to_string(timeout.count()) +
             " ms (a peer never joined it, or stalls)";
    }
    cudaEventDestroy(oldest.done);
    in_flight.pop_front();
    if (state != cudaSuccess)
      return "rank " + std::to_string(rank_) + ": " + "the GPU failed while running NCCL collectives: " +
             cudaGetErrorString(state);
  }
  return std::nullopt;
}

std::chrono::milliseconds NcclComm::enqueue_limit() const {
  return seq_ == 1 ? handle_->setup_limit() : handle_->timeout;  // seq_ counts this call already
}

void NcclComm::issue(const std::string& what, const std::function<int(void* nccl_comm)>& call,
                     std::chrono::milliseconds limit) {
  if (auto failure = aborts_.failure()) fail_as<PeerFailed>(what, ": NCCL was aborted: ", *failure);
  ncclResult_t result = ncclSuccess;
  {
    std::lock_guard lock(handle_->mutex);
    if (handle_->aborted || handle_->revoked) fail_as<PeerFailed>(what, ": NCCL was aborted");
    result = static_cast<ncclResult_t>(call(handle_->comm));
  }
  handle_->settle(result, aborts_, what, limit, true);
}

void NcclComm::collective(Stream stream, OpCategory category, const Tensor& output, std::int64_t bytes,
                          std::vector<Access> reads, std::vector<Access> writes,
                          const std::function<int(void* nccl_comm, CUstream_st* s)>& enqueue,
                          const std::function<void(CUstream_st* s)>& then) {
  check(stream.device == &device_, "collective on rank ", stream.device ? stream.device->rank() : -1,
        "'s stream through rank ", device_.rank(), "'s communicator");
  const std::string_view op = category_name(category);
  const std::string what = std::string(op) + " #" + std::to_string(++seq_) + " of " + std::to_string(bytes) + " bytes";
  OpSpec spec;
  spec.name = output.name().empty() ? std::string(op) : std::string(op) + " " + output.name();
  spec.category = category;
  spec.bytes_moved = bytes;
  spec.duration = device_.cost_model().collective(category, bytes, world_);
  spec.reads = std::move(reads);
  spec.writes = std::move(writes);
  device_.launch(stream.lane, std::move(spec), {.cuda = [&](CUstream_st* s) {
    const std::string named = "rank " + std::to_string(rank_) + ": NCCL " + what;
    issue(named, [&](void* comm) { return enqueue(comm, s); }, enqueue_limit());
    // Only once the call has settled is NCCL's work on the stream: what follows it goes after.
    if (then) then(s);
    handle_->watch_until_done(s, named);
  }});
}

void NcclComm::all_gather(Stream stream, const Tensor& shard, const Tensor& full) {
  check_all_gather(shard, full, world_, rank_, device_);
  collective(stream, OpCategory::all_gather, full, full.nbytes(), {shard.access()}, {full.access()},
             [&](void* comm, CUstream_st* s) {
               return ncclAllGather(shard.raw(), full.raw(), static_cast<std::size_t>(shard.numel()),
                                    nccl_type(shard.dtype()), static_cast<ncclComm_t>(comm), s);
             });
}

// [Note: averaging bf16 on NCCL]
// ncclAvg multiplies by 1/n in the data's own type: for bf16 that factor is rounded to 8 bits, and for a group
// of 3 it is 0.333984375, every averaged gradient 0.2% too large. The interface's average is the sum divided by
// the group size in f32 (communicator.hpp), so bf16 sums with ncclSum and then divides in f32, rounding once
// more (reduce_peers over the one buffer). f32 keeps ncclAvg, whose 1/n is off by one f32 rounding.
namespace {

bool divides_after_sum(ReduceOp op, DType dtype) { return op == ReduceOp::avg && dtype == DType::bf16; }

ncclRedOp_t nccl_op(ReduceOp op, DType dtype) {
  return op == ReduceOp::avg && !divides_after_sum(op, dtype) ? ncclAvg : ncclSum;
}

// The division of [Note: averaging bf16 on NCCL] where it applies, else nothing.
std::function<void(CUstream_st*)> divide_after_sum(ReduceOp op, const Tensor& t, int world) {
  if (!divides_after_sum(op, t.dtype())) return {};
  return [&t, world](CUstream_st* s) {
    const void* sum = t.raw();
    cuda::reduce_peers(s, t.dtype(), t.raw(), &sum, 1, t.numel(), world);
  };
}

}  // namespace

void NcclComm::reduce_scatter(Stream stream, const Tensor& full, const Tensor& shard, ReduceOp op) {
  check_reduce_scatter(full, shard, world_, rank_, device_);
  collective(
      stream, OpCategory::reduce_scatter, shard, full.nbytes(), {full.access()}, {shard.access()},
      [&](void* comm, CUstream_st* s) {
        return ncclReduceScatter(full.raw(), shard.raw(), static_cast<std::size_t>(shard.numel()),
                                 nccl_type(shard.dtype()), nccl_op(op, shard.dtype()), static_cast<ncclComm_t>(comm),
                                 s);
      },
      divide_after_sum(op, shard, world_));
}

void NcclComm::all_reduce(Stream stream, const Tensor& t, ReduceOp op) {
  check_all_reduce(t, device_);
  collective(
      stream, OpCategory::all_reduce, t, t.nbytes(), {t.access()}, {t.access()},
      [&](void* comm, CUstream_st* s) {
        return ncclAllReduce(t.raw(), t.raw(), static_cast<std::size_t>(t.numel()), nccl_type(t.dtype()),
                             nccl_op(op, t.dtype()), static_cast<ncclComm_t>(comm), s);
      },
      divide_after_sum(op, t, world_));
}

void NcclComm::broadcast(Stream stream, const Tensor& t, int root) {
  check_broadcast(t, root, world_, device_);
  std::vector<Access> reads, writes;
  (root == rank_ ? reads : writes).push_back(t.access());
  collective(stream, OpCategory::broadcast, t, t.nbytes(), reads, writes, [&](void* comm, CUstream_st* s) {
    return ncclBroadcast(t.raw(), t.raw(), static_cast<std::size_t>(t.numel()), nccl_type(t.dtype()), root,
                         static_cast<ncclComm_t>(comm), s);
  });
}

void NcclComm::barrier() {
  const std::string what = "rank " + std::to_string(rank_) + ": NCCL barrier #" + std::to_string(++seq_);
  issue(
      what,
      [&](void* comm) {
        return ncclAllReduce(handle_->barrier_value, handle_->barrier_value, 1, ncclFloat32, ncclSum,
                             static_cast<ncclComm_t>(comm), handle_->barrier_stream);
      },
      enqueue_limit());
  handle_->watch_until_done(handle_->barrier_stream, what);
  // Polled, not synchronized: a peer that never comes is the watchdog's to report (the barrier is watched as
  // a collective is), and this wait must then end with its failure instead of blocking in the driver. An abort
  // ends NCCL's kernels early, so a barrier that completed proves nothing once one happened.
  for (;;) {
    const cudaError_t state = cudaStreamQuery(handle_->barrier_stream);
    if (state != cudaSuccess && state != cudaErrorNotReady) check_cuda(state, what);
    if (auto failure = aborts_.failure()) fail_as<PeerFailed>(what, ": stopped, ", *failure);
    if (state == cudaSuccess) {
      std::lock_guard lock(handle_->mutex);
      if (handle_->aborted) fail_as<PeerFailed>(what, ": stopped, NCCL was aborted");
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

std::unique_ptr<Communicator> NcclComm::split(int color) {
  check(color >= 0, "split: color ", color, "; expected >= 0");
  auto child = std::make_unique<Handle>();
  child->gpu = handle_->gpu;
  child->timeout = handle_->timeout;
  ncclConfig_t config = nonblocking_config();
  const std::string what = "rank " + std::to_string(rank_) + ": NCCL split(" + std::to_string(color) + ")";
  // NCCL writes the new communicator through this pointer when the split completes, which for a non-blocking
  // communicator may be after ncclCommSplit has returned: it must point at storage that outlives the call
  // (the child's handle), and be read only once the parent's state has settled.
  try {
    issue(
        what,
        [&](void* comm) { return ncclCommSplit(static_cast<ncclComm_t>(comm), color, rank_, &child->comm, &config); },
        child->setup_limit());
  } catch (...) {
    // A split that failed or was given up on (its parent then aborted, which ends NCCL's work on it) may have
    // written a half-made child whose own state reads success: finalizing that would touch what NCCL never
    // built, so it is aborted.
    std::lock_guard lock(child->mutex);
    child->abort_locked();
    throw;
  }
  check(child->comm != nullptr, what, ": NCCL made no communicator for color ", color);
  child->settle(ncclSuccess, aborts_, what, child->setup_limit(), false);
  // Read only now that the split has settled on both communicators.
  int child_world = 0, child_rank = 0;
  const ncclResult_t counted = ncclCommCount(child->comm, &child_world);
  const ncclResult_t ranked = counted == ncclSuccess ? ncclCommUserRank(child->comm, &child_rank) : counted;
  check(ranked == ncclSuccess, what, ": cannot read the new group's size and rank: ", nccl_reason(ranked));
  child->make_barrier(what);
  return std::unique_ptr<Communicator>(new NcclComm(std::move(child), child_world, child_rank, device_, aborts_));
}

#else  // built without NCCL

namespace {
[[noreturn]] void no_nccl() { fail(*nccl_unavailable()); }
}  // namespace

std::optional<std::string> nccl_unavailable() {
#if FSDPLAB_HAVE_CUDA
  return "this fsdplab was built without NCCL (nccl.h and libnccl were not found when it was configured)";
#else
  return "this fsdplab was built without the CUDA backend, so without NCCL (nvcc was not found when it was "
         "configured)";
#endif
}

NcclId make_nccl_id() { no_nccl(); }
struct NcclComm::Handle {};
NcclAbortGroup::NcclAbortGroup(std::chrono::milliseconds timeout, std::function<void(const std::string&)> on_failure,
                               std::function<bool()> hold)
    : timeout_(timeout), on_failure_(std::move(on_failure)), hold_(std::move(hold)) {}
NcclAbortGroup::~NcclAbortGroup() = default;
void NcclAbortGroup::abort(int, const std::string&) {}
void NcclAbortGroup::give_up(const std::string&) {}
bool NcclAbortGroup::held() const { return false; }
std::optional<std::string> NcclAbortGroup::failure() const { return std::nullopt; }
NcclComm::NcclComm(const NcclId&, int world, int rank, Device& device, NcclAbortGroup& aborts)
    : world_(world), rank_(rank), device_(device), aborts_(aborts) {
  no_nccl();
}
NcclComm::~NcclComm() = default;
void NcclComm::all_gather(Stream, const Tensor&, const Tensor&) { no_nccl(); }
void NcclComm::reduce_scatter(Stream, const Tensor&, const Tensor&, ReduceOp) { no_nccl(); }
void NcclComm::all_reduce(Stream, const Tensor&, ReduceOp) { no_nccl(); }
void NcclComm::broadcast(Stream, const Tensor&, int) { no_nccl(); }
void NcclComm::barrier() { no_nccl(); }
std::unique_ptr<Communicator> NcclComm::split(int) { no_nccl(); }

#endif

}  // namespace fsdplab
