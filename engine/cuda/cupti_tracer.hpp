// cupti_tracer.hpp — live GPU tracing with CUPTI's activity API, for the cuda device.
//
// What CUPTI records: CONCURRENT_KERNEL (never KERNEL, which serialises kernels and would hide the very
// overlap the lab measures), MEMCPY, MEMSET, SYNCHRONIZATION (the host's waits) and EXTERNAL_CORRELATION,
// which CUPTI writes only beside API records, so DRIVER and RUNTIME are on too (their busiest calls, the event
// records and queries around every op, trimmed) and skipped when read.
//
// CUPTI is one per process: one subscriber, activity kinds enabled for the whole process, buffers handed
// back on CUPTI's own threads. So the tracer is a process-wide session that the first device's link starts
// and the last one's ends; a device reaches it only through its CuptiLink:
//   attach   registers the device's four streams (CUPTI's stream ids) as its rank's lanes, and checks those ids
//            with a tiny kernel on each ([Note: checking CUPTI's stream ids], gpu_activity.hpp). When CUPTI cannot
//            trace (another client holds it: Nsight Systems, Nsight Compute, a debugger, a second subscriber;
//            or the driver refuses) it says why, and the device keeps its CUDA-event op spans.
//   issue    the device pushes an external correlation id (the link's source and the work's tag) around the
//            CUDA calls of each op, host copy and host wait, so their records come back with the op's labels.
//   drain    a flush thread calls cuptiActivityFlushAll every 100 ms; records are routed (GpuRecordRouter,
//            engine/trace/gpu_activity.hpp) into one mailbox per device, which the device empties on its own
//            thread where it already emits, because trace sinks are single-producer.
//   finish   after the device has synchronized: a flush, and the last of its records (the session's last
//            member forces a flush when it ends, for whatever no device is left to take).
// Times: CUPTI reads the clock through a callback the tracer registers, the host's steady clock, which is
// the cuda device's host clock; each device subtracts its own time zero (its GPU's epoch). The CUDA-event op
// times count from the moment the epoch's event completed on the GPU, and the epoch's host time was read
// when the host saw it, a few microseconds later: CUPTI's times read that much earlier than the op log's. The
// mapper measures that lead, to place a record in its op's span ([Note: the two clocks of a record and a span]
// in engine/trace/gpu_activity.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/trace/gpu_activity.hpp"
#include "engine/trace/trace_event.hpp"

struct CUstream_st;

namespace fsdplab::cuda {

// Totals over every session since the process started.
struct CuptiCounts {
  std::int64_t records = 0;     // kernels, copies, memsets and host waits read from CUPTI's buffers
  std::int64_t dropped = 0;     // records CUPTI could not store (cuptiActivityGetNumDroppedRecords)
  std::int64_t incomplete = 0;  // buffers a forced flush cut short at a record still running: the rest is lost
  std::int64_t untimed = 0;     // records CUPTI could not time, or only in part (no device memory): not traced
  std::int64_t orphaned = 0;    // device work no attached device could be found for
  std::int64_t unlabelled = 0;  // traced without their op's labels (no op, or its labels already forgotten)
  std::int64_t by_span = 0;     // labelled by their stream and their op's CUDA-event span (no external id came)
  std::int64_t restreamed = 0;  // streams whose id in CUPTI's records was not cuptiGetStreamIdEx's (corrected)
};
CuptiCounts cupti_counts();

// Says once per process and reason, on stderr, that a device's trace is its CUDA-event op spans and why.
void warn_cupti_off(const std::string& why);

struct CuptiMailbox;

class CuptiLink {
 public:
  // Connects rank `rank`'s device to the tracer, starting it if this is the first: `streams` are its streams
  // by lane, `epoch_ns` its time zero on the host's steady clock. Null, with `why_not` set, when CUPTI
  // cannot trace in this process now. Call on the device's thread with its GPU current.
  static std::unique_ptr<CuptiLink> attach(int rank, const std::array<CUstream_st*, kStreamCount>& streams,
                                           std::int64_t epoch_ns, std::string& why_not);
  ~CuptiLink();  // detaches; the last link ends the session and reports its totals on stderr
  CuptiLink(const CuptiLink&) = delete;
  CuptiLink& operator=(const CuptiLink&) = delete;

  // The CUDA calls made on this thread while a Scope lives are the work of `tag`: its external correlation
  // id is pushed and popped around them. Without a link (CUPTI off) it does nothing.
  class Scope {
   public:
    Scope(const CuptiLink* link, std::uint64_t tag);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    bool pushed_ = false;
  };

  // Work about to be issued, as the TraceEvent the device would emit for it; returns its tag.
  std::uint64_t issue(TraceEvent work) { return mapper_.issue(std::move(work)); }
  // The work's CUDA calls are done; records of it may still come for a while. An op on a stream gives its
  // span from its CUDA events (device time), by which records that came without its tag find it.
  void retire(std::uint64_t tag, std::optional<std::pair<SimTime, SimTime>> span = std::nullopt);
  // Appends the trace events of the records delivered since the last call (nothing to do, and no lock
  // taken, when there are none).
  void drain(std::vector<TraceEvent>& out);
  // The device has synchronized: flushes CUPTI (its records are complete; a forced flush would lose other
  // ranks' running ones) and drains the rest.
  void finish(std::vector<TraceEvent>& out);

 private:
  CuptiLink(int rank, std::uint32_t source, std::int64_t zero, std::shared_ptr<CuptiMailbox> mailbox);

  std::uint32_t source_;
  std::shared_ptr<CuptiMailbox> mailbox_;
  GpuActivityMapper mapper_;
};

}  // namespace fsdplab::cuda
