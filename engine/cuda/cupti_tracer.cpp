// cupti_tracer.cpp — the process's CUPTI session: subscribe, enable, read buffers, flush, route.
#include "engine/cuda/cupti_tracer.hpp"

#include <cupti.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include "engine/cuda/comm_kernels.hpp"
#include "engine/runtime/error.hpp"

namespace fsdplab::cuda {

// A device's records, routed on CUPTI's or the flush thread, taken on the device's own thread.
struct CuptiMailbox {
  std::mutex mutex;
  std::vector<RoutedRecord> records;
  std::atomic<bool> filled{false};  // read without the lock at every drain
};

namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr auto kFlushPeriod = std::chrono::milliseconds(100);
// A non-forced flush hands back only buffers whose every record is complete. A rank's thread (CUPTI keeps a
// buffer per thread) whose host runs ahead of its GPU always has a kernel still running in its buffer, which
// then comes back only once full: the buffer's size is how far the live view lags behind the GPU. 256 KiB is
// about 750 ops (a kernel record, its API record and its correlation each), a couple of GPT-2 124M steps.
constexpr std::size_t kBufferBytes = std::size_t{256} << 10;
constexpr CUpti_ExternalCorrelationKind kCorrelationKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;

// Prints `line` on stderr the first time it comes in this process.
void say_once(const std::string& line) {
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard lock(mutex);
  if (said.insert(line).second) std::fprintf(stderr, "%s\n", line.c_str());
}

std::string result_text(CUptiResult status) {
  const char* text = nullptr;
  if (cuptiGetResultString(status, &text) != CUPTI_SUCCESS || text == nullptr)
    return "CUPTI error " + std::to_string(status);
  return text;
}

// CUPTI's clock is the cuda device's host clock (cuda_device.cpp: the steady clock).
std::uint64_t CUPTIAPI steady_now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch()).count());
}

// The subscriber reserves CUPTI for this process; no callback of the callback API is enabled.
void CUPTIAPI no_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

std::string_view memcpy_name(std::uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "Memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "Memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "Memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "Memcpy HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "Memcpy PtoP";
    default: return "Memcpy";
  }
}

// The host waits that are time the host spent blocked; a stream's wait for an event is the GPU's, not traced.
std::optional<std::string_view> host_wait_name(CUpti_ActivitySynchronizationType type) {
  switch (type) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE: return "cudaEventSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE: return "cudaStreamSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE: return "cudaDeviceSynchronize";
    default: return std::nullopt;
  }
}

// [Note: which API records carry the external id]
// A device pushes an external id around each op's CUDA calls, and CUPTI writes an external correlation record
// (external id -> correlation id) for every *API record* made meanwhile; a kernel or copy carries the
// correlation id of the call that launched it. Only API calls whose kind is enabled make records. The first
// GPU run (an H100) enabled the driver API alone, and 2,516 of 5,801 records came without their op: the
// engine's own kernels and cudaMemcpyAsync copies, launched through the runtime, made no driver API record
// that the external id could attach to. With the runtime's records on as well (an H200), every record of the
// same runs came labelled. Both kinds are on, each trimmed of the calls around every launch that launch no
// work (event records, waits, queries, error reads). Work launched on another thread (NCCL may enqueue
// from its own) has no external id at all: the device's mapper then finds its op by the stream it ran on and
// the op's CUDA-event span (GpuActivityMapper::map).
class Tracer {
 public:
  // Never destroyed: CUPTI may hand back a buffer while the process exits.
  static Tracer& get() {
    static Tracer* tracer = new Tracer;
    return *tracer;
  }

  // Joins the session, starting it if nobody is in it; the reason when CUPTI cannot trace.
  std::optional<std::string> join() {
    std::lock_guard lock(session_mutex_);
    if (members_ == 0) {
      if (auto why = start()) return why;
    }
    ++members_;
    return std::nullopt;
  }

  void leave() {
    std::lock_guard lock(session_mutex_);
    if (--members_ == 0) stop();
  }

  std::uint32_t add_source(std::uint32_t device, const std::array<std::uint32_t, kStreamCount>& streams,
                           std::shared_ptr<CuptiMailbox> mailbox) {
    std::lock_guard lock(router_mutex_);
    const std::uint32_t source = next_source_++;
    router_.add_source(source);
    for (std::size_t lane = 0; lane < kStreamCount; ++lane) {
      if (!router_.add_stream(device, streams[lane], source, static_cast<Lane>(lane)))
        say_once("fsdplab: CUPTI gave two devices' streams one id (" + std::to_string(streams[lane]) +
                 "); a record without its op's id on that stream may be traced on the wrong rank");
    }
    mailboxes_[source] = std::move(mailbox);
    return source;
  }

  void remove_source(std::uint32_t source, const GpuActivityMapper& mapper) {
    std::lock_guard lock(router_mutex_);
    router_.remove_source(source);
    mailboxes_.erase(source);
    totals_.unlabelled += mapper.unlabelled();
    totals_.by_span += mapper.found_by_span();
    if (const std::optional<SimTime> lead = mapper.record_lead()) {
      char text[64];
      std::snprintf(text, sizeof text, "%.1f us (rank %d)", static_cast<double>(*lead) / 1e3, mapper.rank());
      leads_ += (leads_.empty() ? "" : ", ") + std::string(text);
    }
  }

  // Asks CUPTI for its buffers (with `forced`, also those still holding running work), then routes.
  void flush(bool forced) {
    {
      std::lock_guard lock(flush_mutex_);
      const CUptiResult status = cuptiActivityFlushAll(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
      if (status != CUPTI_SUCCESS)
        say_once("fsdplab: CUPTI did not hand back its buffers (" + result_text(status) +
                 "); the trace may miss records");
    }
    std::lock_guard lock(router_mutex_);
    router_.end_flush();
    flushes_.fetch_add(1, std::memory_order_relaxed);
    deliver();
  }

  void settle(std::uint32_t source) {
    std::lock_guard lock(router_mutex_);
    router_.settle(source);
    deliver();
  }

  std::int64_t flushes() const { return flushes_.load(std::memory_order_relaxed); }
  std::int64_t cupti_minus_steady() const { return cupti_minus_steady_; }

  CuptiCounts counts() {
    std::lock_guard lock(router_mutex_);
    CuptiCounts c = totals_;
    c.orphaned += router_.orphaned();
    c.restreamed += router_.restreamed();
    return c;
  }

 private:
  Tracer() = default;

  // ---- the session ----

  std::optional<std::string> start() {
    char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN] = {};
    CUpti_SubscriberParams params{};
    params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
    params.subscriberName = "fsdplab";
    params.oldSubscriberName = holder;
    params.oldSubscriberSize = sizeof holder;
    CUptiResult status = cuptiSubscribe_v2(&subscriber_, &no_callback, nullptr, &params);
    if (status == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      return std::string("another CUPTI client holds this process (") +
             (holder[0] ? holder : "Nsight Systems, Nsight Compute, a debugger or another profiler") + ")";
    }
    if (status != CUPTI_SUCCESS) return "CUPTI refused a subscriber: " + result_text(status);
    const auto undo = [&](const std::string& what, CUptiResult failed) {
      for (auto k = enabled_.rbegin(); k != enabled_.rend(); ++k) cuptiActivityDisable(*k);
      enabled_.clear();
      cuptiUnsubscribe(subscriber_);
      subscriber_ = nullptr;
      return what + ": " + result_text(failed);
    };
    // Once per process: the activity API's clock and buffers stay registered from one session to the next
    // (unsubscribing ends only the reservation), and CUPTI says nothing of registering them again.
    if (!callbacks_registered_) {
      // Before any kind is enabled, so every record reads the same clock.
      if ((status = cuptiActivityRegisterTimestampCallback(&steady_now_ns)) != CUPTI_SUCCESS)
        return undo("CUPTI refused the host clock as its timestamp", status);
      // A buffer per thread, before the callbacks as CUPTI wants it: a rank's records and their correlations come
      // in its own buffers, complete once its GPU has done the work (finish relies on it), and never held back
      // by another rank's running kernel. It is CUPTI's default, so a refusal changes nothing.
      std::uint8_t per_thread = 1;
      std::size_t per_thread_size = sizeof per_thread;
      cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER, &per_thread_size, &per_thread);
      if ((status = cuptiActivityRegisterCallbacks(&buffer_requested, &buffer_completed)) != CUPTI_SUCCESS)
        return undo("CUPTI refused the buffer callbacks", status);
      callbacks_registered_ = true;
    }
    // See [Note: which API records carry the external id].
    for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_DRIVER,
                                    CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                    CUPTI_ACTIVITY_KIND_MEMCPY,
                                    CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION}) {
      if ((status = cuptiActivityEnable(kind)) != CUPTI_SUCCESS)
        return undo("CUPTI refused activity kind " + std::to_string(kind), status);
      enabled_.push_back(kind);
    }
    // A trim, not a need: the event records, waits and queries around every op launch no work, and their API
    // records would only be read and skipped. Were one refused, its records would still come and be skipped.
    for (CUpti_CallbackId call :
         {CUPTI_DRIVER_TRACE_CBID_cuEventRecord, CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags,
          CUPTI_DRIVER_TRACE_CBID_cuEventQuery, CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent,
          CUPTI_DRIVER_TRACE_CBID_cuEventCreate, CUPTI_DRIVER_TRACE_CBID_cuEventDestroy_v2,
          CUPTI_DRIVER_TRACE_CBID_cuEventElapsedTime, CUPTI_DRIVER_TRACE_CBID_cuEventElapsedTime_v2})
      cuptiActivityEnableDriverApi(call, 0);
    for (CUpti_CallbackId call :
         {CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_v11010,
          CUPTI_RUNTIME_TRACE_CBID_cudaEventQuery_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020,
          CUPTI_RUNTIME_TRACE_CBID_cudaEventCreate_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaEventCreateWithFlags_v3020,
          CUPTI_RUNTIME_TRACE_CBID_cudaEventDestroy_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaEventElapsedTime_v3020,
          CUPTI_RUNTIME_TRACE_CBID_cudaEventElapsedTime_v12080, CUPTI_RUNTIME_TRACE_CBID_cudaStreamQuery_v3020,
          CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaPointerGetAttributes_v4000,
          CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaSetDevice_v3020})
      cuptiActivityEnableRuntimeApi(call, 0);
    // Event queries that found the work unfinished (resolve_timings asks at every launch) make no record. A trim
    // too: refused, those records come and are skipped.
    cuptiActivityEnableAllSyncRecords(0);
    // CUPTI's clock against the steady clock, read between two reads of it: zero but for the rounding, since
    // CUPTI reads the steady clock itself (the callback above).
    const std::uint64_t before = steady_now_ns();
    std::uint64_t cupti_now = 0;
    if ((status = cuptiGetTimestamp(&cupti_now)) != CUPTI_SUCCESS) return undo("CUPTI's clock", status);
    const std::uint64_t after = steady_now_ns();
    cupti_minus_steady_ =
        static_cast<std::int64_t>(cupti_now) - static_cast<std::int64_t>(before + (after - before) / 2);
    session_start_ = counts();
    stopping_ = false;
    flusher_ = std::thread([this] { run_flusher(); });
    return std::nullopt;
  }

  void stop() {
    {
      std::lock_guard lock(flusher_mutex_);
      stopping_ = true;
    }
    flusher_cv_.notify_all();
    flusher_.join();
    for (auto k = enabled_.rbegin(); k != enabled_.rend(); ++k) cuptiActivityDisable(*k);
    enabled_.clear();
    flush(true);  // whatever is left belongs to no device now: counted as orphaned
    count_dropped(nullptr, 0);  // what the forced flush's buffers could not hold
    {
      std::lock_guard lock(router_mutex_);
      router_.end_session();
    }
    cuptiUnsubscribe(subscriber_);
    subscriber_ = nullptr;
    const CuptiCounts now = counts();
    std::string report = "fsdplab: CUPTI traced " + std::to_string(now.records - session_start_.records) +
                         " records, " + std::to_string(now.dropped - session_start_.dropped) + " dropped";
    const auto add = [&](std::int64_t count, const char* what) {
      if (count > 0) report += ", " + std::to_string(count) + what;
    };
    add(now.incomplete - session_start_.incomplete, " buffers cut short at a record still running (a forced flush)");
    add(now.untimed - session_start_.untimed, " without whole times (CUPTI lacked device memory; not traced)");
    add(now.orphaned - session_start_.orphaned, " of no device (not traced)");
    add(now.unlabelled - session_start_.unlabelled, " without their op's labels");
    add(now.by_span - session_start_.by_span, " labelled by their stream and op span (no external id)");
    add(now.restreamed - session_start_.restreamed,
        " streams whose records carried another id than cuptiGetStreamIdEx gave (corrected from the records)");
    {
      std::lock_guard lock(router_mutex_);
      // [Note: the two clocks of a record and a span], as each device measured it last.
      if (!leads_.empty()) report += "; CUPTI's clock read earlier than the CUDA events' by " + leads_;
      leads_.clear();
    }
    std::fprintf(stderr, "%s\n", report.c_str());
  }

  void run_flusher() {
    std::unique_lock lock(flusher_mutex_);
    while (!flusher_cv_.wait_for(lock, kFlushPeriod, [&] { return stopping_; })) {
      lock.unlock();
      flush(false);
      lock.lock();
    }
  }

  // ---- buffers (CUPTI's threads, or the thread that flushes) ----

  static void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
    *buffer = get().take_buffer();  // null when memory is out: CUPTI counts what it then drops
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;
  }

  static void CUPTIAPI buffer_completed(CUcontext context, std::uint32_t stream, std::uint8_t* buffer, std::size_t,
                                        std::size_t valid) {
    Tracer& tracer = get();
    tracer.read(buffer, valid);
    tracer.count_dropped(context, stream);
    tracer.give_back(buffer);
  }

  // Adds what CUPTI could not store since it was last asked (it resets its count when read).
  void count_dropped(CUcontext context, std::uint32_t stream) {
    std::size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(context, stream, &dropped) != CUPTI_SUCCESS || dropped == 0) return;
    std::lock_guard lock(router_mutex_);
    totals_.dropped += static_cast<std::int64_t>(dropped);
  }

  std::uint8_t* take_buffer() {
    {
      std::lock_guard lock(buffers_mutex_);
      if (!spare_buffers_.empty()) {
        std::uint8_t* b = spare_buffers_.back();
        spare_buffers_.pop_back();
        return b;
      }
    }
    return static_cast<std::uint8_t*>(std::aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, kBufferBytes));
  }

  void give_back(std::uint8_t* buffer) {
    if (!buffer) return;
    std::lock_guard lock(buffers_mutex_);
    spare_buffers_.push_back(buffer);
  }

  // Two passes. A kernel's record takes its place in the buffer when it is launched, while the API record of
  // the call that launched it, and the external correlation just before that, are written when the call
  // returns: so the correlation usually comes *after* the kernel it names. The first pass reads the
  // correlations, the second the work; a record whose correlation is in a later buffer waits for it (the
  // router's patience).
  void read(std::uint8_t* buffer, std::size_t valid) {
    if (!buffer || valid == 0) return;
    std::lock_guard lock(router_mutex_);
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
      if (record->kind != CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) continue;
      const auto* c = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
      if (c->externalKind == kCorrelationKind) router_.add_correlation(c->correlationId, c->externalId);
    }
    record = nullptr;  // from the buffer's start again
    CUptiResult next = CUPTI_SUCCESS;
    while ((next = cuptiActivityGetNextRecord(buffer, valid, &record)) == CUPTI_SUCCESS) {
      switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
          add({GpuRecordKind::kernel, kernel_name(k->name), k->deviceId, k->streamId, k->correlationId, k->start,
               k->end, 0});
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
          add({GpuRecordKind::memcpy, memcpy_name(m->copyKind), m->deviceId, m->streamId, m->correlationId, m->start,
               m->end, static_cast<std::int64_t>(m->bytes)});
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
          add({GpuRecordKind::memset, "Memset", m->deviceId, m->streamId, m->correlationId, m->start, m->end,
               static_cast<std::int64_t>(m->bytes)});
          break;
        }
        case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
          const auto* s = reinterpret_cast<const CUpti_ActivitySynchronization2*>(record);
          if (const auto name = host_wait_name(s->type))
            add({GpuRecordKind::host_wait, *name, 0, s->streamId, s->correlationId, s->start, s->end, 0});
          break;
        }
        default: break;  // correlations (read above); the DRIVER and RUNTIME API records, on only for them
      }
    }
    // A record still being written when a forced flush handed its buffer back: it, and whatever follows it in
    // the buffer, is lost.
    if (next == CUPTI_ERROR_INVALID_KIND) ++totals_.incomplete;
    deliver();
  }

  void add(const GpuRecord& record) {
    ++totals_.records;
    // CUPTI had no device memory to time it (both 0), or timed it only in part: placed anywhere, such a record
    // would span the whole run on its lane.
    if (record.start == 0 || record.end == 0 || record.end < record.start) {
      ++totals_.untimed;
      return;
    }
    router_.add(record);
  }

  // A kernel's display name, made once per kernel and kept for the life of the process (records in the
  // devices' mailboxes point into it). CUPTI gives every record of a kernel the same name pointer.
  std::string_view kernel_name(const char* cupti_name) {
    if (!cupti_name) return "kernel";
    KernelName*& known = kernel_names_[cupti_name];
    if (!known || known->cupti != cupti_name) {  // new, or the address reused for another kernel's name
      kept_names_.push_back(KernelName{cupti_name, kernel_display_name(cupti_name)});
      known = &kept_names_.back();
    }
    return known->display;
  }

  // Moves what the router sent since the last time into the devices' mailboxes.
  void deliver() {
    for (auto& [source, records] : router_.take_routed()) {
      const auto it = mailboxes_.find(source);
      if (it == mailboxes_.end()) continue;  // the router forgets a removed source's records itself
      CuptiMailbox& box = *it->second;
      std::lock_guard lock(box.mutex);
      box.records.insert(box.records.end(), std::make_move_iterator(records.begin()),
                         std::make_move_iterator(records.end()));
      box.filled.store(true, std::memory_order_release);
    }
  }

  struct KernelName {
    std::string cupti;
    std::string display;
  };

  std::mutex session_mutex_;  // members_, start and stop
  int members_ = 0;
  CUpti_SubscriberHandle subscriber_ = nullptr;
  bool callbacks_registered_ = false;  // the timestamp and buffer callbacks, once per process
  std::vector<CUpti_ActivityKind> enabled_;
  CuptiCounts session_start_;
  std::int64_t cupti_minus_steady_ = 0;

  std::mutex flusher_mutex_;
  std::condition_variable flusher_cv_;
  bool stopping_ = false;
  std::thread flusher_;

  std::mutex flush_mutex_;  // one cuptiActivityFlushAll at a time

  std::mutex router_mutex_;  // everything below; taken by CUPTI's threads, never held while CUPTI is asked to flush
  GpuRecordRouter router_;
  std::map<std::uint32_t, std::shared_ptr<CuptiMailbox>> mailboxes_;
  std::uint32_t next_source_ = 1;
  CuptiCounts totals_;
  std::string leads_;  // each device's lead of CUPTI's clock when it left this session
  std::unordered_map<const char*, KernelName*> kernel_names_;
  std::deque<KernelName> kept_names_;
  std::atomic<std::int64_t> flushes_{0};

  std::mutex buffers_mutex_;
  std::vector<std::uint8_t*> spare_buffers_;
};

}  // namespace

CuptiCounts cupti_counts() { return Tracer::get().counts(); }

void warn_cupti_off(const std::string& why) {
  say_once("fsdplab: CUPTI tracing is off: " + why + "; the trace shows each op's CUDA-event span");
}

// ---- CuptiLink --------------------------------------------------------------------------------------

CuptiLink::Scope::Scope(const CuptiLink* link, std::uint64_t tag) {
  if (!link) return;
  const CUptiResult status = cuptiActivityPushExternalCorrelationId(kCorrelationKind, external_id(link->source_, tag));
  check(status == CUPTI_SUCCESS, "pushing CUPTI's external correlation id: ", result_text(status));
  pushed_ = true;
}

CuptiLink::Scope::~Scope() {
  if (pushed_) cuptiActivityPopExternalCorrelationId(kCorrelationKind, nullptr);
}

std::unique_ptr<CuptiLink> CuptiLink::attach(int rank, const std::array<CUstream_st*, kStreamCount>& streams,
                                             std::int64_t epoch_ns, std::string& why_not) {
  Tracer& tracer = Tracer::get();
  if (auto why = tracer.join()) {
    why_not = *why;
    return nullptr;
  }
  std::uint32_t device = 0;
  std::array<std::uint32_t, kStreamCount> ids{};
  CUptiResult status = cuptiGetDeviceId(nullptr, &device);
  for (std::size_t lane = 0; lane < kStreamCount && status == CUPTI_SUCCESS; ++lane)
    status = cuptiGetStreamIdEx(nullptr, streams[lane], 0, &ids[lane]);
  if (status != CUPTI_SUCCESS) {
    tracer.leave();
    why_not =
        "rank " + std::to_string(rank) + ": CUPTI does not know this device's streams (" + result_text(status) + ")";
    return nullptr;
  }
  auto mailbox = std::make_shared<CuptiMailbox>();
  const std::uint32_t source = tracer.add_source(device, ids, mailbox);
  std::unique_ptr<CuptiLink> link(
      new CuptiLink(rank, source, epoch_ns + tracer.cupti_minus_steady(), std::move(mailbox)));
  // [Note: checking CUPTI's stream ids]: a nanosecond's kernel on each stream, under its lane's probe tag.
  for (std::size_t lane = 0; lane < kStreamCount; ++lane) {
    const Scope probe(link.get(), probe_tag(static_cast<Lane>(lane)));
    spin(streams[lane], 1);
  }
  return link;
}

CuptiLink::CuptiLink(int rank, std::uint32_t source, std::int64_t zero, std::shared_ptr<CuptiMailbox> mailbox)
    : source_(source), mailbox_(std::move(mailbox)), mapper_(rank, zero) {}

CuptiLink::~CuptiLink() {
  Tracer& tracer = Tracer::get();
  tracer.remove_source(source_, mapper_);
  tracer.leave();
}

void CuptiLink::retire(std::uint64_t tag, std::optional<std::pair<SimTime, SimTime>> span) {
  mapper_.retire(tag, Tracer::get().flushes(), span);
}

void CuptiLink::drain(std::vector<TraceEvent>& out) {
  std::vector<RoutedRecord> records;
  if (mailbox_->filled.load(std::memory_order_acquire)) {
    std::lock_guard lock(mailbox_->mutex);
    records.swap(mailbox_->records);
    mailbox_->filled.store(false, std::memory_order_relaxed);
  } else if (mapper_.waiting() == 0) {
    return;  // nothing came, and nothing waits for an op that retired since
  }
  mapper_.map(records, Tracer::get().flushes(), out);
}

void CuptiLink::finish(std::vector<TraceEvent>& out) {
  Tracer& tracer = Tracer::get();
  // A default flush, not a forced one: the device has synchronized, so its records are complete and come back
  // (CUPTI keeps a buffer per thread), while a forced flush would also hand back the other ranks' records of
  // work still running, incomplete, and those are never delivered again. The session's last member forces.
  tracer.flush(false);
  tracer.settle(source_);
  drain(out);
  mapper_.finish(out);  // every op has retired: nothing waits for a span any more
}

}  // namespace fsdplab::cuda
