// observed_communicator.hpp — a Communicator that tells the rank's FSDP observer about every collective
// passing through it: "collective issued" before the call, "collective done" after it with the op's
// virtual [begin, end], both attributed to the code running on the rank (FsdpRank::activity; see
// fsdp_events.hpp for how a prefetch is told apart).
//
// A decorator rather than hooks in LocalComm, so FSDP code reports its collectives whatever carries them
// (LocalComm, NcclComm) and the communicators stay ignorant of FSDP. The op's times are read from the
// trace event the device emits when the collective launches its op (a sink held for the call's length):
// on the sim device they are known when the call returns. With no observer set it only forwards.
#pragma once
#include <memory>
#include <string_view>

#include "engine/comm/communicator.hpp"
#include "engine/fsdp/fsdp_unit.hpp"

namespace fsdplab {

class ObservedCommunicator final : public Communicator {
 public:
  explicit ObservedCommunicator(Communicator& inner) : inner_(inner) {}
  // Reports to `rank.observer` from now on (while it is set). The rank holds a reference to this
  // communicator, so it is built first and bound here after.
  void report_to(FsdpRank& rank) { rank_ = &rank; }

  int rank() const override { return inner_.rank(); }
  int world() const override { return inner_.world(); }
  void all_gather(Stream stream, const Tensor& shard, const Tensor& full) override;
  void reduce_scatter(Stream stream, const Tensor& full, const Tensor& shard, ReduceOp op) override;
  void all_reduce(Stream stream, const Tensor& t, ReduceOp op) override;
  void broadcast(Stream stream, const Tensor& t, int root) override;
  // Host-side ordering, no op on any stream: forwarded without an event.
  void barrier() override { inner_.barrier(); }
  // The new group, observed for the same rank.
  std::unique_ptr<Communicator> split(int color) override;

 private:
  ObservedCommunicator(std::unique_ptr<Communicator> owned, FsdpRank* rank)
      : owned_(std::move(owned)), inner_(*owned_), rank_(rank) {}
  // Runs `call` (the collective on the inner communicator) between its two events. `full` is the whole
  // buffer (its bytes are the event's), `stream` where it is issued.
  template <class Call>
  void observed(std::string_view collective, Stream stream, const Tensor& full, const Call& call);

  std::unique_ptr<Communicator> owned_;  // a split's group; null for one wrapped by reference
  Communicator& inner_;
  FsdpRank* rank_ = nullptr;
};

}  // namespace fsdplab
