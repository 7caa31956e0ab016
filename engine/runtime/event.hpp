// event.hpp — a point in a stream's work that other streams, other ranks and the host can wait for,
// as a CUDA event is. Created by the program, recorded by a Device (Event::time is defined in device.cpp).
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

}  // namespace fsdplab
