#include "engine/fsdp/observed_communicator.hpp"

#include <cstdio>

#include "engine/fsdp/fsdp_events.hpp"
#include "engine/fsdp/fsdp_observer.hpp"

namespace fsdplab {
namespace {

// Holds a sink on the device for its lifetime and keeps the virtual times of the last communication op
// launched meanwhile: the collective's own op.
class CollectiveOpTimes final : public TraceSink {
 public:
  explicit CollectiveOpTimes(Device& device) : device_(device) { device_.add_sink(this); }
  ~CollectiveOpTimes() override { device_.remove_sink(this); }
  CollectiveOpTimes(const CollectiveOpTimes&) = delete;
  CollectiveOpTimes& operator=(const CollectiveOpTimes&) = delete;

  void on_event(const TraceEvent& event) override {
    if (!is_communication(event.category)) return;
    begin = event.begin;
    end = event.end;
  }
  void on_counter(const CounterSample&) override {}

  SimTime begin = 0, end = 0;

 private:
  Device& device_;
};

std::string microseconds(SimTime ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f us", ns_to_us(ns));
  return text;
}

}  // namespace

template <class Call>
void ObservedCommunicator::observed(std::string_view collective, Stream stream, const Tensor& full, const Call& call) {
  if (!rank_ || !rank_->observer) {
    call();
    return;
  }
  FsdpRank& rank = *rank_;
  FsdpActivity& activity = rank.activity;
  // The ops of a gather carry the unit they gather (unit_lifecycle.cpp), which is how a prefetch issued
  // from another unit's hook shows itself.
  const int unit = rank.device.labels().unit;
  const bool prefetch = collective == "all_gather" && activity.unit >= 0 && unit >= 0 && unit != activity.unit;
  const CodeSite site{activity.task, activity.code};
  const std::string size = size_text(full.nbytes(), full.dtype());
  std::string subject = unit_title(rank, unit);
  if (subject.empty()) subject = "'" + full.name() + "'";
  const auto& units = rank.schedule.units;
  const FsdpUnit* const moved = unit >= 0 && unit < static_cast<int>(units.size())
                                    ? units[static_cast<std::size_t>(unit)]
                                    : nullptr;
  const auto unit_state = [&] { return moved ? moved->state : UnitState::sharded; };
  activity.issued.push_back({std::string(collective), unit, prefetch, size});

  FsdpEvent event = make_event(FsdpEventKind::collective_issued, site.task, site.code,
                               std::string(collective) + " of " + subject + " (" + size + ") issued on the " +
                                   std::string(lane_name(stream.lane)) + " stream" +
                                   (prefetch ? ", fetching it ahead of its use" : ""));
  event.unit = unit;
  event.unit_name = moved ? moved->name : std::string();
  event.collective = std::string(collective);
  event.bytes = full.nbytes();
  event.unit_state = unit_state();
  report(rank, event);

  SimTime begin = 0, end = 0;
  {
    CollectiveOpTimes op(rank.device);
    call();
    begin = op.begin;
    end = op.end;
  }
  event.kind = FsdpEventKind::collective_done;
  event.device_begin = begin;
  event.device_end = end;
  event.unit_state = unit_state();
  event.what = std::string(collective) + " of " + subject + " (" + size + ") ran from " + microseconds(begin) + " to " +
               microseconds(end) + " on the device clock (" + microseconds(end - begin) + ")";
  report(rank, std::move(event));
}

void ObservedCommunicator::all_gather(Stream stream, const Tensor& shard, const Tensor& full) {
  observed("all_gather", stream, full, [&] { inner_.all_gather(stream, shard, full); });
}

void ObservedCommunicator::reduce_scatter(Stream stream, const Tensor& full, const Tensor& shard, ReduceOp op) {
  observed("reduce_scatter", stream, full, [&] { inner_.reduce_scatter(stream, full, shard, op); });
}

void ObservedCommunicator::all_reduce(Stream stream, const Tensor& t, ReduceOp op) {
  observed("all_reduce", stream, t, [&] { inner_.all_reduce(stream, t, op); });
}

void ObservedCommunicator::broadcast(Stream stream, const Tensor& t, int root) {
  observed("broadcast", stream, t, [&] { inner_.broadcast(stream, t, root); });
}

std::unique_ptr<Communicator> ObservedCommunicator::split(int color) {
  return std::unique_ptr<Communicator>(new ObservedCommunicator(inner_.split(color), rank_));
}

}  // namespace fsdplab
