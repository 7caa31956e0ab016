// event.hpp — a point in a stream's work that other streams, other ranks and the host can wait for,
// as a CUDA event is. Created by the program, recorded by one rank's Device (Event's functions are defined in
// device.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/runtime/sim_time.hpp"
#include "engine/trace/trace_event.hpp"

namespace fsdplab {

// One entry per lane (the streams and the host): how many ops of that lane happen-before a point.
// The sim device's race detector compares these; see race_detector.hpp.
using VectorClock = std::array<std::uint64_t, kLaneCount>;

class Event {
 public:
  explicit Event(std::string name = "event") : name_(std::move(name)) {}

  bool recorded() const { return recorded_; }
  const std::string& name() const { return name_; }
  // Sim device: the virtual time at which all work before the record is done. Cuda device: the host's
  // time when it was recorded (when the work is done is asked with Device::completed). An Error if never
  // recorded.
  SimTime time() const;
  int rank() const { return rank_; }
  Lane lane() const { return lane_; }

 private:
  friend class SimDevice;
  friend class CudaDevice;
  // Before rank `rank`'s device records it: an Error where another rank recorded it last. See [Note: an event
  // belongs to one rank].
  void check_recorded_by(int rank) const;

  std::string name_;
  bool recorded_ = false;
  SimTime time_ = 0;
  int rank_ = -1;
  Lane lane_ = Lane::compute;
  const void* device_ = nullptr;  // the device that recorded it: only its own events order its memory's accesses
  OpRef last_op;       // the last op before the record, {rank, 0} if the stream was empty
  VectorClock clock{};
  // The cuda device's cudaEvent_t, made afresh at each record so a copy keeps the record it was copied
  // from, as the sim device's values do; destroyed with the last copy.
  std::shared_ptr<void> native;
};

// [Note: an event belongs to one rank]
// A CUDA event belongs to the GPU it was made on: only that GPU's streams record it. In this lab a rank is a GPU
// with a thread of its own, so an Event that two ranks record is one object that two threads write at once: a
// `static Event`, or an Event member of a task (a task is one object that every rank's thread calls; its methods are
// const). On the cuda device their records would race on its native event, each replacing it under the other; on
// the sim device they would only mix the two ranks' times, and the run would look right. So both devices refuse a
// record by another rank than the one that recorded the event last: each rank makes its own (a local Event, or one
// kept in its unit's or its rank's state). Waiting for another rank's event stays allowed: it only orders time, as a
// collective does.

}  // namespace fsdplab
