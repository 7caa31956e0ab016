// rank_launch.hpp — where a run's ranks run and how they talk (`--comm`), one entry point for every
// trainer and demo:
//   local  every rank a thread of this process, LocalComm between them (on cuda, sharing GPU --gpu)
//   mpi    one rank per process of an MPI launcher (`mpirun -np N fsdplab run --comm mpi ...`), MpiComm
//          between them; the sim device, so a multi-process run is checked here without GPUs
//   nccl   the cuda device, one GPU per rank, NcclComm; the ranks are threads of this process, or
//          processes when an MPI launcher started it (one GPU per local rank, NCCL's id sent by MPI)
// A rank's body gets a RankSeat: its rank, the GPU it computes on, and connect(), which joins the
// group of all ranks through the chosen communicator once the rank has made its device.
// A rank that fails never leaves the others waiting: threads abort their world (and, with NCCL, every
// communicator of this process); a process aborts the MPI world.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/comm/local_comm.hpp"
#include "engine/runtime/device.hpp"
#include "engine/trace/trace_recorder.hpp"

namespace fsdplab {

enum class CommKind { local, mpi, nccl };
CommKind parse_comm(std::string_view name);  // an Error listing local, mpi, nccl otherwise

struct RankLayout {
  CommKind comm = CommKind::local;
  int world = 1;
  bool processes = false;       // one rank per process, started by an MPI launcher
  std::vector<int> ranks_here;  // the ranks this process runs, ascending
  int first_gpu = 0;            // cuda: rank r's GPU is first_gpu + r (threads) or + its local rank (processes)
  int local_rank = 0;           // processes: this one's index among those on its host

  bool hosts(int rank) const;
  // Whether this process reports the run (prints, writes the losses and the trace): rank 0's.
  bool reports() const { return hosts(0); }
};

// Resolves `comm` for a run of `world` ranks on `device` ("sim" or "cuda", already resolved) here: an
// Error naming what is wrong before any rank starts (MPI missing or not launching this process, a world
// that is not mpirun's, fewer GPUs than NCCL ranks, a device the communicator cannot carry).
// `world` 0 means "as many as the MPI launcher started" (1 when there is none).
RankLayout rank_layout(std::string_view comm, int world, DeviceKind device, int first_gpu);

class RankSeat {
 public:
  virtual ~RankSeat() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual int gpu() const = 0;  // cuda: the GPU this rank's device must use
  // cuda: how many of this process's ranks compute on gpu() (with --comm local, every rank), and this rank's
  // index among them: its share of the GPU's SMs where they are split (engine/cuda/sm_partition.hpp).
  virtual int ranks_on_gpu() const { return 1; }
  virtual int index_on_gpu() const { return 0; }
  // Joins the group of all ranks with `device` (this rank's; it must outlive the communicator).
  virtual std::unique_ptr<Communicator> connect(Device& device) = 0;
};

// Runs body(seat) for each rank this process hosts, and returns when they are done; rethrows the first
// failure as run_world does (threads). In a process of an MPI launcher a failure is printed with its
// rank and aborts the MPI world instead, so no peer process waits for it.
void run_ranks(const RankLayout& layout, const std::function<void(RankSeat& seat)>& body,
               LocalWorldOptions options = {});

// What each rank produced (by rank, `world` entries; only the hosted ranks' are read), brought to the
// process that reports: threads have them all already; processes send theirs to rank 0 over MPI. Every
// process must call it; the reporting one gets all `world` entries in rank order, the others none.
std::vector<std::string> gather_for_report(const RankLayout& layout, std::vector<std::string> by_rank);

// Rank 0's `value` on every process (threads share it already): what the processes of one run must agree
// on, such as the run's id on a remote dashboard. Every process must call it.
std::string agree_with_rank0(const RankLayout& layout, std::string value);

// Refuses, with an Error, ranks that would not fit in this host's memory: this process's ranks, which need
// `bytes_here` more (0 where they keep nothing in host memory: a GPU run, a dry run), and, when ranks are processes,
// those of the same run on this host, which share the host's bounds (see [Note: processes on one host share its
// memory] in host_memory_limit.hpp). `who` and `remedy` as check_fits_host_memory's. Every process must call it, at
// the same point of its launch and whatever its `bytes_here`: they exchange what they need, and all refuse alike.
void check_ranks_fit_host_memory(const RankLayout& layout, double bytes_here, std::string_view who,
                                 std::string_view remedy);

// Every rank's trace, in rank order, on the reporting process (what threads get by appending their
// recorders): recorders[r] is read for each rank r hosted here. The others get an empty trace.
TraceData gather_trace_for_report(const RankLayout& layout, const std::vector<TraceRecorder>& recorders);

}  // namespace fsdplab
