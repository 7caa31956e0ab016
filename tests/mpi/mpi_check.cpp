// mpi_check.cpp — MpiComm and the process launcher under a real MPI launcher, one scenario per run:
//   mpirun -np 3 fsdplab_mpi_check collectives   every collective, f32 and bf16, in place and not, and a
//                                                split, bit for bit against LocalComm's threads
//   mpirun -np 2 fsdplab_mpi_check mismatch      rank 1 calls another collective: every rank names both calls
//   mpirun -np 3 fsdplab_mpi_check rank-fails    rank 1 throws before a collective the others wait in
//   mpirun -np 3 fsdplab_mpi_check stall         rank 1 stalls: ranks 0 and 2 give up after the timeout, naming it
// The failing scenarios end the MPI world (rank_launch.cpp); CTest reads what they printed. No GoogleTest:
// a world that aborts takes every process with it, so each scenario is its own launch.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/local_comm.hpp"
#include "engine/runtime/device_factory.hpp"
#include "engine/runtime/error.hpp"
#include "engine/tensor/elementwise.hpp"
#include "engine/train/rank_launch.hpp"
#include "engine/train/world.hpp"

namespace fsdplab {
namespace {

// Rank r's input: distinct per rank and element, with fractions that make f32 sums order-sensitive.
std::vector<float> input(int rank, std::int64_t n, int salt) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t k = 0; k < v.size(); ++k)
    v[k] = static_cast<float>((k * 7919 + static_cast<std::size_t>(rank) * 104729 + static_cast<std::size_t>(salt)) %
                              1000) /
               3.0f -
           150.0f + 1e-4f * static_cast<float>(rank);
  return v;
}

std::unique_ptr<Device> sim(int rank) {
  DeviceSpec spec;
  spec.preset = PresetCatalog::builtin().device("h100-sxm");
  spec.link = PresetCatalog::builtin().link_for(spec.preset, "");
  return make_device(rank, spec);
}

Tensor filled(Device& device, std::int64_t n, DType dtype, int rank, int salt, MemTag tag = MemTag::workspace) {
  Tensor t = Tensor::empty(device, {n}, dtype, tag, "input");
  t.copy_from(input(rank, n, salt));  // rounded once to bf16 for bf16 tensors
  return t;
}

// Every collective a communicator has, on one rank; returns each result's values, in order.
std::vector<std::vector<float>> exercise(Communicator& comm, Device& device) {
  const int r = comm.rank(), w = comm.world();
  const Stream s = device.stream(Lane::compute);
  std::vector<std::vector<float>> results;
  const auto read = [&](const Tensor& t) {
    device.synchronize();
    results.push_back(t.to_vector());
  };
  constexpr std::int64_t n = 1000;  // per rank
  for (DType dtype : {DType::f32, DType::bf16}) {
    // all_gather, out of place and in place (the shard is chunk r of full)
    const Tensor shard = filled(device, n, dtype, r, 1, MemTag::param_shard);
    const Tensor full = Tensor::empty(device, {w * n}, dtype, MemTag::param_full, "full");
    comm.all_gather(s, shard, full);
    read(full);
    const Tensor in_place = Tensor::empty(device, {w * n}, dtype, MemTag::param_full, "in place");
    copy(s, shard, in_place.view(r * n, {n}));
    comm.all_gather(s, in_place.view(r * n, {n}), in_place);
    read(in_place);
    // reduce_scatter and all_reduce, sum and avg; broadcast from the last rank
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
      const Tensor grads = filled(device, w * n, dtype, r, 2, MemTag::grad_full);
      const Tensor mine = Tensor::empty(device, {n}, dtype, MemTag::grad_shard, "grad shard");
      comm.reduce_scatter(s, grads, mine, op);
      read(mine);
      const Tensor t = filled(device, n, dtype, r, 3);
      comm.all_reduce(s, t, op);
      read(t);
    }
    const Tensor b = filled(device, n, dtype, r, 4);
    comm.broadcast(s, b, w - 1);
    read(b);
  }
  // A split into even and odd ranks, each group reducing on its own.
  const std::unique_ptr<Communicator> half = comm.split(r % 2);
  const Tensor t = filled(device, n, DType::f32, r, 5);
  half->all_reduce(s, t, ReduceOp::sum);
  read(t);
  comm.barrier();
  return results;
}

int collectives(const RankLayout& layout) {
  // The threads' answer, computed in this process for every rank, then MpiComm's for this one.
  std::vector<std::vector<std::vector<float>>> expected(static_cast<std::size_t>(layout.world));
  run_world(layout.world, [&](int rank, LocalWorld& local) {
    const auto device = sim(rank);
    LocalComm comm(local, rank, *device);
    expected[static_cast<std::size_t>(rank)] = exercise(comm, *device);
  });
  int mismatches = 0;
  run_ranks(layout, [&](RankSeat& seat) {
    const auto device = sim(seat.rank());
    const std::unique_ptr<Communicator> comm = seat.connect(*device);
    const auto got = exercise(*comm, *device);
    const auto& want = expected[static_cast<std::size_t>(seat.rank())];
    check(got.size() == want.size(), "rank ", seat.rank(), ": ", got.size(), " results; expected ", want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      if (got[i].size() != want[i].size() || std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)))
        ++mismatches;
    check(mismatches == 0, "rank ", seat.rank(), ": ", mismatches, " of ", got.size(),
          " collective results differ from LocalComm's");
    std::printf("rank %d: %zu collective results equal LocalComm's bit for bit\n", seat.rank(), got.size());
  });
  return 0;
}

int failing(const RankLayout& layout, const std::string& scenario, std::chrono::milliseconds timeout) {
  LocalWorldOptions options;
  options.timeout = timeout;
  run_ranks(layout, [&](RankSeat& seat) {
    const auto device = sim(seat.rank());
    const std::unique_ptr<Communicator> comm = seat.connect(*device);
    const Stream s = device->stream(Lane::compute);
    const Tensor t = filled(*device, 8, DType::f32, seat.rank(), 0);
    if (seat.rank() == 1) {
      if (scenario == "mismatch") {
        comm->all_reduce(s, t, ReduceOp::sum);
      } else if (scenario == "rank-fails") {
        throw std::runtime_error("a deliberate failure before the collective");
      } else {  // stall: far longer than the peers' timeout, then end quietly
        std::this_thread::sleep_for(timeout * 20);
      }
      return;
    }
    comm->broadcast(s, t, 0);
    device->synchronize();
    std::printf("rank %d: got past the collective\n", seat.rank());
  }, options);
  return 0;
}

}  // namespace
}  // namespace fsdplab

int main(int argc, char** argv) {
  using namespace fsdplab;
  const std::string scenario = argc > 1 ? argv[1] : "";
  try {
    const RankLayout layout = rank_layout("mpi", 0, DeviceKind::sim, 0);
    if (scenario == "collectives") return collectives(layout);
    if (scenario == "mismatch" || scenario == "rank-fails" || scenario == "stall")
      return failing(layout, scenario, std::chrono::milliseconds(scenario == "stall" ? 500 : 20'000));
    std::fprintf(stderr, "usage: mpirun -np N fsdplab_mpi_check collectives|mismatch|rank-fails|stall\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdplab_mpi_check: %s\n", e.what());
    return 1;
  }
}
