// local_comm.hpp — collectives between ranks that are threads of one process.
//
// LocalWorld is the shared meeting point of W ranks; LocalComm is one rank's handle, bound to that
// rank's Device. A collective is a rendezvous keyed by (group, sequence number): every rank states
// what it is calling (a fingerprint: op, dtype, element count, root) and when its stream could start
// it. When the whole group is there the fingerprints must agree, or every rank throws an Error naming
// both differing calls. On the sim device the op starts at the latest of the ranks' earliest starts and
// lasts the cost model's time, so its begin and end are identical on every rank, and the data moves inside
// the op's body, on the host's memory, while the ranks are still meeting. On the cuda device (ranks sharing
// one GPU) the data moves on the GPU, each stream ordered after its peers' by events, and the times are the
// GPU's own (see local_comm.cpp).
//
// Nothing hangs: a rank that fails (abort) makes the others throw, each where it next waits for it (see
// [Note: who stops waiting for a failed rank], local_comm.cpp), and one that stalls makes them throw once no
// rank has reached any collective for the timeout (unless the world is held), each saying what it was waiting for.
// (Progress, not each rank's own wait, is timed: 1024 ranks on two cores wait long for their turn.)
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/comm/communicator.hpp"

namespace fsdplab {

// Each rank is a thread with its own device (streams, allocator, tensors): 1024 covers the design's
// 128-rank dry runs with room, and beyond it one process is the wrong tool.
constexpr int kMaxLocalRanks = 1024;

struct LocalWorldOptions {
  // How long a rank waiting for its peers at any point of a collective lets the world go without progress
  // (no rank reaching any collective) before it gives up.
  std::chrono::milliseconds timeout{5000};
  // While it returns true the world's no-progress timeout does not count: a rank deliberately held
  // (paused in step-through) must not make its peers give up on it. Asked, under the world's lock, by
  // waiting ranks every quarter of the timeout; it must not call into this world. None: never held.
  std::function<bool()> hold{};
  // Called once, with the first failure, outside the world's lock: what else must stop when a rank fails
  // (rank_launch.cpp aborts the NCCL communicators of the ranks, freeing peers stuck in a collective kernel).
  std::function<void(int rank, const std::string& reason)> on_abort{};
};

struct RankFailure {
  int rank = -1;
  std::string reason;
};

// "rank 2 failed: REASON", the rank named once: a REASON that names the same rank first ("rank 2: stream compute
// waits on event ...", as the sim device's errors do) gives "rank 2 failed: stream compute waits on event ...".
std::string rank_failed_text(int rank, std::string_view reason);

class LocalWorld {
 public:
  explicit LocalWorld(int size, LocalWorldOptions options = {});
  ~LocalWorld();
  LocalWorld(const LocalWorld&) = delete;
  LocalWorld& operator=(const LocalWorld&) = delete;

  int size() const { return size_; }

  // Rank `rank` has failed (of its own accord, or because a peer did): it makes no more collectives, and its peers
  // throw where they would wait for it, naming the world's first failure ([Note: who stops waiting for a failed
  // rank]). The first failure is kept; the errors it causes in the peers do not replace it.
  void abort(int rank, const std::string& reason);
  // Rank `rank` has done its work and makes no more collectives (run_world calls it): a peer still waiting for it
  // in a collective is told so at once, with the other waits (a deadlock), instead of after the timeout.
  void finish(int rank);
  std::optional<RankFailure> failure() const;

  // The rendezvous' own types, complete only in local_comm.cpp.
  struct Call;   // what one rank brings to a collective
  struct Round;  // one collective's meeting: who has come, and what they brought

 private:
  friend class LocalComm;
  struct Seat {  // where one rank sits in a group
    int group = 0;
    const std::vector<int>* members = nullptr;  // world ranks, in group-rank order
    int index = 0;                               // this rank's group rank
    std::uint64_t seq = 0;                       // this collective's number in the group, from 1
  };

  // Joins the round and waits until the whole group has come; returns the round (every call it
  // holds agrees) or throws on a mismatch, an abort or a timeout.
  std::shared_ptr<Round> arrive(const Seat& seat, const Call& call);
  // A later step of the same collective: waits until the whole group has reached step `phase`.
  void wait_phase(Round& round, const Seat& seat, int phase);
  void wait_locked(std::unique_lock<std::mutex>& lock, Round& round, const Seat& seat, int phase);
  // This rank's reads of its peers' inputs in `round` have ended (see [Note: leaving a round], local_comm.cpp).
  void end_reads(Round& round);
  // Under the lock: "rank 0 waits in all_reduce(avg) #1 ... of group [0, 2]" for world rank `rank`, waiting now.
  std::string waits_in(int rank) const;
  // For a timeout's error, under the lock: ": rank 0 waits in ..." for each of `ranks` that waits in another
  // collective (a collective its peers never issue), "" where none does.
  std::string waiting_elsewhere(const std::vector<int>& ranks) const;
  // Under the lock: whether a rank waiting at step `phase` of `round` stops because a rank failed (see [Note: who
  // stops waiting for a failed rank], local_comm.cpp).
  bool stopped_by_a_failure(const Round& round, int phase) const;
  // Under the lock: where every rank of the world waits in a collective, has finished or has failed, and no wait can
  // complete or be stopped by a failure (each lacks a rank that waits in another or has finished), the deadlock, said
  // rank by rank, ends every wait (stuck_): no rank waits out the timeout for what cannot come.
  void see_deadlock();

  const int size_;
  const LocalWorldOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::pair<int, std::uint64_t>, std::shared_ptr<Round>> rounds_;  // by (group, seq)
  std::optional<RankFailure> failure_;
  std::set<int> failed_;        // every rank that failed (abort): none of them comes to another collective
  std::uint64_t progress_ = 0;  // arrivals at any step of any collective, for the timeout
  struct Waiting {              // where a rank waits in wait_locked
    const Round* round = nullptr;
    int index = 0;  // its group rank
    int phase = 0;
  };
  std::map<int, Waiting> waiting_;  // by world rank
  std::set<int> finished_;          // ranks whose work is done (finish)
  std::string stuck_;               // the deadlock, once seen
  int next_group_ = 1;  // group 0 is the whole world
};

class LocalComm final : public Communicator {
 public:
  // Rank `rank`'s handle on the group of all ranks; `device` must be that rank's.
  LocalComm(LocalWorld& world, int rank, Device& device);
  // A copy would share the group but count its collectives separately, out of step with its peers.
  LocalComm(const LocalComm&) = delete;
  LocalComm& operator=(const LocalComm&) = delete;

  int rank() const override { return index_; }
  int world() const override { return static_cast<int>(members_.size()); }
  // The group's members as world ranks, in group-rank order.
  const std::vector<int>& members() const { return members_; }

  void all_gather(Stream stream, const Tensor& shard, const Tensor& full) override;
  void reduce_scatter(Stream stream, const Tensor& full, const Tensor& shard, ReduceOp op) override;
  void all_reduce(Stream stream, const Tensor& t, ReduceOp op) override;
  void broadcast(Stream stream, const Tensor& t, int root) override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color) override;

 private:
  struct Exchange;
  LocalComm(LocalWorld& world, Device& device, int group, std::vector<int> members, int index);
  LocalWorld::Seat next_seat();
  void collective(Stream stream, LocalWorld::Call call, const Tensor& input, const Tensor& output,
                  const Exchange& exchange);

  LocalWorld& world_;
  Device& device_;
  int group_;
  std::vector<int> members_;
  int index_;
  std::uint64_t seq_ = 0;
};

}  // namespace fsdplab
