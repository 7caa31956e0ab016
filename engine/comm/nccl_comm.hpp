// nccl_comm.hpp — NCCL between GPUs: one rank per GPU, each collective an op on the stream FSDP gives it
// (the all_gather or reduce_scatter stream, ordered against compute by events), so the CUDA device times it
// and orders it with events like any kernel.
//
// NCCL refuses two ranks on one GPU: several ranks on one GPU are LocalComm's (rank_launch.hpp says so
// before anything starts). NCCL itself checks no fingerprints and has no timeout, so a rank that fails or
// stalls would leave its peers' collective kernels spinning forever. Hence NcclAbortGroup: every
// communicator of this process is registered there, and a watchdog thread aborts all of them
// (ncclCommAbort ends the kernels that wait for a peer) when a rank fails, when NCCL reports an
// asynchronous error, or when a collective has not completed within the timeout; each rank then fails
// with an Error naming the rank and the collective that went wrong.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/communicator.hpp"

namespace fsdplab {

// Why this build cannot use NCCL (built without CUDA or without nccl.h / libnccl), or nullopt.
std::optional<std::string> nccl_unavailable();

// NCCL's unique id: made by rank 0, carried to every rank (in memory for threads, MPI for processes).
struct NcclId {
  std::array<char, 128> bytes{};
};
NcclId make_nccl_id();

class NcclComm;

class NcclAbortGroup {
 public:
  // `on_failure` runs once, with the first failure the watchdog finds or a rank's own wait gives up on (give_up),
  // before the communicators are aborted (processes use it to end the MPI world; it need not return). A
  // collective not done after `timeout` counts as a failure, except while `hold` returns true (a rank paused in
  // step-through: LocalWorldOptions::hold), when no wait counts.
  NcclAbortGroup(std::chrono::milliseconds timeout, std::function<void(const std::string&)> on_failure = {},
                 std::function<bool()> hold = {});
  ~NcclAbortGroup();
  NcclAbortGroup(const NcclAbortGroup&) = delete;
  NcclAbortGroup& operator=(const NcclAbortGroup&) = delete;

  // Rank `rank` failed: every communicator is aborted; later calls on any of them throw `reason`.
  void abort(int rank, const std::string& reason);
  // A rank's own call gave up waiting (`reason` names it): every communicator is aborted, as above.
  void give_up(const std::string& reason);
  std::optional<std::string> failure() const;
  // Whether the run holds a rank now: no wait counts toward a timeout meanwhile.
  bool held() const;

 private:
  friend class NcclComm;
  void add(NcclComm* comm);
  void remove(NcclComm* comm);
  void watch();
  void abort_locked(const std::string& reason);
  // Calls on_failure_ with the first reason, once; called without the lock.
  void report(const std::string& reason);
  // The communicators of one rank's `device`, revoked then aborted, the others left running: that rank is
  // failing, and its own error is what stops the rest. Nothing in processes, where that error ends the world.
  void stop_device(const Device& device);
  // Revokes, then aborts, every communicator (of `only`'s device where given), the revokes given one deadline;
  // the lock held.
  void stop_locked(const Device* only);

  const std::chrono::milliseconds timeout_;
  std::function<void(const std::string&)> on_failure_;
  std::function<bool()> hold_;
  std::atomic<bool> reported_{false};
  mutable std::mutex mutex_;
  std::vector<NcclComm*> comms_;
  std::optional<std::string> failure_;
  bool stopping_ = false;
  std::thread watchdog_;
};

class NcclComm final : public Communicator {
 public:
  // Joins the NCCL world `id` as rank `rank` of `world` with `device` (this rank's cuda device, on its
  // own GPU). Blocks until every rank has joined. An Error with the rank and NCCL's reason otherwise.
  NcclComm(const NcclId& id, int world, int rank, Device& device, NcclAbortGroup& aborts);
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return rank_; }
  int world() const override { return world_; }

  void all_gather(Stream stream, const Tensor& shard, const Tensor& full) override;
  void reduce_scatter(Stream stream, const Tensor& full, const Tensor& shard, ReduceOp op) override;
  void all_reduce(Stream stream, const Tensor& t, ReduceOp op) override;
  void broadcast(Stream stream, const Tensor& t, int root) override;
  // A one-element all-reduce on a stream of its own, waited for by the host.
  void barrier() override;
  std::unique_ptr<Communicator> split(int color) override;

 private:
  friend class NcclAbortGroup;
  struct Handle;  // the ncclComm_t, the barrier's stream and buffer, the collectives in flight
  NcclComm(std::unique_ptr<Handle> handle, int world, int rank, Device& device, NcclAbortGroup& aborts);
  // Launches `name` as an op on `stream`; `enqueue` calls NCCL on the op's CUDA stream, and `then` (if any)
  // enqueues what must follow NCCL's work there, within the same op.
  void collective(Stream stream, OpCategory category, const Tensor& output, std::int64_t bytes,
                  std::vector<Access> reads, std::vector<Access> writes,
                  const std::function<int(void* nccl_comm, CUstream_st* s)>& enqueue,
                  const std::function<void(CUstream_st* s)>& then = {});
  // Calls NCCL on this rank's communicator under its lock (refused, naming `what`, once anything was
  // aborted), then waits until the non-blocking call has settled on this communicator, up to `limit` (a
  // collective's enqueue: the group's timeout; a split: longer). See [Note: a non-blocking communicator's
  // state] (nccl_comm.cpp).
  void issue(const std::string& what, const std::function<int(void* nccl_comm)>& call, std::chrono::milliseconds limit);
  // How long a collective's enqueue may stay in progress: the first call on a communicator also connects it to
  // its peers (NCCL connects lazily), which may take as long as a join; every later one, the group's timeout.
  std::chrono::milliseconds enqueue_limit() const;
  // Stops the NCCL communicator's kernels where NCCL can (ncclCommRevoke), freeing nothing; then aborts it (the
  // group's lock held), once, the revoke let finish until `revoke_deadline`. The group revokes every
  // communicator before it aborts any.
  void revoke_nccl();
  void abort_nccl(std::chrono::steady_clock::time_point revoke_deadline);
  // A completed collective leaves the watch list; an Error naming the oldest one not completed within
  // `timeout`, or nullopt.
  std::optional<std::string> overdue(std::chrono::milliseconds timeout);
  // The collectives in flight are timed from now on (the run held a rank meanwhile).
  void restart_watch();
  std::optional<std::string> async_error();

  std::unique_ptr<Handle> handle_;
  int world_;
  int rank_;
  Device& device_;
  NcclAbortGroup& aborts_;
  std::uint64_t seq_ = 0;
};

}  // namespace fsdplab
