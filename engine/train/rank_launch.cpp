#include "engine/train/rank_launch.hpp"

#include <algorithm>
#include <cstdio>
#include <new>
#include <nlohmann/json.hpp>
#include <string_view>

#include "engine/comm/mpi_comm.hpp"
#include "engine/comm/nccl_comm.hpp"
#include "engine/runtime/device_factory.hpp"
#include "engine/runtime/error.hpp"
#include "engine/runtime/host_memory_limit.hpp"
#include "engine/trace/trace_wire.hpp"
#include "engine/train/run_control.hpp"
#include "engine/train/world.hpp"

namespace fsdplab {

// ---- where each rank runs --------------------------------------------------------------------------

CommKind parse_comm(std::string_view name) {
  if (name == "local") return CommKind::local;
  if (name == "mpi") return CommKind::mpi;
  if (name == "nccl") return CommKind::nccl;
  fail("--comm '", name, "'; expected local (ranks as threads), mpi (ranks as processes, sim device) or nccl "
       "(one GPU per rank)");
}

bool RankLayout::hosts(int rank) const { return std::binary_search(ranks_here.begin(), ranks_here.end(), rank); }

RankLayout rank_layout(std::string_view comm, int world, DeviceKind device, int first_gpu) {
  RankLayout layout;
  layout.comm = parse_comm(comm);
  layout.first_gpu = first_gpu;
  check(world >= 0, "--world ", world, "; expected >= 1");
  const bool on_gpu = device == DeviceKind::cuda;
  if (layout.comm == CommKind::local) {
    layout.world = world == 0 ? 1 : world;
    check(layout.world <= kMaxLocalRanks, "--world ", layout.world, "; this host runs 1 to ", kMaxLocalRanks,
          " ranks as threads (each with its own device); across processes use mpirun with --comm mpi or nccl");
    if (launched_by_mpi() && mpi_unavailable() == std::nullopt) {
      const int processes = mpi_join().size;
      check(processes == 1, "--comm local under an MPI launcher of ", processes, " processes: each would run all ",
            layout.world, " ranks by itself; use --comm mpi (sim device) or --comm nccl (GPUs) for a rank per process");
    }
    for (int r = 0; r < layout.world; ++r) layout.ranks_here.push_back(r);
    return layout;
  }
  if (layout.comm == CommKind::mpi) {
    check(!on_gpu, "--comm mpi carries the sim device's collectives between processes; on GPUs use --comm nccl "
          "(under mpirun for one process per GPU), or --device sim");
  } else {
    check(on_gpu, "--comm nccl moves data between GPUs; this run is on the sim device: add --device cuda, or use "
          "--comm local (threads) or --comm mpi (processes) on the sim device");
    if (auto why = nccl_unavailable()) fail("--comm nccl: ", *why, "; use --comm local (ranks sharing one GPU)");
  }
  // Processes: MPI places them. NCCL without a launcher: threads of this process, a GPU each.
  layout.processes = layout.comm == CommKind::mpi || launched_by_mpi();
  if (layout.processes) {
    if (auto why = mpi_unavailable()) fail("--comm ", comm, " across processes: ", *why);
    check(launched_by_mpi() || world <= 1, "--comm mpi --world ", world, ": each rank is a process started by an MPI "
          "launcher; run `mpirun -np ", world, " fsdplab run ... --comm mpi` (or --comm local for threads)");
    const MpiPlace place = mpi_join();
    check(world == 0 || world == place.size, "--world ", world, " but the MPI launcher started ", place.size,
          " process", place.size == 1 ? "" : "es", ": one rank per process, so drop --world or pass `mpirun -np ",
          world, "`");
    layout.world = place.size;
    layout.local_rank = place.local_rank;
    layout.ranks_here = {place.rank};
  } else {
    layout.world = world == 0 ? 1 : world;
    for (int r = 0; r < layout.world; ++r) layout.ranks_here.push_back(r);
  }
  if (layout.comm == CommKind::nccl) {
    // NCCL refuses two ranks on one GPU.
    const int needed = layout.processes ? layout.local_rank + 1 : layout.world;
    const int gpus = usable_gpu_count();
    check(first_gpu + needed <= gpus, "--comm nccl puts one rank on each GPU and NCCL refuses two ranks on one GPU: ",
          layout.processes ? "local rank " + std::to_string(layout.local_rank) + " needs GPU " +
                                 std::to_string(first_gpu + layout.local_rank)
                           : std::to_string(layout.world) + " ranks need GPUs " + std::to_string(first_gpu) + ".." +
                                 std::to_string(first_gpu + layout.world - 1),
          " and this machine has ", gpus, " usable GPU", gpus == 1 ? "" : "s",
          "; use --comm local to run every rank on one GPU (device-to-device copies, --emulate-link for a "
          "workstation's link)");
  }
  return layout;
}

// ---- running the ranks: threads, processes, NCCL ---------------------------------------------------

namespace {

class ThreadSeat final : public RankSeat {
 public:
  ThreadSeat(const RankLayout& layout, int rank, LocalWorld& local, const NcclId* id, NcclAbortGroup* aborts)
      : layout_(layout), rank_(rank), local_(local), id_(id), aborts_(aborts) {}
  int rank() const override { return rank_; }
  int world() const override { return layout_.world; }
  int gpu() const override { return layout_.first_gpu + (layout_.comm == CommKind::nccl ? rank_ : 0); }
  int ranks_on_gpu() const override { return layout_.comm == CommKind::nccl ? 1 : layout_.world; }
  int index_on_gpu() const override { return layout_.comm == CommKind::nccl ? 0 : rank_; }
  std::unique_ptr<Communicator> connect(Device& device) override {
    if (layout_.comm == CommKind::nccl) return std::make_unique<NcclComm>(*id_, layout_.world, rank_, device, *aborts_);
    return std::make_unique<LocalComm>(local_, rank_, device);
  }

 private:
  const RankLayout& layout_;
  int rank_;
  LocalWorld& local_;
  const NcclId* id_;
  NcclAbortGroup* aborts_;
};

class ProcessSeat final : public RankSeat {
 public:
  ProcessSeat(const RankLayout& layout, std::chrono::milliseconds timeout, const NcclId* id, NcclAbortGroup* aborts)
      : layout_(layout), timeout_(timeout), id_(id), aborts_(aborts) {}
  int rank() const override { return layout_.ranks_here.front(); }
  int world() const override { return layout_.world; }
  int gpu() const override { return layout_.first_gpu + layout_.local_rank; }
  std::unique_ptr<Communicator> connect(Device& device) override {
    if (layout_.comm == CommKind::nccl)
      return std::make_unique<NcclComm>(*id_, layout_.world, rank(), device, *aborts_);
    return std::make_unique<MpiComm>(device, timeout_);
  }

 private:
  const RankLayout& layout_;
  std::chrono::milliseconds timeout_;
  const NcclId* id_;
  NcclAbortGroup* aborts_;
};

// The rank's failure, printed where the launcher collects each process's output, then the MPI world ends.
[[noreturn]] void abort_processes(int rank, const std::string& reason) {
  std::fprintf(stderr, "fsdplab: rank %d failed: %s\n", rank, reason.c_str());
  std::fflush(stderr);
  mpi_abort_world(1);
}

void run_process(const RankLayout& layout, const std::function<void(RankSeat&)>& body, LocalWorldOptions options) {
  const int rank = layout.ranks_here.front();
  const std::chrono::milliseconds timeout = options.timeout;
  try {
    std::optional<NcclId> id;
    std::unique_ptr<NcclAbortGroup> aborts;
    if (layout.comm == CommKind::nccl) {
      id.emplace();
      if (rank == 0) id = make_nccl_id();
      mpi_broadcast_bytes(id->bytes.data(), id->bytes.size(), 0);
      aborts =
          std::make_unique<NcclAbortGroup>(timeout, [rank](const std::string& why) { abort_processes(rank, why); });
    }
    ProcessSeat seat(layout, timeout, id ? &*id : nullptr, aborts.get());
    body(seat);
  } catch (const std::bad_alloc&) {
    abort_processes(rank, out_of_memory_message("in this rank's process"));
  } catch (const std::exception& e) {
    abort_processes(rank, e.what());
  }
}

// One thread rank's body where NCCL links the ranks. See [Note: which failure a world reports] in world.cpp: once
// another rank's failure aborted NCCL, this rank's kernels ended early, and whatever it then sees (a CUDA error, a
// result it checks) follows from that failure, whatever its type. It is rethrown as a PeerFailed, never the cause.
// (A failure this rank's own wait gave up on is its own: the group's failure word for word, within the context
// the device adds, "rank R, op 'NAME' on stream S: ", when it came from inside an op.)
void run_nccl_thread_rank(const std::function<void(RankSeat&)>& body, RankSeat& seat, const NcclAbortGroup& aborts) {
  try {
    body(seat);
  } catch (const PeerFailed&) {
    throw;
  } catch (const RunStopped&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    const auto first = aborts.failure();
    if (first && std::string_view(e.what()).find(*first) == std::string_view::npos) fail_as<PeerFailed>(e.what());
    throw;
  }
}

}  // namespace

void run_ranks(const RankLayout& layout, const std::function<void(RankSeat&)>& body, LocalWorldOptions options) {
  if (layout.processes) return run_process(layout, body, options);
  std::optional<NcclId> id;
  std::unique_ptr<NcclAbortGroup> aborts;
  if (layout.comm == CommKind::nccl) {
    id = make_nccl_id();
    aborts = std::make_unique<NcclAbortGroup>(options.timeout, nullptr, options.hold);
    // A rank that fails aborts every NCCL communicator too, so peers inside a collective kernel are freed.
    options.on_abort = [group = aborts.get()](int rank, const std::string& reason) { group->abort(rank, reason); };
  }
  run_world(layout.world, [&](int rank, LocalWorld& local) {
    ThreadSeat seat(layout, rank, local, id ? &*id : nullptr, aborts.get());
    if (aborts) return run_nccl_thread_rank(body, seat, *aborts);
    body(seat);
  }, options);
  // The watchdog may have aborted a collective that was every rank's last NCCL call: its kernels ended early,
  // its result is garbage, and no rank called NCCL again to hear of it.
  if (aborts) {
    if (const auto failure = aborts->failure()) fail(*failure);
  }
}

// ---- what the processes agree on and gather --------------------------------------------------------

std::vector<std::string> gather_for_report(const RankLayout& layout, std::vector<std::string> by_rank) {
  check(by_rank.size() == static_cast<std::size_t>(layout.world), "gather_for_report: ", by_rank.size(),
        " entries for ", layout.world, " ranks");
  if (!layout.processes) return by_rank;
  return mpi_gather_to_rank0(by_rank[static_cast<std::size_t>(layout.ranks_here.front())]);
}

std::string agree_with_rank0(const RankLayout& layout, std::string value) {
  if (!layout.processes) return value;
  return mpi_broadcast_string(value, 0);
}

namespace {

nlohmann::json request_json(const ProcessMemoryRequest& request) {
  nlohmann::json bounds = nlohmann::json::array();
  for (const HostMemoryBound& b : request.bounds)
    bounds.push_back(
        {{"bytes", b.bytes}, {"source", b.source}, {"host_wide", b.host_wide}, {"beyond_held", b.beyond_held}});
  return {{"rank", request.rank}, {"need", request.need}, {"held", request.held}, {"bounds", bounds}};
}

ProcessMemoryRequest request_from_json(const nlohmann::json& j) {
  ProcessMemoryRequest request{j.at("rank").get<int>(), j.at("need").get<double>(), j.at("held").get<double>(), {}};
  for (const nlohmann::json& b : j.at("bounds"))
    request.bounds.push_back({b.at("bytes").get<double>(), b.at("source").get<std::string>(),
                              b.at("host_wide").get<bool>(), b.at("beyond_held").get<bool>()});
  return request;
}

}  // namespace

void check_ranks_fit_host_memory(const RankLayout& layout, double bytes_here, std::string_view who,
                                 std::string_view remedy) {
  if (!layout.processes || layout.world == 1) {
    if (bytes_here > 0) check_fits_host_memory(bytes_here, who, remedy);
    return;
  }
  const ProcessMemoryRequest mine = this_process_memory_request(bytes_here, layout.ranks_here.front());
  std::vector<ProcessMemoryRequest> on_host;
  for (const std::string& text : mpi_allgather_on_host(request_json(mine).dump()))
    on_host.push_back(request_from_json(nlohmann::json::parse(text)));
  const bool asked = std::any_of(on_host.begin(), on_host.end(), [](const auto& p) { return p.need > 0; });
  if (!asked) return;
  if (const auto refusal = host_memory_refusal(on_host, who, remedy)) fail(*refusal);
}

// ---- the trace for the report ----------------------------------------------------------------------

TraceData gather_trace_for_report(const RankLayout& layout, const std::vector<TraceRecorder>& recorders) {
  check(recorders.size() == static_cast<std::size_t>(layout.world), "gather_trace_for_report: ", recorders.size(),
        " recorders for ", layout.world, " ranks");
  TraceData all;
  if (!layout.processes) {
    for (const TraceRecorder& r : recorders) all.append(r.data());
    return all;
  }
  // Processes send theirs in the wire format the remote dashboard reads (trace_wire.hpp).
  std::vector<std::string> by_rank(recorders.size());
  const auto rank = static_cast<std::size_t>(layout.ranks_here.front());
  for (const TraceEvent& e : recorders[rank].data().events) append_frame(by_rank[rank], e);
  for (const CounterSample& c : recorders[rank].data().counters) append_frame(by_rank[rank], c);
  const std::vector<std::string> gathered = gather_for_report(layout, std::move(by_rank));
  for (std::size_t r = 0; r < gathered.size(); ++r) {
    WireDecoder decoder(WireDecoder::Opening::any_frame);
    decoder.feed(gathered[r]);
    while (std::optional<WireMessage> message = decoder.next()) {
      if (auto* e = std::get_if<TraceEvent>(&*message)) {
        check(e->rank == static_cast<int>(r), "rank ", r, " sent an event of rank ", e->rank);
        all.events.push_back(std::move(*e));
      } else if (auto* c = std::get_if<CounterSample>(&*message)) {
        check(c->rank == static_cast<int>(r), "rank ", r, " sent a counter of rank ", c->rank);
        all.counters.push_back(*c);
      } else {
        fail("rank ", r, " sent a message that is no trace event or counter");
      }
    }
    check(decoder.buffered() == 0, "rank ", r, "'s trace ends in the middle of a frame");
  }
  return all;
}

}  // namespace fsdplab
