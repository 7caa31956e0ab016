// chrome_trace.cpp — the Chrome trace writer and reader; the layout is described in chrome_trace.hpp.
#include "engine/trace/chrome_trace.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <utility>

#include "engine/runtime/error.hpp"
#include "engine/runtime/input_file.hpp"
#include "engine/runtime/json_input.hpp"
#include "engine/runtime/output_file.hpp"
#include "engine/trace/trace_wire.hpp"

namespace fsdplab {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;  // keeps "ph, name, cat, pid, tid, ts, dur, args" readable

constexpr int kFormatVersion = 1;  // top-level "fsdplabTraceFormat": how our reader knows the file

// Nanoseconds in memory, microseconds as doubles in the file. Times are bounded so that ts + dur
// cannot overflow; below ~1e15 ns (11 days) a written time reads back to the same nanosecond, so a
// backend should count from the run's start, not from the epoch.
constexpr SimTime kMaxNs = 4'000'000'000'000'000'000;
constexpr double kMaxMicroseconds = 4e15;

// Thread ids. Streams start at 7 as in PyTorch traces, where 7 is the default stream. The host is 1,
// not 0: some Perfetto versions merge thread 0 into thread 1.
constexpr int kHostTid = 1;
constexpr std::array<int, kStreamCount> kStreamIds = {7, 8, 9, 10};

int tid_of(Lane lane) { return lane == Lane::host ? kHostTid : kStreamIds[lane_index(lane)]; }

std::optional<Lane> lane_of_tid(std::int64_t tid) {
  for (Lane lane : kAllLanes)
    if (tid_of(lane) == tid) return lane;
  return std::nullopt;
}

std::string track_name(Lane lane) {
  if (lane == Lane::host) return "host";
  return "stream " + std::to_string(tid_of(lane)) + " " + std::string(lane_name(lane));
}

// Kineto's categories: HTA and Perfetto's PyTorch views tell device work from host work by them.
std::string kineto_category(const TraceEvent& e) {
  if (e.lane == Lane::host) return "cpu_op";
  return e.category == OpCategory::memcpy ? "gpu_memcpy" : "kernel";
}

// HTA decides what a GPU event is from its name alone (hta/utils/utils.py, is_comm_kernel and
// is_memory_kernel); no field says "collective". Communication is `"ncclKernel" in name` in early
// versions, the regex `^nccl.*Kernel` in 0.5 (the PyPI release), `name.startswith("nccl")` on main;
// memory is a name starting with "Memcpy" or "Memset"; everything else is computation. So a
// collective whose name is not already an NCCL kernel's (CUPTI's ncclDevKernel_* are) is exported as
// "ncclKernel_<Collective> <our name>". The token is the key of HTA's own comm-type table
// (ncclKernel_AllGather, ncclKernel_ReduceScatter, ...) and satisfies all three rules; it names no
// NCCL algorithm, protocol or channel count that did not run, and whether NCCL ran at all is stated
// where HTA and people read it: distributedInfo.backend ("sim" for the simulator). Copies get a
// "Memcpy " prefix for the same reason, so HTA counts them as memory, not as computation. The
// original name goes to args.op_name, which our reader restores.
std::optional<std::string> hta_name(const TraceEvent& e) {
  if (e.lane == Lane::host) return std::nullopt;  // HTA classifies device events only
  if (is_communication(e.category) && !e.name.starts_with("nccl")) {
    std::string_view token;
    switch (e.category) {
      case OpCategory::all_gather: token = "ncclKernel_AllGather"; break;
      case OpCategory::reduce_scatter: token = "ncclKernel_ReduceScatter"; break;
      case OpCategory::all_reduce: token = "ncclKernel_AllReduce"; break;
      default: token = "ncclKernel_Broadcast"; break;
    }
    return std::string(token) + " " + e.name;
  }
  if (e.category == OpCategory::memcpy && !e.name.starts_with("Memcpy") && !e.name.starts_with("Memset"))
    return "Memcpy " + e.name;
  return std::nullopt;
}

OrderedJson event_json(const TraceEvent& e, const TraceMeta& meta) {
  const std::optional<std::string> renamed = hta_name(e);
  OrderedJson args = OrderedJson::object();
  if (e.lane != Lane::host) {
    args["stream"] = tid_of(e.lane);
    args["device"] = meta.device_of(e.rank);
    args["correlation"] = e.op;  // HTA takes only events with a correlation >= 0 for GPU kernels
  }
  args["category"] = std::string(category_name(e.category));
  args["step"] = e.step;
  args["unit"] = e.unit;
  if (!e.phase.empty()) args["phase"] = e.phase;
  args["bytes"] = e.bytes;
  if (e.flops != 0) args["flops"] = e.flops;
  args["op"] = e.op;
  if (!e.deps.empty()) {
    OrderedJson deps = OrderedJson::array();
    for (const OpRef& d : e.deps) {
      OrderedJson dep = OrderedJson::array({d.rank, d.op});
      if (d.reason != WaitReason::event) dep.push_back(std::string(wait_reason_name(d.reason)));
      deps.push_back(std::move(dep));
    }
    args["deps"] = std::move(deps);
  }
  if (renamed) args["op_name"] = e.name;
  if (e.link != RankLink::in_node) args["link"] = std::string(rank_link_name(e.link));

  OrderedJson j;
  j["ph"] = "X";
  j["name"] = renamed ? *renamed : e.name;
  j["cat"] = kineto_category(e);
  j["pid"] = e.rank;
  j["tid"] = tid_of(e.lane);
  j["ts"] = ns_to_us(e.begin);
  j["dur"] = ns_to_us(e.end - e.begin);
  j["args"] = std::move(args);
  return j;
}

OrderedJson counter_json(int rank, SimTime time, std::string_view series, std::int64_t bytes) {
  OrderedJson j;
  j["ph"] = "C";
  j["name"] = "mem " + std::string(series);
  j["pid"] = rank;
  j["ts"] = ns_to_us(time);
  j["args"] = {{"bytes", bytes}};
  return j;
}

OrderedJson metadata_json(std::string_view what, int pid, std::optional<int> tid, OrderedJson args) {
  OrderedJson j;
  j["ph"] = "M";
  j["name"] = std::string(what);
  j["pid"] = pid;
  if (tid) j["tid"] = *tid;
  j["args"] = std::move(args);
  return j;
}

std::string dump(const OrderedJson& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

void check_writable(const std::filesystem::path& path, const TraceData& data, const TraceMeta& meta,
                    std::optional<int> only_rank) {
  const std::string where = path.string();
  check(meta.world_size >= 1, "cannot write trace '", where, "': world size ", meta.world_size);
  check(meta.devices.empty() || meta.devices.size() == static_cast<std::size_t>(meta.world_size),
        "cannot write trace '", where, "': ", meta.devices.size(), " device indices for world size ",
        meta.world_size);
  for (const int device : meta.devices)
    check(device >= 0, "cannot write trace '", where, "': device index ", device);
  check(!only_rank || (*only_rank >= 0 && *only_rank < meta.world_size), "cannot write trace '", where,
        "': rank ", only_rank.value_or(0), " is outside the world of ", meta.world_size);
  for (const TraceEvent& e : data.events) {
    check(e.rank >= 0 && e.rank < meta.world_size, "cannot write trace '", where, "': event '", e.name,
          "' is on rank ", e.rank, ", outside the world of ", meta.world_size);
    check(e.end >= e.begin, "cannot write trace '", where, "': event '", e.name, "' on rank ", e.rank,
          " ends at ", e.end, " ns, before it begins at ", e.begin, " ns");
    check(e.begin >= -kMaxNs && e.end <= kMaxNs, "cannot write trace '", where, "': event '", e.name,
          "' on rank ", e.rank, " at ", e.begin, " ns is beyond +-", kMaxNs, " ns");
  }
  for (const CounterSample& s : data.counters) {
    check(s.rank >= 0 && s.rank < meta.world_size, "cannot write trace '", where, "': a memory sample is on rank ",
          s.rank, ", outside the world of ", meta.world_size);
    check(s.time >= -kMaxNs && s.time <= kMaxNs, "cannot write trace '", where, "': a memory sample at ", s.time,
          " ns is beyond +-", kMaxNs, " ns");
  }
}

void write_body(std::ostream& out, const TraceData& data, const TraceMeta& meta, std::optional<int> only_rank) {
  const auto wanted = [&](int rank) { return !only_rank || rank == *only_rank; };

  // Metadata first: HTA reads the top-level keys before "traceEvents" to learn the rank. HTA 0.5
  // finds it with the regex `"rank":\s+(\d+)` on each line (hta/common/trace_file.py), which needs
  // the space Kineto writes after the colon: so this line is written by hand, Kineto's way.
  // A file with several ranks has no distributedInfo.rank, as no one rank is right: older HTA refuses
  // it, 0.5 warns and takes it for rank 0. HTA is meant to read the per-rank files.
  out << "{\n\"fsdplabTraceFormat\": " << kFormatVersion << ",\n\"displayTimeUnit\": \"ns\",\n";
  out << "\"distributedInfo\": {\"backend\": " << dump(meta.backend);
  if (only_rank) out << ", \"rank\": " << *only_rank;
  else if (meta.world_size == 1) out << ", \"rank\": 0";
  out << ", \"world_size\": " << meta.world_size << "},\n";
  if (!meta.mode.empty()) out << "\"fsdplabMode\": " << dump(meta.mode) << ",\n";

  std::set<int> ranks;
  std::set<std::pair<int, Lane>> tracks;
  if (only_rank) ranks.insert(*only_rank);
  for (const TraceEvent& e : data.events) {
    if (!wanted(e.rank)) continue;
    ranks.insert(e.rank);
    tracks.emplace(e.rank, e.lane);
  }
  for (const CounterSample& s : data.counters)
    if (wanted(s.rank)) ranks.insert(s.rank);

  if (!meta.device_name.empty()) {
    std::set<int> devices;
    for (int r : ranks) devices.insert(meta.device_of(r));
    OrderedJson props = OrderedJson::array();
    for (int d : devices)
      props.push_back({{"id", d}, {"name", meta.device_name}, {"totalGlobalMem", meta.device_memory_bytes}});
    out << "\"deviceProperties\": " << dump(props) << ",\n";
  }

  out << "\"traceEvents\": [\n";
  bool first = true;
  const auto line = [&](const OrderedJson& j) {
    out << (first ? "" : ",\n") << dump(j);
    first = false;
  };
  for (int r : ranks) {
    line(metadata_json("process_name", r, std::nullopt, {{"name", "rank " + std::to_string(r)}}));
    line(metadata_json("process_sort_index", r, std::nullopt, {{"sort_index", r}}));
  }
  for (const auto& [r, lane] : tracks) {
    // The host on top, then the streams in lane order, on every rank alike.
    const int order = lane == Lane::host ? 0 : 1 + static_cast<int>(lane_index(lane));
    line(metadata_json("thread_name", r, tid_of(lane), {{"name", track_name(lane)}}));
    line(metadata_json("thread_sort_index", r, tid_of(lane), {{"sort_index", order}}));
  }
  for (const TraceEvent& e : data.events)
    if (wanted(e.rank)) line(event_json(e, meta));
  // Each sample is two counter events: its tag's live bytes and the rank's total, in that order.
  for (const CounterSample& s : data.counters) {
    if (!wanted(s.rank)) continue;
    line(counter_json(s.rank, s.time, mem_tag_name(s.tag), s.tag_live));
    line(counter_json(s.rank, s.time, "total", s.total_live));
  }
  out << "\n]\n}\n";
}

// ---- reading ------------------------------------------------------------------------------------

// A value as it reads in the file, cut short: messages quote what came, not a whole subtree. Only
// flat values are printed, since dumping a hostile file's nesting would recurse without bound.
std::string shown(const Json& v) {
  const bool flat = v.is_primitive() ||
                    (v.is_array() && std::all_of(v.begin(), v.end(), [](const Json& x) { return x.is_primitive(); }));
  if (!flat) return v.is_array() ? "[...]" : "{...}";
  std::string text = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  return text.size() <= 40 ? text : text.substr(0, 37) + "...";
}

// "an array", "a string": what a value is, for messages.
std::string kind(const Json& v) {
  const std::string name = v.type_name();
  return (name == "array" || name == "object" ? "an " : "a ") + name;
}

// Checked access to one JSON object, with what it is ("event 12") for the messages.
class Fields {
 public:
  Fields(const Json& object, std::string what, const std::string& file)
      : object_(object), what_(std::move(what)), file_(file) {
    if (!object_.is_object()) fail("trace '", file_, "': ", what_, " is ", kind(object_), "; expected an object");
  }

  bool has(const char* key) const { return object_.contains(key); }

  const Json& field(const char* key) const {
    const auto it = object_.find(key);
    if (it == object_.end()) fail("trace '", file_, "': ", what_, " has no '", key, "'");
    return *it;
  }

  std::string string(const char* key) const {
    const Json& v = field(key);
    if (!v.is_string()) wrong(key, v, "a string");
    return v.get<std::string>();
  }

  std::int64_t integer(const char* key, std::int64_t lo, std::int64_t hi) const {
    const Json& v = field(key);
    if (!v.is_number_integer()) wrong(key, v, "an integer");
    const bool too_big = v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi);
    const std::int64_t x = too_big ? hi : v.get<std::int64_t>();
    if (too_big || x < lo || x > hi)
      fail("trace '", file_, "': ", what_, " has '", key, "' = ", shown(v), "; expected ", lo, " to ", hi);
    return x;
  }

  int small_int(const char* key, int lo = std::numeric_limits<int>::min()) const {
    return static_cast<int>(integer(key, lo, std::numeric_limits<int>::max()));
  }

  double number(const char* key) const {
    const Json& v = field(key);
    if (!v.is_number()) wrong(key, v, "a number");
    const double x = v.get<double>();
    if (!std::isfinite(x))
      fail("trace '", file_, "': ", what_, " has '", key, "' = ", shown(v), "; expected a finite number");
    return x;
  }

  // A time in microseconds, converted to nanoseconds.
  SimTime time(const char* key) const {
    const double us = number(key);
    if (std::abs(us) > kMaxMicroseconds)
      fail("trace '", file_, "': ", what_, " has '", key, "' = ", us, " us; expected at most ", kMaxMicroseconds);
    return static_cast<SimTime>(std::llround(us * 1e3));
  }

  Fields object(const char* key) const { return Fields(field(key), what_ + "'s '" + key + "'", file_); }

  const std::string& what() const { return what_; }

 private:
  [[noreturn]] void wrong(const char* key, const Json& v, const char* expected) const {
    fail("trace '", file_, "': ", what_, " has '", key, "' = ", shown(v), " (", kind(v), "); expected ", expected);
  }
  const Json& object_;
  std::string what_;
  const std::string& file_;
};

OpCategory parse_category(const std::string& name, const Fields& where, const std::string& file) {
  for (std::size_t i = 0; i < kOpCategoryCount; ++i)
    if (category_name(static_cast<OpCategory>(i)) == name) return static_cast<OpCategory>(i);
  std::string known;
  for (std::size_t i = 0; i < kOpCategoryCount; ++i)
    known += (i ? ", " : "") + std::string(category_name(static_cast<OpCategory>(i)));
  fail("trace '", file, "': ", where.what(), " has category '", name, "'; expected one of: ", known);
}

RankLink parse_link(const std::string& name, const Fields& where, const std::string& file) {
  for (RankLink l : {RankLink::in_node, RankLink::between_nodes})
    if (rank_link_name(l) == name) return l;
  fail("trace '", file, "': ", where.what(), " has link '", name, "'; expected in_node or between_nodes");
}

// A dependency's third item, its reason by name (wait_reason_name); none where it names no reason.
std::optional<WaitReason> parse_wait_reason(const Json& name) {
  if (!name.is_string()) return std::nullopt;
  for (WaitReason r : {WaitReason::event, WaitReason::freed_block})
    if (wait_reason_name(r) == name.get<std::string>()) return r;
  return std::nullopt;
}

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  TraceData read(const Json& doc, TraceMeta* meta_out) {
    const Fields top(doc, "the top level", file_);
    if (!top.has("fsdplabTraceFormat"))
      fail("trace '", file_, "' is not an fsdplab trace: it has no 'fsdplabTraceFormat'");
    const std::int64_t format = top.integer("fsdplabTraceFormat", 0, std::numeric_limits<int>::max());
    check(format == kFormatVersion, "trace '", file_, "' has format ", format, "; this build reads format ",
          kFormatVersion);

    const Fields info = top.object("distributedInfo");
    meta_.backend = info.string("backend");
    // Bounded as `fsdplab run --world` is: the reader and the dashboard keep memory per rank, so a
    // claimed world must not be able to ask for more than any run of ours could have had.
    meta_.world_size = static_cast<int>(info.integer("world_size", 1, kWireMaxWorld));
    if (info.has("rank")) file_rank_ = static_cast<int>(info.integer("rank", 0, meta_.world_size - 1));
    if (top.has("deviceProperties")) read_device(top.field("deviceProperties"));
    if (top.has("fsdplabMode")) {
      meta_.mode = top.string("fsdplabMode");
      check(meta_.mode == "sync" || meta_.mode == "async", "trace '", file_, "': fsdplabMode is '", meta_.mode,
            "'; expected \"sync\" or \"async\"");
    }

    const Json& events = top.field("traceEvents");
    if (!events.is_array())
      fail("trace '", file_, "': 'traceEvents' is ", kind(events), "; expected an array");
    for (std::size_t i = 0; i < events.size(); ++i) read_event(Fields(events[i], "event " + std::to_string(i), file_));
    if (pending_total_) fail("trace '", file_, "': the last memory sample has no 'mem total' after it");

    if (meta_out) *meta_out = finish_meta();
    return std::move(data_);
  }

 private:
  void read_device(const Json& props) {
    if (!props.is_array())
      fail("trace '", file_, "': 'deviceProperties' is ", kind(props), "; expected an array");
    if (props.empty()) return;
    const Fields device(props[0], "deviceProperties[0]", file_);
    meta_.device_name = device.string("name");
    meta_.device_memory_bytes = device.integer("totalGlobalMem", 0, std::numeric_limits<std::int64_t>::max());
  }

  int rank_of(const Fields& e) {
    const int rank = static_cast<int>(e.integer("pid", 0, meta_.world_size - 1));
    if (file_rank_ && rank != *file_rank_)
      fail("trace '", file_, "': ", e.what(), " has pid ", rank, " in rank ", *file_rank_,
           "'s file (distributedInfo.rank)");
    return rank;
  }

  void read_event(const Fields& e) {
    const std::string ph = e.string("ph");
    const bool counter = ph == "C";
    if (pending_total_ && !(counter && e.has("name") && e.field("name") == "mem total"))
      fail("trace '", file_, "': ", e.what(), " should be the 'mem total' sample of the event before it");
    if (ph == "X") return read_complete(e);
    if (counter) return read_counter(e);
    if (ph == "M") {
      e.string("name");
      rank_of(e);
      return;
    }
    fail("trace '", file_, "': ", e.what(), " has ph '", ph, "'; expected 'X', 'C' or 'M'");
  }

  void read_complete(const Fields& e) {
    TraceEvent ev;
    ev.rank = rank_of(e);
    const std::int64_t tid = e.integer("tid", std::numeric_limits<std::int64_t>::min(),
                                       std::numeric_limits<std::int64_t>::max());
    const std::optional<Lane> lane = lane_of_tid(tid);
    if (!lane)
      fail("trace '", file_, "': ", e.what(), " has tid ", tid, ", which is no lane; expected ", kHostTid,
           " (host) or ", kStreamIds.front(), " to ", kStreamIds.back(), " (streams)");
    ev.lane = *lane;
    ev.begin = e.time("ts");
    const SimTime duration = e.time("dur");
    if (duration < 0) fail("trace '", file_, "': ", e.what(), " has a negative 'dur'");
    ev.end = ev.begin + duration;

    const Fields args = e.object("args");
    ev.name = args.has("op_name") ? args.string("op_name") : e.string("name");
    ev.category = parse_category(args.string("category"), e, file_);
    ev.step = args.small_int("step");
    ev.unit = args.small_int("unit");
    if (args.has("phase")) ev.phase = args.string("phase");
    ev.bytes =
        args.integer("bytes", std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
    if (args.has("flops")) ev.flops = args.number("flops");
    ev.op = static_cast<OpId>(args.integer("op", 0, std::numeric_limits<std::int64_t>::max()));
    if (args.has("deps")) ev.deps = read_deps(args.field("deps"), e);
    if (args.has("link")) ev.link = parse_link(args.string("link"), e, file_);
    if (ev.lane != Lane::host && args.has("device")) devices_[ev.rank] = args.small_int("device", 0);
    data_.events.push_back(std::move(ev));
  }

  std::vector<OpRef> read_deps(const Json& deps, const Fields& e) const {
    if (!deps.is_array())
      fail("trace '", file_, "': ", e.what(), " has 'deps' = ", shown(deps), " (", kind(deps), "); expected an array");
    std::vector<OpRef> out;
    for (const Json& d : deps) {
      // nlohmann parses every non-negative integer as unsigned, so that test also rejects negatives.
      const bool ok = d.is_array() && (d.size() == 2 || d.size() == 3) && d[0].is_number_unsigned() &&
                      d[1].is_number_unsigned() &&
                      d[0].get<std::uint64_t>() < static_cast<std::uint64_t>(meta_.world_size);
      const std::optional<WaitReason> reason = ok && d.size() == 3 ? parse_wait_reason(d[2]) : WaitReason::event;
      if (!ok || !reason)
        fail("trace '", file_, "': ", e.what(), " has dependency ", shown(d),
             "; expected [rank, op id] with rank in 0 to ", meta_.world_size - 1,
             ", or [rank, op id, \"freed_block\"] for a wait of the caching allocator's");
      out.push_back(OpRef{.rank = d[0].get<int>(), .op = d[1].get<OpId>(), .reason = *reason});
    }
    return out;
  }

  void read_counter(const Fields& e) {
    const int rank = rank_of(e);
    const SimTime time = e.time("ts");
    const std::string name = e.string("name");
    const std::int64_t bytes = e.object("args").integer("bytes", std::numeric_limits<std::int64_t>::min(),
                                                        std::numeric_limits<std::int64_t>::max());
    if (!name.starts_with("mem "))
      fail("trace '", file_, "': ", e.what(), " is counter '", name, "'; expected 'mem <tag>' or 'mem total'");
    const std::string series = name.substr(4);
    if (series == "total") {
      if (!pending_total_) fail("trace '", file_, "': ", e.what(), " is a 'mem total' with no tag sample before it");
      CounterSample& s = data_.counters.back();
      if (s.rank != rank || s.time != time)
        fail("trace '", file_, "': ", e.what(), " is the 'mem total' of rank ", rank, " at ", time,
             " ns, but follows a sample of rank ", s.rank, " at ", s.time, " ns");
      s.total_live = bytes;
      pending_total_ = false;
      return;
    }
    MemTag tag;
    try {
      tag = parse_mem_tag(series);
    } catch (const Error& error) {
      fail("trace '", file_, "': ", e.what(), ": ", error.what());
    }
    data_.counters.push_back(CounterSample{rank, time, tag, bytes, 0});
    pending_total_ = true;
  }

  // Device indices come back from the events' args.device; a file where every rank r ran on device r
  // gives the canonical empty list.
  TraceMeta finish_meta() {
    bool identity = true;
    for (const auto& [rank, device] : devices_) identity = identity && device == rank;
    if (!identity) {
      meta_.devices.resize(static_cast<std::size_t>(meta_.world_size));
      for (int r = 0; r < meta_.world_size; ++r) meta_.devices[static_cast<std::size_t>(r)] = r;
      for (const auto& [rank, device] : devices_) meta_.devices[static_cast<std::size_t>(rank)] = device;
    }
    return meta_;
  }

  std::string file_;
  TraceData data_;
  TraceMeta meta_;
  std::optional<int> file_rank_;
  std::map<int, int> devices_;
  bool pending_total_ = false;  // the last sample read still waits for its 'mem total'
};

}  // namespace

std::filesystem::path rank_trace_file(const std::filesystem::path& dir, int rank) {
  return dir / ("rank" + std::to_string(rank) + ".json");
}

void write_chrome_trace(const std::filesystem::path& path, const TraceData& data, const TraceMeta& meta,
                        std::optional<int> only_rank) {
  check_writable(path, data, meta, only_rank);
  write_output_file(path, "trace", [&](std::ostream& out) { write_body(out, data, meta, only_rank); });
}

TraceData read_chrome_trace(const std::filesystem::path& path, TraceMeta* meta) {
  const std::string file = path.string();
  const std::string text = read_input_file(file, "trace", kMaxTraceFileBytes, "written by fsdplab run --trace");

  Json doc;
  try {
    doc = parse_json_input(text);
  } catch (const Error& e) {
    // Where and what came: "parse error at line 3, column 5: syntax error while parsing value - unexpected end of
    // input; expected ...", or a number too large for a double, or nesting past kMaxJsonNesting.
    fail("trace '", file, "' is not valid JSON: ", e.what());
  }
  try {
    return Reader(file).read(doc, meta);
  } catch (const Json::exception& e) {
    // Every access above checks types first; this only turns a missed case into a clean error.
    fail("trace '", file, "' is malformed: ", json_error_text(e));
  }
}

}  // namespace fsdplab
