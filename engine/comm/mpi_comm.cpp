#include "engine/comm/mpi_comm.hpp"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <thread>

#include "engine/comm/collective_checks.hpp"
#include "engine/comm/collective_fingerprint.hpp"
#include "engine/comm/rank_order_reduction.hpp"
#include "engine/runtime/error.hpp"

#if FSDPLAB_HAVE_MPI
#include <mpi.h>
#endif

namespace fsdplab {

bool launched_by_mpi() {
  // Open MPI, MPICH / Hydra and Slurm each tell their processes so in the environment.
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(var)) return true;
  return false;
}

#if FSDPLAB_HAVE_MPI

std::optional<std::string> mpi_unavailable() { return std::nullopt; }

namespace {

void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  fail(call, " failed: ", std::string(text, static_cast<std::size_t>(length)));
}

// MPI counts bytes in int: a larger message is refused by name instead of wrapping around.
int byte_count(std::int64_t bytes, const char* what) {
  check(bytes >= 0 && bytes <= INT_MAX, what, ": ", bytes, " bytes in one MPI message; at most ", INT_MAX,
        " (2 GiB) per rank");
  return static_cast<int>(bytes);
}

OpCategory category_of(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_gather: return OpCategory::all_gather;
    case CollectiveKind::reduce_scatter: return OpCategory::reduce_scatter;
    case CollectiveKind::all_reduce: return OpCategory::all_reduce;
    case CollectiveKind::broadcast: return OpCategory::broadcast;
    case CollectiveKind::barrier:
    case CollectiveKind::split: break;
  }
  fail("MpiComm: a ", static_cast<int>(kind), " launches no op");
}

// What reduce_scatter and all_reduce both end with: `received` holds one `out`-sized buffer per rank,
// in rank order; their sum (or average) goes to `out`.
void reduce_received(const std::vector<std::byte>& received, std::size_t ranks, const Tensor& out, ReduceOp op) {
  const auto bytes = static_cast<std::size_t>(out.nbytes());
  std::vector<const std::byte*> inputs;
  for (std::size_t i = 0; i < ranks; ++i) inputs.push_back(received.data() + i * bytes);
  store_reduced(out.raw(), reduce_in_rank_order(inputs, 0, out.numel(), out.dtype(), op), out.dtype());
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// Strings of `lengths` laid end to end, as the v-collectives (MPI_Gatherv, MPI_Allgatherv) send them: where each
// starts, and each cut back out of the whole.
struct PackedStrings {
  std::vector<int> lengths, offsets;
  std::int64_t total = 0;

  explicit PackedStrings(std::vector<int> lengths_) : lengths(std::move(lengths_)), offsets(lengths.size(), 0) {
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      offsets[i] = static_cast<int>(total);
      total += lengths[i];
    }
  }
  std::vector<std::string> parts(const std::string& all) const {
    std::vector<std::string> parts;
    for (std::size_t i = 0; i < lengths.size(); ++i)
      parts.push_back(all.substr(static_cast<std::size_t>(offsets[i]), static_cast<std::size_t>(lengths[i])));
    return parts;
  }
};

}  // namespace

MpiPlace mpi_join() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // One thread at a time calls MPI (the rank's), not necessarily the one that initialised it.
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    check(provided >= MPI_THREAD_SERIALIZED, "MPI gives thread level ", provided,
          "; fsdplab needs MPI_THREAD_SERIALIZED");
    // A failing process never finalises (run_process and main end the world: mpi_end_world_after_failure), so
    // finalising at exit cannot wait for a dead peer.
    std::atexit(finalize_at_exit);
  }
  MpiPlace place;
  MPI_Comm_rank(MPI_COMM_WORLD, &place.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &place.size);
  MPI_Comm local;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, place.rank, MPI_INFO_NULL, &local),
            "MPI_Comm_split_type");
  MPI_Comm_rank(local, &place.local_rank);
  MPI_Comm_free(&local);
  return place;
}

void mpi_abort_world(int code) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

int mpi_rank_in_a_world() {
  int initialized = 0, finalized = 0, size = 1, rank = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return 0;
  MPI_Finalized(&finalized);
  if (finalized) return 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size == 1) return 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

void mpi_end_world_after_failure(int code) {
  int initialized = 0, finalized = 0, size = 1;
  MPI_Initialized(&initialized);
  if (!initialized) return;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) mpi_abort_world(code);
}

std::string mpi_broadcast_string(const std::string& mine, int root) {
  std::uint64_t length = mine.size();
  mpi_broadcast_bytes(&length, sizeof length, root);
  std::string text = mine;
  text.resize(static_cast<std::size_t>(length));
  mpi_broadcast_bytes(text.data(), text.size(), root);
  return text;
}

void mpi_broadcast_bytes(void* data, std::size_t bytes, int root) {
  check_mpi(MPI_Bcast(data, byte_count(static_cast<std::int64_t>(bytes), "broadcast"), MPI_BYTE, root, MPI_COMM_WORLD),
            "MPI_Bcast");
}

std::vector<std::string> mpi_gather_to_rank0(const std::string& mine) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int length = byte_count(static_cast<std::int64_t>(mine.size()), "gather");
  std::vector<int> lengths(static_cast<std::size_t>(size));
  check_mpi(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
  const PackedStrings packed(std::move(lengths));
  std::string all(rank == 0 ? static_cast<std::size_t>(byte_count(packed.total, "gather")) : 0, '\0');
  check_mpi(MPI_Gatherv(mine.data(), length, MPI_BYTE, all.data(), packed.lengths.data(), packed.offsets.data(),
                        MPI_BYTE, 0, MPI_COMM_WORLD),
            "MPI_Gatherv");
  if (rank != 0) return {};
  return packed.parts(all);
}

std::vector<std::string> mpi_allgather_on_host(const std::string& mine) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm host;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host),
            "MPI_Comm_split_type");
  int size = 1;
  MPI_Comm_size(host, &size);
  int length = byte_count(static_cast<std::int64_t>(mine.size()), "allgather");
  std::vector<int> lengths(static_cast<std::size_t>(size));
  check_mpi(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, host), "MPI_Allgather");
  const PackedStrings packed(std::move(lengths));
  std::string all(static_cast<std::size_t>(byte_count(packed.total, "allgather")), '\0');
  check_mpi(MPI_Allgatherv(mine.data(), length, MPI_BYTE, all.data(), packed.lengths.data(), packed.offsets.data(),
                           MPI_BYTE, host),
            "MPI_Allgatherv");
  MPI_Comm_free(&host);
  return packed.parts(all);
}

// ---- MpiComm ------------------------------------------------------------------------------------

// An MPI collective that times out cannot say who is missing: its result comes whole or not at all. So at
// every collective each rank also sends every peer, point to point, the collective's number ("I got here"),
// and posts a receive for each peer's. After a timeout, the receives still pending name the ranks that never
// arrived. Messages between two ranks never overtake each other, so receive k matches the peer's send k.
struct MpiComm::Group {
  MPI_Comm comm = MPI_COMM_NULL;
  std::uint64_t sent_seq = 0;                  // what this rank's arrival sends carry
  std::vector<std::uint64_t> received_seq;     // one per group rank, written by the receives
  std::vector<MPI_Request> arrival_receives;   // MPI_REQUEST_NULL for this rank and once received
  std::vector<MPI_Request> arrival_sends;

  static constexpr int kArrivalTag = 7;

  void post_arrivals(std::uint64_t seq, int self, std::size_t ranks) {
    sent_seq = seq;
    received_seq.assign(ranks, 0);
    arrival_receives.assign(ranks, MPI_REQUEST_NULL);
    arrival_sends.assign(ranks, MPI_REQUEST_NULL);
    for (std::size_t i = 0; i < ranks; ++i) {
      if (static_cast<int>(i) == self) continue;
      check_mpi(MPI_Irecv(&received_seq[i], sizeof(std::uint64_t), MPI_BYTE, static_cast<int>(i), kArrivalTag, comm,
                          &arrival_receives[i]),
                "MPI_Irecv");
      check_mpi(MPI_Isend(&sent_seq, sizeof(std::uint64_t), MPI_BYTE, static_cast<int>(i), kArrivalTag, comm,
                          &arrival_sends[i]),
                "MPI_Isend");
    }
  }
  // The group ranks whose arrival has not come (testing completes the ones that have).
  std::vector<std::size_t> not_arrived() {
    std::vector<std::size_t> missing;
    for (std::size_t i = 0; i < arrival_receives.size(); ++i) {
      int done = 0;
      check_mpi(MPI_Test(&arrival_receives[i], &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (!done) missing.push_back(i);
    }
    return missing;
  }
  ~Group() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    // After a timeout, receives may still be pending: cancelled, so MPI never writes into freed memory.
    for (MPI_Request& request : arrival_receives)
      if (request != MPI_REQUEST_NULL) {
        MPI_Cancel(&request);
        MPI_Request_free(&request);
      }
    for (MPI_Request& request : arrival_sends)
      if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
};

// Plain bytes: every process of a run is the same binary, so the layout agrees.
struct MpiComm::Announcement {
  CollectiveFingerprint call;
  SimTime earliest = 0;  // when the rank's stream could start the op
  SimTime duration = 0;  // the op's time by the rank's cost model
  int color = 0;         // split only
};

// A collective's announcement before the rank's clock is filled in: the fingerprint of a call on `full`
// (the whole buffer: its dtype and element count).
MpiComm::Announcement MpiComm::announcement(CollectiveKind kind, const Tensor& full, ReduceOp op, int root) {
  Announcement a;
  a.call.kind = kind;
  a.call.op = op;
  a.call.dtype = full.dtype();
  a.call.count = full.numel();
  a.call.root = root;
  return a;
}

MpiComm::MpiComm(Device& device, std::chrono::milliseconds timeout)
    : device_(device), timeout_(timeout), group_(std::make_unique<Group>()) {
  const MpiPlace place = mpi_join();
  check(device.kind() == DeviceKind::sim, "--comm mpi carries the sim device's collectives between processes; "
        "on GPUs use --comm nccl (under mpirun for one process per GPU)");
  check(device.rank() == place.rank, "MpiComm: MPI rank ", place.rank, " bound to rank ", device.rank(), "'s device");
  check(timeout.count() > 0, "MpiComm: timeout of ", timeout.count(), " ms; expected > 0");
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &group_->comm), "MPI_Comm_dup");
  for (int r = 0; r < place.size; ++r) members_.push_back(r);
  index_ = place.rank;
}

MpiComm::MpiComm(Device& device, std::chrono::milliseconds timeout, std::unique_ptr<Group> group,
                 std::vector<int> members, int index)
    : device_(device), timeout_(timeout), group_(std::move(group)), members_(std::move(members)), index_(index) {}

MpiComm::~MpiComm() = default;

void MpiComm::wait(void* requests, int count, const char* what) {
  auto* req = static_cast<MPI_Request*>(requests);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  // MPI progresses only inside its calls: test in a loop, but let other processes (ranks on the same
  // cores) run between tests once the peer is clearly not there yet.
  for (int tests = 0;; ++tests) {
    int done = 0;
    check_mpi(MPI_Testall(count, req, &done, MPI_STATUSES_IGNORE), what);
    if (done) return;
    if (tests > 200) std::this_thread::sleep_for(std::chrono::microseconds(50));
    if (Clock::now() - start > timeout_) {
      std::ostringstream waited;
      waited << std::fixed << std::setprecision(1) << static_cast<double>(timeout_.count()) / 1000.0;
      const std::vector<std::size_t> missing = group_->not_arrived();
      std::ostringstream blame;
      if (missing.empty()) blame << "every rank of the group got there; a peer stopped inside it";
      for (std::size_t k = 0; k < missing.size(); ++k)
        blame << (k == 0 ? (missing.size() == 1 ? "rank " : "ranks ") : ", ") << members_[missing[k]];
      if (!missing.empty()) blame << " never got there (stopped, hung, or still in an earlier step)";
      fail_as<CollectiveTimedOut>("rank ", members_[static_cast<std::size_t>(index_)], " waited ", waited.str(),
                                  " s in ", current_, " of group ", group_str(members_), " (", what, "); ",
                                  blame.str());
    }
  }
}

std::vector<MpiComm::Announcement> MpiComm::announce(const Announcement& mine) {
  ++seq_;
  current_ = describe(mine.call, seq_, members_);
  std::vector<Announcement> all(members_.size());
  group_->post_arrivals(seq_, index_, members_.size());
  MPI_Request request;
  check_mpi(MPI_Iallgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, group_->comm, &request),
            "MPI_Iallgather");
  wait(&request, 1, "exchanging the collective's fingerprint");
  // Everyone has posted its arrivals, so these complete at once.
  wait(group_->arrival_receives.data(), static_cast<int>(members_.size()), "exchanging arrivals");
  wait(group_->arrival_sends.data(), static_cast<int>(members_.size()), "exchanging arrivals");
  // Every process holds the same announcements, so all of them throw the same mismatch, or none does.
  for (std::size_t i = 1; i < all.size(); ++i)
    if (!all[i].call.same_call(all[0].call)) fail(mismatch_message(members_, i, all[i].call, all[0].call, seq_));
  return all;
}

void MpiComm::collective(Stream stream, Announcement mine, const Tensor& output, std::int64_t full_bytes,
                         std::vector<Access> reads, std::vector<Access> writes, const std::function<void()>& exchange) {
  check(stream.device == &device_, "collective on rank ", stream.device ? stream.device->rank() : -1,
        "'s stream through rank ", device_.rank(), "'s communicator");
  const OpCategory category = category_of(mine.call.kind);
  mine.call.dry = device_.dry_run();
  const RankLink link = device_.cost_model().link_of(members_);
  mine.earliest = device_.earliest_start(stream.lane, category, link);
  mine.duration = device_.cost_model().collective(category, full_bytes, static_cast<int>(members_.size()), link);
  const std::vector<Announcement> all = announce(mine);
  // Settled as LocalComm settles it: the latest earliest start, the slowest rank's duration.
  OpSpec spec;
  for (const Announcement& a : all) {
    spec.not_before = std::max(spec.not_before, a.earliest);
    spec.duration = std::max(spec.duration, a.duration);
  }
  const std::string_view op = category_name(category);
  spec.name = output.name().empty() ? std::string(op) : std::string(op) + " " + output.name();
  spec.category = category;
  spec.link = link;
  spec.bytes_moved = full_bytes;
  spec.reads = std::move(reads);
  spec.writes = std::move(writes);
  const bool dry = mine.call.dry;
  device_.launch(stream.lane, std::move(spec), {.host = [&] {
    if (!dry) exchange();
  }});
}


void MpiComm::all_gather(Stream stream, const Tensor& shard, const Tensor& full) {
  check_all_gather(shard, full, world(), rank(), device_);
  const auto move_data = [&] {
    // The shard may be chunk r of `full` itself: sent from a copy, so MPI never reads what it writes.
    const int chunk = byte_count(shard.nbytes(), "all_gather");
    const std::vector<std::byte> sent(shard.raw(), shard.raw() + chunk);
    MPI_Request request;
    check_mpi(MPI_Iallgather(sent.data(), chunk, MPI_BYTE, full.raw(), chunk, MPI_BYTE, group_->comm, &request),
              "MPI_Iallgather");
    wait(&request, 1, "moving the data");
  };
  collective(stream, announcement(CollectiveKind::all_gather, full), full, full.nbytes(), {shard.access()},
             {full.access()}, move_data);
}

void MpiComm::reduce_scatter(Stream stream, const Tensor& full, const Tensor& shard, ReduceOp op) {
  check_reduce_scatter(full, shard, world(), rank(), device_);
  const auto move_data = [&] {
    // Every rank's chunk r comes to rank r (an all-to-all), which then sums them in rank order.
    const int chunk = byte_count(shard.nbytes(), "reduce_scatter");
    std::vector<std::byte> received(static_cast<std::size_t>(chunk) * members_.size());
    MPI_Request request;
    check_mpi(MPI_Ialltoall(full.raw(), chunk, MPI_BYTE, received.data(), chunk, MPI_BYTE, group_->comm, &request),
              "MPI_Ialltoall");
    wait(&request, 1, "moving the data");
    reduce_received(received, members_.size(), shard, op);
  };
  collective(stream, announcement(CollectiveKind::reduce_scatter, full, op), shard, full.nbytes(), {full.access()},
             {shard.access()}, move_data);
}

void MpiComm::all_reduce(Stream stream, const Tensor& t, ReduceOp op) {
  check_all_reduce(t, device_);
  collective(stream, announcement(CollectiveKind::all_reduce, t, op), t, t.nbytes(), {t.access()}, {t.access()}, [&] {
    // Every rank gathers every input and sums them in rank order: the same bits everywhere, and the
    // same as LocalComm's.
    const int bytes = byte_count(t.nbytes(), "all_reduce");
    std::vector<std::byte> gathered(static_cast<std::size_t>(bytes) * members_.size());
    MPI_Request request;
    check_mpi(MPI_Iallgather(t.raw(), bytes, MPI_BYTE, gathered.data(), bytes, MPI_BYTE, group_->comm, &request),
              "MPI_Iallgather");
    wait(&request, 1, "moving the data");
    reduce_received(gathered, members_.size(), t, op);
  });
}

void MpiComm::broadcast(Stream stream, const Tensor& t, int root) {
  check_broadcast(t, root, world(), device_);
  const Announcement mine = announcement(CollectiveKind::broadcast, t, ReduceOp::sum, root);
  const bool receives = root != index_;
  std::vector<Access> reads, writes;
  (receives ? writes : reads).push_back(t.access());
  collective(stream, mine, t, t.nbytes(), reads, writes, [&] {
    MPI_Request request;
    check_mpi(MPI_Ibcast(t.raw(), byte_count(t.nbytes(), "broadcast"), MPI_BYTE, root, group_->comm, &request),
              "MPI_Ibcast");
    wait(&request, 1, "moving the data");
  });
}

void MpiComm::barrier() {
  // The announcement is itself a barrier: no process gets past it before every one has made it.
  Announcement mine;
  mine.call.kind = CollectiveKind::barrier;
  announce(mine);
}

std::unique_ptr<Communicator> MpiComm::split(int color) {
  check(color >= 0, "split: color ", color, "; expected >= 0");
  Announcement mine;
  mine.call.kind = CollectiveKind::split;
  mine.color = color;
  const std::vector<Announcement> all = announce(mine);
  // Everyone has arrived, so MPI's blocking split cannot wait for a missing peer.
  auto group = std::make_unique<Group>();
  check_mpi(MPI_Comm_split(group_->comm, color, index_, &group->comm), "MPI_Comm_split");
  std::vector<int> members;
  int index = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all[i].color != color) continue;
    if (static_cast<int>(i) == index_) index = static_cast<int>(members.size());
    members.push_back(members_[i]);
  }
  return std::unique_ptr<Communicator>(new MpiComm(device_, timeout_, std::move(group), std::move(members), index));
}

#else  // built without MPI

namespace {
[[noreturn]] void no_mpi() { fail(*mpi_unavailable()); }
}  // namespace

std::optional<std::string> mpi_unavailable() {
  return "this fsdplab was built without MPI (install libopenmpi-dev and openmpi-bin, then rebuild: "
         "scripts/install-deps.sh does)";
}
MpiPlace mpi_join() { no_mpi(); }
void mpi_abort_world(int code) { std::_Exit(code); }
void mpi_end_world_after_failure(int) {}  // no MPI world to end
int mpi_rank_in_a_world() { return 0; }
void mpi_broadcast_bytes(void*, std::size_t, int) { no_mpi(); }
std::string mpi_broadcast_string(const std::string&, int) { no_mpi(); }
std::vector<std::string> mpi_gather_to_rank0(const std::string&) { no_mpi(); }
std::vector<std::string> mpi_allgather_on_host(const std::string&) { no_mpi(); }

struct MpiComm::Group {};
struct MpiComm::Announcement {};
MpiComm::MpiComm(Device& device, std::chrono::milliseconds timeout) : device_(device), timeout_(timeout) { no_mpi(); }
MpiComm::~MpiComm() = default;
void MpiComm::all_gather(Stream, const Tensor&, const Tensor&) { no_mpi(); }
void MpiComm::reduce_scatter(Stream, const Tensor&, const Tensor&, ReduceOp) { no_mpi(); }
void MpiComm::all_reduce(Stream, const Tensor&, ReduceOp) { no_mpi(); }
void MpiComm::broadcast(Stream, const Tensor&, int) { no_mpi(); }
void MpiComm::barrier() { no_mpi(); }
std::unique_ptr<Communicator> MpiComm::split(int) { no_mpi(); }

#endif

}  // namespace fsdplab
