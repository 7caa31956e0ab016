#include "engine/comm/local_comm.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <iomanip>
#include <sstream>
#include <thread>

#include "engine/comm/collective_checks.hpp"
#include "engine/comm/collective_fingerprint.hpp"
#include "engine/comm/rank_order_reduction.hpp"
#include "engine/cuda/comm_kernels.hpp"
#include "engine/cuda/copies.hpp"
#include "engine/runtime/error.hpp"
#include "engine/tensor/elementwise.hpp"
#include "engine/tensor/launch.hpp"

namespace fsdplab {

std::string rank_failed_text(int rank, std::string_view reason) {
  const std::string named = "rank " + std::to_string(rank) + ": ";
  if (reason.starts_with(named)) reason.remove_prefix(named.size());
  return "rank " + std::to_string(rank) + " failed: " + std::string(reason);
}

// A collective meets three times, so that one rank's data can be read by its peers in place:
//   0 arrived        fingerprints compared, start time agreed (before the op is launched);
//   1 launched       inside the op's body: every rank passed its launch checks, so none will unwind
//                    and free the buffers its peers are about to read (nor leave: [Note: leaving a round]);
//   2 read           every rank has read what it needs from its peers into scratch of its own, so a
//                    rank may now write its output even where it is a peer's input (in-place
//                    collectives, all_reduce) without a peer reading half-written data.
// On a dry run the body never runs, so only the first meeting happens (dry_run is in the
// fingerprint, so every rank of the group agrees on that).
//
// [Note: who stops waiting for a failed rank]
// A rank that fails leaves the world (abort). Its peers stop waiting where they would wait for it:
// - at a collective's first meeting (arrive), a rank waits while every member of the collective's group can still
//   come, and stops once one of them has failed. A failure in another group does not stop it: its group meets, and
//   its op is launched, as it would have been. So ranks that run the same wrong code each reach the same fault of
//   their own (the race detector's check of the op, at its launch), whatever the threads' timing, and the world
//   reports the lowest of them ([Note: which failure a world reports], world.cpp). Were a failure anywhere to stop
//   it, a rank waiting for a healthy peer would not reach its own fault whenever another group's rank got to the
//   same fault first (a hybrid shard run's race on the compute stream, at W = 4, was reported by rank 1 in one run
//   of four). A rank that stops fails in turn, which frees the ranks that wait for it: none is left waiting. Ranks
//   still running that wait for each other, where no failure stops them, are a deadlock (see_deadlock), told at once
//   as in a world where nobody failed;
// - at the later meetings, inside the op's body, a failure anywhere in the world stops the round (those meetings
//   end the data's exchange, [Note: leaving a round]).

// [Note: leaving a round]
// A rank that stops waiting at a meeting (a peer failed elsewhere in the world, a timeout) unwinds and frees what it
// brought, its input among it: it may leave only where no peer reads, or will read, that input.
// - Before meeting 1 completes nobody reads: a rank that leaves there takes its arrival back, so that meeting can no
//   longer complete and its peers leave too (nobody reads a buffer of a rank that left).
// - At meeting 2 every rank of the group passed meeting 1: each reads, or has read. A rank leaves only once every
//   peer's reads have ended (Round::reads_ended: a copy or a sum, no wait, so they end by themselves, an exception
//   included); where that completes the meeting, nobody leaves.
// Without this, a rank done reading first left while a slower peer still read its memory, which the rank's device
// then gave back to the system: a crash of the whole process instead of the peer's error.
//
// On the cuda device (ranks sharing a GPU) the data moves on the GPU, ordered by events instead of by the
// host: each rank records `ready` where its stream reaches the collective and brings it to the first
// meeting; each rank's stream waits for its peers' `ready`, then copies from (or reduces over) their
// buffers; then each records `done`, the ranks meet once more to hand those over, and each stream waits
// for every peer's `done` before it goes on, so no rank overwrites or frees its input while a peer still
// reads it. The host never waits for the GPU.
constexpr int kPhases = 3;
constexpr int kReadsMeeting = 2;  // the meeting after the reads of the peers' inputs
constexpr std::array<const char*, kPhases> kNeverDid = {"arrived", "launched its op",
                                                        "finished reading its peers' data"};

struct LocalWorld::Call : CollectiveFingerprint {
  // What the rank brings.
  SimTime earliest = 0;             // when its stream could start the op
  SimTime duration = 0;             // the op's time by its device's cost model
  const std::byte* input = nullptr; // what its peers read (null on a dry run)
  int color = 0;                    // split only
  Event ready{"collective.ready"};  // cuda device: its input is ready where its stream reached the call
  Event done{"collective.done"};    // cuda device: it has read its peers' inputs (set in phase 1)
};

struct LocalWorld::Round {
  Round(const std::vector<int>& members, std::uint64_t seq) : members(members), seq(seq), calls(members.size()) {
    reached.fill(std::vector<bool>(members.size(), false));
  }
  std::vector<int> members;  // world ranks, in group-rank order
  std::uint64_t seq;         // the collective's number in its group
  std::vector<Call> calls;   // by group rank
  std::array<std::vector<bool>, kPhases> reached;
  std::array<std::size_t, kPhases> count{};
  std::size_t reads_ended = 0;    // ranks whose reads of their peers' inputs ended ([Note: leaving a round])
  std::string mismatch;           // set when the calls disagree
  std::vector<int> split_groups;  // split: each member's new group
};

namespace {

using Kind = CollectiveKind;

}  // namespace

// ---- LocalWorld -------------------------------------------------------------------------------

LocalWorld::LocalWorld(int size, LocalWorldOptions options) : size_(size), options_(options) {
  check(size >= 1 && size <= kMaxLocalRanks, "local world of ", size, " ranks; expected 1 to ", kMaxLocalRanks,
        " (each rank is a thread with its own device)");
  check(options.timeout.count() > 0, "local world: timeout of ", options.timeout.count(), " ms; expected > 0");
}

LocalWorld::~LocalWorld() = default;

void LocalWorld::abort(int rank, const std::string& reason) {
  bool first = false;
  {
    std::lock_guard lock(mutex_);
    failed_.insert(rank);
    if (!failure_) {
      failure_ = RankFailure{rank, reason};
      first = true;
    }
    see_deadlock();  // the ranks still running may now all wait for each other
  }
  changed_.notify_all();
  if (first && options_.on_abort) options_.on_abort(rank, reason);
}

std::optional<RankFailure> LocalWorld::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

std::shared_ptr<LocalWorld::Round> LocalWorld::arrive(const Seat& seat, const Call& call) {
  const std::vector<int>& members = *seat.members;
  std::unique_lock lock(mutex_);
  auto key = std::make_pair(seat.group, seat.seq);
  std::shared_ptr<Round>& slot = rounds_[key];
  if (!slot) slot = std::make_shared<Round>(members, seat.seq);
  const std::shared_ptr<Round> round = slot;
  round->calls[static_cast<std::size_t>(seat.index)] = call;
  round->reached[0][static_cast<std::size_t>(seat.index)] = true;
  if (++round->count[0] == members.size()) {
    // The last to arrive settles the round for everyone, under the lock; nobody looks it up again.
    rounds_.erase(key);
    const std::vector<Call>& calls = round->calls;
    for (std::size_t i = 1; i < calls.size() && round->mismatch.empty(); ++i) {
      if (!calls[i].same_call(calls[0]))
        round->mismatch = mismatch_message(members, i, calls[i], calls[0], seat.seq);
    }
    if (round->mismatch.empty() && calls[0].kind == Kind::split) {
      std::map<int, int> group_of_color;
      for (const Call& c : calls) {
        auto [it, added] = group_of_color.try_emplace(c.color, next_group_);
        if (added) ++next_group_;
        round->split_groups.push_back(it->second);
      }
    }
    // Only a completed round (or an abort) lets anyone go on: waking every waiter at every arrival
    // would cost W^2 wake-ups a collective, which dominates at hundreds of ranks on a few cores.
    changed_.notify_all();
  }
  ++progress_;
  wait_locked(lock, *round, seat, 0);
  if (!round->mismatch.empty()) fail(round->mismatch);
  return round;
}

void LocalWorld::wait_phase(Round& round, const Seat& seat, int phase) {
  std::unique_lock lock(mutex_);
  const auto p = static_cast<std::size_t>(phase);
  round.reached[p][static_cast<std::size_t>(seat.index)] = true;
  if (++round.count[p] == seat.members->size()) changed_.notify_all();
  ++progress_;
  wait_locked(lock, round, seat, phase);
}

void LocalWorld::end_reads(Round& round) {
  std::lock_guard lock(mutex_);
  if (++round.reads_ended == round.members.size()) changed_.notify_all();
}

void LocalWorld::wait_locked(std::unique_lock<std::mutex>& lock, Round& round, const Seat& seat, int phase) {
  const auto p = static_cast<std::size_t>(phase);
  const std::vector<int>& members = *seat.members;
  // The timeout counts from the world's last progress (any rank reaching any collective), not from when
  // this rank began waiting: with hundreds of ranks on a few cores, a healthy peer can take longer than
  // the timeout to get CPU time and arrive, but some rank arrives somewhere all the while.
  // A hold (options_.hold) is asked at every quarter of the timeout, so a hold longer than that restarts
  // the count; without one, the wait wakes once a timeout to look at the progress.
  // A deadlock (see_deadlock) ends every wait at once.
  const auto stop = [&] { return stopped_by_a_failure(round, phase); };
  const auto done = [&] { return round.count[p] == members.size() || stop() || !stuck_.empty(); };
  // Registered as waiting until this returns or throws.
  const int me = members[static_cast<std::size_t>(seat.index)];
  waiting_[me] = Waiting{&round, seat.index, phase};
  const struct Unregister {
    std::map<int, Waiting>& waiting;
    int rank;
    ~Unregister() { waiting.erase(rank); }
  } unregister{waiting_, me};
  if (!done()) see_deadlock();
  using Clock = std::chrono::steady_clock;
  const auto poll = options_.hold ? std::max(options_.timeout / 4, std::chrono::milliseconds(1)) : options_.timeout;
  auto quiet_since = Clock::now();
  for (std::uint64_t seen = progress_; !changed_.wait_for(lock, poll, done);) {
    if (progress_ != seen || (options_.hold && options_.hold())) {
      seen = progress_;
      quiet_since = Clock::now();
    } else if (Clock::now() - quiet_since >= options_.timeout) {
      break;
    }
  }
  // A rank leaves no reader behind: see [Note: leaving a round].
  if (phase == kReadsMeeting) changed_.wait(lock, [&] { return round.reads_ended == members.size(); });
  // A round everyone reached completes even if a failure came meanwhile: the next call reports it.
  if (round.count[p] == members.size()) return;
  if (phase < kReadsMeeting) {  // this rank leaves: its arrival taken back
    round.reached[p][static_cast<std::size_t>(seat.index)] = false;
    --round.count[p];
  }
  // Every rank of a deadlock fails of its own accord, with the same words: the world reports its lowest rank.
  if (!stuck_.empty()) fail_as<CollectiveTimedOut>(stuck_);

  const std::string where = describe(round.calls[static_cast<std::size_t>(seat.index)], seat.seq, members) +
                            " of group " + group_str(members);
  if (stop())
    fail_as<PeerFailed>("rank ", me, " stopped waiting in ", where, ": ",
                        rank_failed_text(failure_->rank, failure_->reason));
  std::vector<int> missing;
  for (std::size_t i = 0; i < members.size(); ++i)
    if (!round.reached[p][i] && static_cast<int>(i) != seat.index) missing.push_back(members[i]);
  std::ostringstream who;
  who << (missing.size() == 1 ? "rank " : "ranks ");
  for (std::size_t i = 0; i < missing.size(); ++i) who << (i ? ", " : "") << missing[i];
  std::ostringstream waited;
  waited << std::fixed << std::setprecision(1) << static_cast<double>(options_.timeout.count()) / 1000.0;
  // Many rank threads to a core: a healthy rank may take longer than the timeout between two collectives.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string crowded =
      static_cast<unsigned>(size_) > 4 * cores
          ? " (" + std::to_string(size_) + " rank threads share this machine's " + std::to_string(cores) +
                " cores, so a rank still computing can take longer than that to arrive: raise --comm-timeout)"
          : "";
  fail_as<CollectiveTimedOut>("rank ", me, " waited ", waited.str(), " s in ", where, "; ", who.str(), " never ",
                              kNeverDid[p], waiting_elsewhere(missing), crowded);
}

constexpr const char* kOnlySomeRanks =
    "a collective that only some ranks of its group issued, or issued in another order";
const std::string kWaitForEachOther = std::string(" (each waits for the other: ") + kOnlySomeRanks + ")";

std::string LocalWorld::waits_in(int rank) const {
  const Waiting& w = waiting_.at(rank);
  return "rank " + std::to_string(rank) + " waits in " +
         describe(w.round->calls[static_cast<std::size_t>(w.index)], w.round->seq, w.round->members) + " of group " +
         group_str(w.round->members);
}

std::string LocalWorld::waiting_elsewhere(const std::vector<int>& ranks) const {
  std::string text;
  for (int rank : ranks)
    if (waiting_.contains(rank)) text += std::string(text.empty() ? ": " : "; ") + waits_in(rank);
  return text.empty() ? text : text + kWaitForEachOther;
}

void LocalWorld::finish(int rank) {
  std::lock_guard lock(mutex_);
  finished_.insert(rank);
  see_deadlock();
}

// See [Note: who stops waiting for a failed rank].
bool LocalWorld::stopped_by_a_failure(const Round& round, int phase) const {
  if (phase > 0) return failure_.has_value();
  return std::any_of(round.members.begin(), round.members.end(), [&](int member) { return failed_.contains(member); });
}

void LocalWorld::see_deadlock() {
  // A rank is in one of the three at most: it waits inside a collective, and finishes or fails (run_world) once out.
  const std::size_t accounted_for = waiting_.size() + finished_.size() + failed_.size();
  if (!stuck_.empty() || waiting_.empty() || static_cast<int>(accounted_for) < size_) return;
  // A wait that completes, or that a failure stops (its rank then fails, and those waiting for it may go on), is
  // no deadlock.
  for (const auto& [rank, w] : waiting_)
    if (w.round->count[static_cast<std::size_t>(w.phase)] == w.round->members.size() ||
        stopped_by_a_failure(*w.round, w.phase))
      return;
  // Said by world rank, whichever rank saw it: the same words every run.
  std::string text = failed_.empty() ? "every rank waits in a collective that cannot complete: "
                                     : "every rank that has not failed waits in a collective that cannot complete: ";
  bool for_finished = false;
  for (const auto& [rank, w] : waiting_) {
    std::string who;
    int missing = 0;
    for (std::size_t i = 0; i < w.round->members.size(); ++i) {
      if (w.round->reached[static_cast<std::size_t>(w.phase)][i]) continue;
      const int peer = w.round->members[i];
      for_finished |= finished_.contains(peer);
      who += (missing++ ? ", " : "") + std::to_string(peer) + (finished_.contains(peer) ? " (it has finished)" : "");
    }
    text += (rank == waiting_.begin()->first ? "" : "; ") + waits_in(rank) + " for " +
            (missing == 1 ? "rank " : "ranks ") + who;
  }
  stuck_ = text + (for_finished ? std::string(" (") + kOnlySomeRanks + ")" : kWaitForEachOther);
  changed_.notify_all();
}

// ---- LocalComm --------------------------------------------------------------------------------

// What a collective does with the data: read the peers' inputs (by group rank) into the rank's own
// scratch, then write the rank's output from it.
// On the cuda device `enqueue` does both on the rank's stream, straight from the peers' buffers into
// the output: every collective here only writes what no peer reads (all_reduce reads everything, so its
// output is a scratch buffer, copied into place after the last meeting).
struct LocalComm::Exchange {
  OpCategory category;
  std::int64_t full_bytes;
  std::vector<Access> reads;   // declared to the device, for the race detector
  std::vector<Access> writes;
  std::function<void(const std::vector<const std::byte*>& inputs)> read;
  std::function<void()> write;
  std::function<void(CUstream_st* stream, const std::vector<const std::byte*>& inputs)> enqueue;
};

LocalComm::LocalComm(LocalWorld& world, int rank, Device& device)
    : LocalComm(world, device, 0, {}, rank) {
  check(rank >= 0 && rank < world.size(), "LocalComm: rank ", rank, " of a world of ", world.size());
  check(device.rank() == rank, "LocalComm: rank ", rank, " bound to rank ", device.rank(), "'s device");
  for (int r = 0; r < world.size(); ++r) members_.push_back(r);
}

LocalComm::LocalComm(LocalWorld& world, Device& device, int group, std::vector<int> members, int index)
    : world_(world), device_(device), group_(group), members_(std::move(members)), index_(index) {}

LocalWorld::Seat LocalComm::next_seat() { return LocalWorld::Seat{group_, &members_, index_, ++seq_}; }

void LocalComm::collective(Stream stream, LocalWorld::Call call, const Tensor& input, const Tensor& output,
                           const Exchange& exchange) {
  check(stream.device == &device_, "collective on rank ", stream.device ? stream.device->rank() : -1,
        "'s stream through rank ", device_.rank(), "'s communicator");
  const LocalWorld::Seat seat = next_seat();
  call.dry = device_.dry_run();
  const RankLink link = device_.cost_model().link_of(members_);
  call.earliest = device_.earliest_start(stream.lane, exchange.category, link);
  call.duration =
      device_.cost_model().collective(exchange.category, exchange.full_bytes, static_cast<int>(members_.size()), link);
  call.input = call.dry ? nullptr : input.device_address();  // read by the peers' op bodies
  const bool on_gpu = device_.kind() == DeviceKind::cuda;
  if (on_gpu) device_.record(call.ready, stream.lane);
  const std::shared_ptr<LocalWorld::Round> round = world_.arrive(seat, call);

  // Settled: every rank computes the same start and duration from the same calls. Duration is the
  // slowest rank's, should presets differ.
  OpSpec spec;
  std::vector<const std::byte*> inputs;
  for (const LocalWorld::Call& c : round->calls) {
    spec.not_before = std::max(spec.not_before, c.earliest);
    spec.duration = std::max(spec.duration, c.duration);
    inputs.push_back(c.input);
  }
  const std::string_view op = category_name(exchange.category);
  spec.name = output.name().empty() ? std::string(op) : std::string(op) + " " + output.name();
  spec.category = exchange.category;
  spec.link = link;
  spec.bytes_moved = exchange.full_bytes;
  spec.reads = exchange.reads;
  spec.writes = exchange.writes;
  if (!on_gpu) {
    device_.launch(stream.lane, std::move(spec), {.host = [&] {
      world_.wait_phase(*round, seat, 1);
      {
        // On every way out of the reads, an exception's too: see [Note: leaving a round].
        const struct ReadsEnd {
          LocalWorld& world;
          LocalWorld::Round& round;
          ~ReadsEnd() { world.end_reads(round); }
        } reads_end{world_, *round};
        exchange.read(inputs);
      }
      world_.wait_phase(*round, seat, kReadsMeeting);
      exchange.write();
    }});
    return;
  }
  for (std::size_t i = 0; i < round->calls.size(); ++i)
    if (static_cast<int>(i) != index_) device_.wait(stream.lane, round->calls[i].ready);
  device_.launch(stream.lane, std::move(spec), {.cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* s) {
                                                  exchange.enqueue(s, inputs);
                                                })});
  // Each rank writes only its own slot before the meeting and reads the others' after it: the world's lock
  // orders the two.
  LocalWorld::Call& mine = round->calls[static_cast<std::size_t>(index_)];
  device_.record(mine.done, stream.lane);
  world_.wait_phase(*round, seat, 1);
  for (std::size_t i = 0; i < round->calls.size(); ++i)
    if (static_cast<int>(i) != index_) device_.wait(stream.lane, round->calls[i].done);
}

void LocalComm::all_gather(Stream stream, const Tensor& shard, const Tensor& full) {
  check_all_gather(shard, full, world(), rank(), device_);
  LocalWorld::Call call;
  call.kind = Kind::all_gather;
  call.dtype = full.dtype();
  call.count = full.numel();
  std::vector<std::byte> gathered;
  const auto chunk = static_cast<std::size_t>(shard.nbytes());
  const Exchange exchange{OpCategory::all_gather, full.nbytes(), {shard.access()}, {full.access()},
                          [&](const std::vector<const std::byte*>& inputs) {
                            gathered.resize(chunk * inputs.size());
                            for (std::size_t i = 0; i < inputs.size(); ++i)
                              std::memcpy(gathered.data() + i * chunk, inputs[i], chunk);
                          },
                          [&] { std::memcpy(full.raw(), gathered.data(), gathered.size()); },
                          FSDPLAB_CUDA_BODY([&](CUstream_st* s, const std::vector<const std::byte*>& inputs) {
                            // In place, chunk r of full is rank r's shard already: copy_bytes skips it.
                            for (std::size_t i = 0; i < inputs.size(); ++i)
                              cuda::copy_bytes(s, full.raw() + i * chunk, inputs[i], static_cast<std::int64_t>(chunk));
                          })};
  collective(stream, call, shard, full, exchange);
}

void LocalComm::reduce_scatter(Stream stream, const Tensor& full, const Tensor& shard, ReduceOp op) {
  check_reduce_scatter(full, shard, world(), rank(), device_);
  LocalWorld::Call call;
  call.kind = Kind::reduce_scatter;
  call.op = op;
  call.dtype = full.dtype();
  call.count = full.numel();
  // Sized inside the exchange, which a dry run never enters: a 70B layer's shard is gigabytes.
  std::vector<float> sum;
  const auto my_chunk = static_cast<std::size_t>(shard.nbytes()) * static_cast<std::size_t>(index_);
  const Exchange exchange{OpCategory::reduce_scatter, full.nbytes(), {full.access()}, {shard.access()},
                          [&](const std::vector<const std::byte*>& inputs) {
                            sum = reduce_in_rank_order(inputs, my_chunk, shard.numel(), full.dtype(), op);
                          },
                          [&] { store_reduced(shard.raw(), sum, shard.dtype()); },
                          FSDPLAB_CUDA_BODY([&](CUstream_st* s, const std::vector<const std::byte*>& inputs) {
                            std::vector<const void*> chunks;
                            for (const std::byte* in : inputs) chunks.push_back(in + my_chunk);
                            cuda::reduce_peers(s, shard.dtype(), shard.raw(), chunks.data(),
                                               static_cast<int>(chunks.size()), shard.numel(),
                                               op == ReduceOp::avg ? static_cast<int>(chunks.size()) : 1);
                          })};
  collective(stream, call, full, shard, exchange);
}

void LocalComm::all_reduce(Stream stream, const Tensor& t, ReduceOp op) {
  check_all_reduce(t, device_);
  LocalWorld::Call call;
  call.kind = Kind::all_reduce;
  call.op = op;
  call.dtype = t.dtype();
  call.count = t.numel();
  std::vector<float> sum;  // sized inside the exchange, which a dry run never enters
  // On the GPU every rank reads all of every peer's tensor, so the sum goes to scratch and is copied into
  // place once every peer is done reading (after the collective's last meeting).
  const bool on_gpu = device_.kind() == DeviceKind::cuda;
  const Tensor scratch = on_gpu ? Tensor::empty(device_, t.shape(), t.dtype(), MemTag::comm_buffer,
                                                "all_reduce scratch", stream.lane)
                                : Tensor();
  const Exchange exchange{OpCategory::all_reduce, t.nbytes(), {t.access()}, {t.access()},
                          [&](const std::vector<const std::byte*>& inputs) {
                            sum = reduce_in_rank_order(inputs, 0, t.numel(), t.dtype(), op);
                          },
                          [&] { store_reduced(t.raw(), sum, t.dtype()); },
                          FSDPLAB_CUDA_BODY([&](CUstream_st* s, const std::vector<const std::byte*>& inputs) {
                            std::vector<const void*> all(inputs.begin(), inputs.end());
                            cuda::reduce_peers(s, t.dtype(), scratch.raw(), all.data(), static_cast<int>(all.size()),
                                               t.numel(), op == ReduceOp::avg ? static_cast<int>(all.size()) : 1);
                          })};
  collective(stream, call, t, t, exchange);
  if (on_gpu) copy(stream, scratch, t);
}

void LocalComm::broadcast(Stream stream, const Tensor& t, int root) {
  check_broadcast(t, root, world(), device_);
  LocalWorld::Call call;
  call.kind = Kind::broadcast;
  call.dtype = t.dtype();
  call.count = t.numel();
  call.root = root;
  std::vector<std::byte> received;
  const bool receives = root != index_;
  // The root only reads its buffer; everyone else's is only written.
  std::vector<Access> reads, writes;
  (receives ? writes : reads).push_back(t.access());
  const Exchange exchange{OpCategory::broadcast, t.nbytes(), reads, writes,
                          [&](const std::vector<const std::byte*>& inputs) {
                            if (!receives) return;
                            const std::byte* from = inputs[static_cast<std::size_t>(root)];
                            received.assign(from, from + t.nbytes());
                          },
                          [&] {
                            if (receives) std::memcpy(t.raw(), received.data(), received.size());
                          },
                          FSDPLAB_CUDA_BODY([&](CUstream_st* s, const std::vector<const std::byte*>& inputs) {
                            if (receives)
                              cuda::copy_bytes(s, t.raw(), inputs[static_cast<std::size_t>(root)], t.nbytes());
                          })};
  collective(stream, call, t, t, exchange);
}

void LocalComm::barrier() {
  LocalWorld::Call call;
  call.kind = Kind::barrier;
  world_.arrive(next_seat(), call);
}

std::unique_ptr<Communicator> LocalComm::split(int color) {
  check(color >= 0, "split: color ", color, "; expected >= 0");
  LocalWorld::Call call;
  call.kind = Kind::split;
  call.color = color;
  const std::shared_ptr<LocalWorld::Round> round = world_.arrive(next_seat(), call);
  std::vector<int> members;
  int index = 0;
  for (std::size_t i = 0; i < round->calls.size(); ++i) {
    if (round->calls[i].color != color) continue;
    if (static_cast<int>(i) == index_) index = static_cast<int>(members.size());
    members.push_back(members_[i]);
  }
  return std::unique_ptr<Communicator>(
      new LocalComm(world_, device_, round->split_groups[static_cast<std::size_t>(index_)], std::move(members), index));
}

}  // namespace fsdplab
