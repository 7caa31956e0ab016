// mpi_comm.hpp — ranks as processes started by an MPI launcher (`mpirun -np N fsdplab run ...`).
//
// Two things live here. The process's place in the MPI world (mpi_join: MPI is initialised once, on
// first use, and finalised at exit), with what the launcher needs from MPI around the ranks: the whole
// world's abort, and bytes carried between processes (NCCL's unique id, the trace gathered to rank 0).
// And MpiComm, the sim device's communicator across processes: every collective first exchanges each
// rank's fingerprint and clock (when its stream could start the op, and the op's cost), so every
// process checks the calls agree and agrees on the op's virtual begin and end exactly as LocalComm's
// threads do; then the data moves with MPI inside the op and reduces with the same rank-order f32 sums
// (rank_order_reduction.hpp). So a run of N processes gives the threaded run's losses and timeline.
//
// Nothing hangs: MPI's collectives are started non-blocking and waited for with a timeout, and a rank
// that fails aborts the MPI world (run_process, rank_launch.cpp), which ends every process.
// Built without MPI (no libopenmpi-dev), every entry point is an Error that says so.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/comm/collective_fingerprint.hpp"

namespace fsdplab {

// Why this build cannot use MPI, or nullopt when it can.
std::optional<std::string> mpi_unavailable();
// Whether an MPI launcher started this process (mpirun / mpiexec of Open MPI, MPICH, Slurm's PMI).
bool launched_by_mpi();

struct MpiPlace {
  int rank = 0;        // in MPI_COMM_WORLD
  int size = 1;
  int local_rank = 0;  // among the processes on this host: picks the GPU
};
// Initialises MPI the first time (finalised when the process exits) and says where this process sits.
MpiPlace mpi_join();
// Ends every process of the MPI world with `code`, after this one printed why. Never returns.
[[noreturn]] void mpi_abort_world(int code);
// For a process that failed and printed why: when it joined a world of more than one process, ends them all
// (mpi_abort_world). Its peers may be blocked in a call that has no timeout of fsdplab's (MPI_Comm_split_type
// in mpi_join, a broadcast) waiting for it, and MPI_Finalize at exit would wait for them. Returns otherwise.
void mpi_end_world_after_failure(int code);
// This process's rank in an MPI world of more than one process; 0 outside one (MPI not initialised, already
// finalised, or a world of one).
int mpi_rank_in_a_world();
// Rank `root`'s bytes on every process (each passes a buffer of the same size).
void mpi_broadcast_bytes(void* data, std::size_t bytes, int root);
// Rank `root`'s string on every process (its length first, then its bytes).
std::string mpi_broadcast_string(const std::string& mine, int root);
// Every process's `mine`, in rank order, on rank 0; an empty vector elsewhere.
std::vector<std::string> mpi_gather_to_rank0(const std::string& mine);
// The `mine` of every process on this host (this one's included), in rank order, on each of them. Every process of
// the world must call it (the hosts' groups are split from the world).
std::vector<std::string> mpi_allgather_on_host(const std::string& mine);

class MpiComm final : public Communicator {
 public:
  // This process's handle on the whole MPI world; `device` (a sim device) must be this rank's. A rank
  // waiting longer than `timeout` for its peers at any collective gives up with an Error.
  MpiComm(Device& device, std::chrono::milliseconds timeout);
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return index_; }
  int world() const override { return static_cast<int>(members_.size()); }

  void all_gather(Stream stream, const Tensor& shard, const Tensor& full) override;
  void reduce_scatter(Stream stream, const Tensor& full, const Tensor& shard, ReduceOp op) override;
  void all_reduce(Stream stream, const Tensor& t, ReduceOp op) override;
  void broadcast(Stream stream, const Tensor& t, int root) override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color) override;

 private:
  struct Group;        // the MPI communicator (complete in mpi_comm.cpp)
  struct Announcement; // what a rank says at a collective: fingerprint, clock, color
  MpiComm(Device& device, std::chrono::milliseconds timeout, std::unique_ptr<Group> group, std::vector<int> members,
          int index);
  static Announcement announcement(CollectiveKind kind, const Tensor& full, ReduceOp op = ReduceOp::sum, int root = -1);
  std::vector<Announcement> announce(const Announcement& mine);
  // Launches the op every rank agreed on; `exchange` moves the data inside it (skipped on a dry run).
  void collective(Stream stream, Announcement mine, const Tensor& output, std::int64_t full_bytes,
                  std::vector<Access> reads, std::vector<Access> writes, const std::function<void()>& exchange);
  // Waits for `count` MPI requests; after the timeout, an Error naming the ranks that never reached the collective.
  void wait(void* requests, int count, const char* what);

  Device& device_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Group> group_;
  std::vector<int> members_;  // world ranks, in group-rank order
  int index_ = 0;
  std::uint64_t seq_ = 0;
  std::string current_;       // the collective being waited in, for the timeout's message
};

}  // namespace fsdplab
