// The Chrome trace export: what Perfetto and HTA need in it, the round trip through our reader, and
// the reader's errors on anything else (bad files, truncated files, fuzzed files).
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/runtime/error.hpp"
#include "engine/trace/chrome_trace.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TraceEvent make_event(int rank, Lane lane, OpCategory category, std::string name, SimTime begin, SimTime end,
                      OpId op) {
  TraceEvent e;
  e.rank = rank;
  e.lane = lane;
  e.category = category;
  e.name = std::move(name);
  e.begin = begin;
  e.end = end;
  e.op = op;
  return e;
}

// Two ranks, every lane and category, SYNC-style collectives on the compute stream, dependencies
// across ranks, awkward times (1 ns, sub-microsecond, days) and a name that needs escaping.
TraceData sample_data() {
  TraceData d;
  TraceEvent step = make_event(0, Lane::host, OpCategory::host, "train step", 0, 900'000, 0);
  step.step = 0;
  d.events.push_back(step);
  TraceEvent mm = make_event(0, Lane::compute, OpCategory::compute, "matmul fwd", 1'000, 5'501, 1);
  mm.step = 0;
  mm.unit = 1;
  mm.phase = "forward";
  mm.flops = 1.5e9;
  mm.bytes = 1 << 20;
  d.events.push_back(mm);
  TraceEvent ag = make_event(0, Lane::all_gather, OpCategory::all_gather, "all_gather unit 2", 1'200, 4'800, 2);
  ag.bytes = 4 << 20;
  ag.unit = 2;
  ag.deps = {OpRef{1, 7}};
  d.events.push_back(ag);
  TraceEvent rs = make_event(0, Lane::compute, OpCategory::reduce_scatter, "reduce_scatter unit 1", 5'501, 7'000, 3);
  rs.deps = {OpRef{0, 1}, OpRef{1, 3, WaitReason::freed_block}};
  rs.phase = "backward";
  d.events.push_back(rs);
  d.events.push_back(make_event(1, Lane::memcpy, OpCategory::memcpy, "offload grads", 1, 999, 1));
  TraceEvent across = make_event(1, Lane::reduce_scatter, OpCategory::all_reduce, "all_reduce loss", 999, 1'000, 2);
  across.link = RankLink::between_nodes;  // a group spanning nodes (sim --ranks-per-node)
  d.events.push_back(across);
  d.events.push_back(make_event(1, Lane::compute, OpCategory::broadcast, "broadcast params", 0, 0, 3));
  d.events.push_back(make_event(1, Lane::all_gather, OpCategory::all_gather, "ncclDevKernel_AllGather_RING_LL", 2'000,
                                3'000, 4));
  d.events.push_back(make_event(1, Lane::compute, OpCategory::compute, "odd \"name\" \\ with ü", 86'400'000'000'000,
                                86'400'000'123'457, 5));
  d.events.push_back(make_event(1, Lane::host, OpCategory::host, "optimizer on CPU", 3'000, 12'345, 0));
  d.counters.push_back(CounterSample{0, 1'000, MemTag::param_full, 4096, 6000});
  d.counters.push_back(CounterSample{1, 1'500, MemTag::activation, 100, 100});
  d.counters.push_back(CounterSample{0, 7'000, MemTag::param_full, 0, 1904});
  return d;
}

TraceMeta sample_meta() {
  TraceMeta m;
  m.backend = "sim";
  m.world_size = 2;
  m.device_name = "h100-sxm";
  m.device_memory_bytes = 80'000'000'000;
  return m;
}

::testing::AssertionResult same_events(const std::vector<TraceEvent>& got, const std::vector<TraceEvent>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " events, expected " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const TraceEvent& a = got[i];
    const TraceEvent& b = want[i];
    const bool same = a.rank == b.rank && a.lane == b.lane && a.name == b.name && a.category == b.category &&
                      a.step == b.step && a.unit == b.unit && a.phase == b.phase && a.begin == b.begin &&
                      a.end == b.end && a.bytes == b.bytes && a.flops == b.flops && a.op == b.op && a.deps == b.deps &&
                      a.link == b.link;
    if (!same)
      return ::testing::AssertionFailure() << "event " << i << " differs: got '" << a.name << "' rank " << a.rank
                                           << " lane " << lane_name(a.lane) << " [" << a.begin << ", " << a.end
                                           << "], expected '" << b.name << "' rank " << b.rank << " lane "
                                           << lane_name(b.lane) << " [" << b.begin << ", " << b.end << "]";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult same_counters(const std::vector<CounterSample>& got,
                                         const std::vector<CounterSample>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " samples, expected " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const CounterSample& a = got[i];
    const CounterSample& b = want[i];
    if (a.rank != b.rank || a.time != b.time || a.tag != b.tag || a.tag_live != b.tag_live ||
        a.total_live != b.total_live)
      return ::testing::AssertionFailure() << "sample " << i << " differs";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

class TraceChrome : public testing::TempDirTest {
 protected:

  // The Error message reading `p` gives; fails the test if it reads fine.
  static std::string read_error(const fs::path& p) {
    try {
      read_chrome_trace(p);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "reading " << p << " succeeded";
    return "";
  }

  // A valid file's JSON, to break in a controlled way.
  json valid_json() {
    write_chrome_trace(path("valid.json"), sample_data(), sample_meta());
    return json::parse(slurp(path("valid.json")));
  }
  // Index of the first event with this ph.
  static std::size_t first(const json& doc, const std::string& ph) {
    const json& events = doc["traceEvents"];
    for (std::size_t i = 0; i < events.size(); ++i)
      if (events[i]["ph"] == ph) return i;
    ADD_FAILURE() << "no event with ph " << ph;
    return 0;
  }
  std::string error_after(json doc) {
    spit(path("broken.json"), doc.dump());
    return read_error(path("broken.json"));
  }

};

// ---- what Perfetto and HTA read ------------------------------------------------------------------

TEST_F(TraceChrome, CombinedFileHasTheFieldsPerfettoAndHtaRead) {
  write_chrome_trace(path("all.json"), sample_data(), sample_meta());
  const std::string text = slurp(path("all.json"));
  const json doc = json::parse(text);

  // HTA's fast metadata reader stops at "traceEvents": everything it needs comes before.
  EXPECT_LT(text.find("\"distributedInfo\""), text.find("\"traceEvents\""));
  EXPECT_EQ(doc["displayTimeUnit"], "ns");
  EXPECT_EQ(doc["distributedInfo"]["backend"], "sim");
  EXPECT_EQ(doc["distributedInfo"]["world_size"], 2);
  EXPECT_FALSE(doc["distributedInfo"].contains("rank")) << "a two-rank file must not claim one rank";
  ASSERT_EQ(doc["deviceProperties"].size(), 2u);
  EXPECT_EQ(doc["deviceProperties"][1]["id"], 1);
  EXPECT_EQ(doc["deviceProperties"][1]["name"], "h100-sxm");

  std::map<std::pair<int, int>, std::string> thread_names;
  std::map<int, std::string> process_names;
  std::map<std::string, const json*> by_name;
  std::set<std::string> counter_tracks;
  for (const json& e : doc["traceEvents"]) {
    const int pid = e["pid"].get<int>();
    const std::string name = e["name"].get<std::string>();
    if (e["ph"] == "M" && name == "process_name") process_names[pid] = e["args"]["name"].get<std::string>();
    if (e["ph"] == "M" && name == "thread_name")
      thread_names[{pid, e["tid"].get<int>()}] = e["args"]["name"].get<std::string>();
    if (e["ph"] == "C") counter_tracks.insert(std::to_string(pid) + " " + name);
    if (e["ph"] == "X") by_name[name] = &e;
  }
  EXPECT_EQ(process_names, (std::map<int, std::string>{{0, "rank 0"}, {1, "rank 1"}}));
  EXPECT_EQ(thread_names.at({0, 1}), "host");
  EXPECT_EQ(thread_names.at({0, 7}), "stream 7 compute");
  EXPECT_EQ(thread_names.at({0, 8}), "stream 8 all_gather");
  EXPECT_EQ(thread_names.at({1, 10}), "stream 10 memcpy");
  EXPECT_EQ(counter_tracks,
            (std::set<std::string>{"0 mem param_full", "0 mem total", "1 mem activation", "1 mem total"}));

  // Every complete event has what HTA's parser requires (ts, dur, name, cat, pid, tid), in
  // microseconds as floats; device events carry integer stream, device and correlation.
  for (const auto& [name, e] : by_name) {
    for (const char* key : {"ts", "dur", "name", "cat", "pid", "tid", "args"})
      EXPECT_TRUE(e->contains(key)) << name << " " << key;
    EXPECT_TRUE((*e)["ts"].is_number_float()) << name;
    const json& args = (*e)["args"];
    if ((*e)["cat"] == "cpu_op") {
      EXPECT_FALSE(args.contains("stream")) << "host events must read as stream -1 in HTA: " << name;
    } else {
      EXPECT_TRUE(args["stream"].is_number_integer()) << name;
      EXPECT_EQ(args["stream"], (*e)["tid"]) << name;
      EXPECT_EQ(args["device"], (*e)["pid"]) << name;
      EXPECT_GE(args["correlation"].get<std::int64_t>(), 0) << name;
    }
  }
  const json& mm = *by_name.at("matmul fwd");
  EXPECT_EQ(mm["cat"], "kernel");
  EXPECT_DOUBLE_EQ(mm["ts"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(mm["dur"].get<double>(), 4.501);
  EXPECT_EQ(mm["args"]["category"], "compute");
  EXPECT_EQ(mm["args"]["phase"], "forward");
  EXPECT_EQ(mm["args"]["unit"], 1);
  EXPECT_EQ(mm["args"]["step"], 0);
  EXPECT_EQ((*by_name.at("Memcpy offload grads"))["cat"], "gpu_memcpy");
  EXPECT_EQ((*by_name.at("train step"))["cat"], "cpu_op");
  EXPECT_EQ((*by_name.at("train step"))["tid"], 1);
}

// HTA classifies a GPU kernel as communication from its name only; check our names against each
// rule HTA has used (hta/utils/utils.py), and memcpy against its memory rule.
TEST_F(TraceChrome, CollectivesAreNamedSoEveryHtaVersionSeesCommunication) {
  write_chrome_trace(path("all.json"), sample_data(), sample_meta());
  const json doc = json::parse(slurp(path("all.json")));
  const std::regex hta_05(R"(^nccl.*Kernel)");
  std::map<std::string, std::string> comm_names;  // exported name -> our name
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string name = e["name"];
    const std::string category = e["args"]["category"];
    const bool comm = category == "all_gather" || category == "reduce_scatter" || category == "all_reduce" ||
                      category == "broadcast";
    const bool hta_says_comm = std::regex_search(name, hta_05) && name.starts_with("nccl");
    if (comm) {
      EXPECT_TRUE(hta_says_comm) << name;
      comm_names[name] = e["args"].value("op_name", name);
    } else {
      EXPECT_FALSE(hta_says_comm || name.find("ncclKernel") != std::string::npos) << name;
    }
    EXPECT_EQ(category == "memcpy", name.starts_with("Memcpy")) << name;
  }
  EXPECT_EQ(comm_names, (std::map<std::string, std::string>{
                            {"ncclKernel_AllGather all_gather unit 2", "all_gather unit 2"},
                            {"ncclKernel_ReduceScatter reduce_scatter unit 1", "reduce_scatter unit 1"},
                            {"ncclKernel_AllReduce all_reduce loss", "all_reduce loss"},
                            {"ncclKernel_Broadcast broadcast params", "broadcast params"},
                            {"ncclDevKernel_AllGather_RING_LL", "ncclDevKernel_AllGather_RING_LL"}}));
  // The oldest rule, `"ncclKernel" in name`, holds for every name we made up.
  for (const auto& [exported, ours] : comm_names)
    EXPECT_TRUE(exported == ours || exported.find("ncclKernel") != std::string::npos) << exported;
}

TEST_F(TraceChrome, SingleRankFileIsThatRanksAloneForHta) {
  write_chrome_trace(path("rank1.json"), sample_data(), sample_meta(), 1);
  const std::string text = slurp(path("rank1.json"));
  const json doc = json::parse(text);
  EXPECT_EQ(doc["distributedInfo"]["rank"], 1);
  // HTA 0.5 finds the rank with this regex on the file's lines (hta/common/trace_file.py).
  std::smatch found;
  ASSERT_TRUE(std::regex_search(text, found, std::regex(R"("rank":\s+(\d+))")));
  EXPECT_EQ(found[1], "1");
  EXPECT_EQ(doc["distributedInfo"]["world_size"], 2);
  ASSERT_EQ(doc["deviceProperties"].size(), 1u);
  EXPECT_EQ(doc["deviceProperties"][0]["id"], 1);
  for (const json& e : doc["traceEvents"]) EXPECT_EQ(e["pid"], 1) << e.dump();

  TraceMeta meta;
  const TraceData back = read_chrome_trace(path("rank1.json"), &meta);
  TraceData want;
  for (const TraceEvent& e : sample_data().events)
    if (e.rank == 1) want.events.push_back(e);
  for (const CounterSample& s : sample_data().counters)
    if (s.rank == 1) want.counters.push_back(s);
  EXPECT_TRUE(same_events(back.events, want.events));
  EXPECT_TRUE(same_counters(back.counters, want.counters));
  EXPECT_EQ(meta.world_size, 2);

  // A rank with nothing recorded still gets a valid file naming it.
  write_chrome_trace(path("empty.json"), TraceData{}, sample_meta(), 0);
  EXPECT_TRUE(read_chrome_trace(path("empty.json")).events.empty());
}

// ---- round trip ------------------------------------------------------------------------------------

TEST_F(TraceChrome, RoundTripGivesBackTheSameTrace) {
  const TraceData data = sample_data();
  TraceMeta meta = sample_meta();
  meta.backend = "nccl";
  meta.devices = {0, 0};  // both ranks on one GPU, as LocalComm runs them
  write_chrome_trace(path("all.json"), data, meta);
  EXPECT_FALSE(fs::exists(path("all.json.tmp")));

  TraceMeta back_meta;
  const TraceData back = read_chrome_trace(path("all.json"), &back_meta);
  EXPECT_TRUE(same_events(back.events, data.events));
  EXPECT_TRUE(same_counters(back.counters, data.counters));
  EXPECT_EQ(back_meta.backend, "nccl");
  EXPECT_EQ(back_meta.world_size, 2);
  EXPECT_EQ(back_meta.device_name, "h100-sxm");
  EXPECT_EQ(back_meta.device_memory_bytes, 80'000'000'000);
  EXPECT_EQ(back_meta.devices, (std::vector<int>{0, 0}));

  // Written again, the file is byte for byte the same: the export is deterministic.
  write_chrome_trace(path("again.json"), back, back_meta);
  EXPECT_EQ(slurp(path("again.json")), slurp(path("all.json")));
}

TEST_F(TraceChrome, RoundTripIsExactForEveryNanosecond) {
  TraceData data;
  std::mt19937_64 rng(7);
  for (OpId i = 1; i <= 500; ++i) {
    const SimTime begin = static_cast<SimTime>(rng() % 1'000'000'000'000);  // up to 1000 s
    data.events.push_back(make_event(0, Lane::compute, OpCategory::compute, "k", begin,
                                     begin + static_cast<SimTime>(rng() % 10'000'000), i));
  }
  write_chrome_trace(path("ns.json"), data, TraceMeta{});
  EXPECT_TRUE(same_events(read_chrome_trace(path("ns.json")).events, data.events));
}

// ---- writing -----------------------------------------------------------------------------------------

TEST_F(TraceChrome, FailedWriteLeavesTheOldFileAndNoTemporary) {
  write_chrome_trace(path("t.json"), sample_data(), sample_meta());
  const std::string before = slurp(path("t.json"));

  TraceData bad = sample_data();
  bad.events.push_back(make_event(5, Lane::compute, OpCategory::compute, "stray", 0, 1, 1));
  try {
    write_chrome_trace(path("t.json"), bad, sample_meta());
    ADD_FAILURE() << "a rank outside the world was written";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), path("t.json").string()));
    EXPECT_TRUE(contains(e.what(), "rank 5"));
  }
  TraceData backwards = sample_data();
  backwards.events[1].end = backwards.events[1].begin - 1;
  EXPECT_THROW(write_chrome_trace(path("t.json"), backwards, sample_meta()), Error);
  EXPECT_THROW(write_chrome_trace(path("t.json"), sample_data(), sample_meta(), 2), Error);
  EXPECT_EQ(slurp(path("t.json")), before);
  EXPECT_FALSE(fs::exists(path("t.json.tmp")));

  // A temporary left by an interrupted run is simply replaced.
  spit(path("t.json.tmp"), "{\"half");
  write_chrome_trace(path("t.json"), sample_data(), sample_meta());
  EXPECT_FALSE(fs::exists(path("t.json.tmp")));
  EXPECT_EQ(slurp(path("t.json")), before);
}

TEST_F(TraceChrome, UnwritablePathIsAnErrorNamingIt) {
  const fs::path missing = path("no/such/dir/t.json");
  try {
    write_chrome_trace(missing, sample_data(), sample_meta());
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), missing.string()));
  }
  EXPECT_FALSE(fs::exists(path("no")));
}

// ---- reading bad files -------------------------------------------------------------------------------

TEST_F(TraceChrome, NotJsonOrMissingIsAnErrorNamingTheFile) {
  EXPECT_TRUE(contains(read_error(path("absent.json")), "cannot read trace '" + path("absent.json").string() + "'"));
  spit(path("text.json"), "hello");
  const std::string text = read_error(path("text.json"));
  EXPECT_TRUE(contains(text, path("text.json").string()));
  EXPECT_TRUE(contains(text, "is not valid JSON"));
  spit(path("empty.json"), "");
  EXPECT_TRUE(contains(read_error(path("empty.json")), "unexpected end of input"));
  spit(path("array.json"), "[]");
  EXPECT_TRUE(contains(read_error(path("array.json")), "the top level is an array; expected an object"));
  spit(path("huge.json"), R"({"a": 1e999})");  // nlohmann reports this one as out_of_range, not parse_error
  EXPECT_TRUE(contains(read_error(path("huge.json")), "is not valid JSON"));
  spit(path("kineto.json"), R"({"distributedInfo": {"rank": 0}, "traceEvents": []})");
  // Hostile nesting is refused as it is parsed (engine/runtime/json_input.hpp): no stack overflow.
  constexpr std::size_t kDepth = 200'000;
  spit(path("deep.json"), R"({"fsdplabTraceFormat": 1, "distributedInfo": {"backend": "sim", "world_size": 1},
       "traceEvents": [{"ph": "X", "name": "k", "pid": 0, "tid": 7, "ts": 0, "dur": )" +
                              std::string(kDepth, '[') + std::string(kDepth, ']') + "}]}");
  EXPECT_TRUE(
      contains(read_error(path("deep.json")), "deep.json' is not valid JSON: it nests arrays and objects 65 deep"));
  EXPECT_TRUE(contains(read_error(path("kineto.json")), "is not an fsdplab trace"));
}

// `fsdplab view` is handed whatever a shell expands: only regular files are read, judged by what was
// opened before a byte is read (a FIFO would block forever, /dev/zero never ends), and within a size.
TEST_F(TraceChrome, WhatIsNotARegularFileIsRefusedByItsKindWithoutReading) {
  fs::create_directories(path("folder.json"));
  EXPECT_TRUE(contains(read_error(path("folder.json")), "it is a directory; expected a regular file"));
  ASSERT_EQ(::mkfifo(path("fifo.json").c_str(), 0600), 0);  // no writer ever opens it
  EXPECT_TRUE(contains(read_error(path("fifo.json")), "it is a FIFO (named pipe); expected a regular file"));
  EXPECT_TRUE(contains(read_error("/dev/zero"), "cannot read trace '/dev/zero': it is a character device"));
  // A symlink to a good file is the file.
  write_chrome_trace(path("t.json"), sample_data(), sample_meta());
  fs::create_symlink(path("t.json"), path("link.json"));
  EXPECT_EQ(read_chrome_trace(path("link.json")).events.size(), sample_data().events.size());
  // Over the limit, refused by its size (a sparse file: nothing is written to the disk).
  {
    std::ofstream big(path("big.json"));
  }
  fs::resize_file(path("big.json"), kMaxTraceFileBytes + 1);
  EXPECT_TRUE(contains(
      read_error(path("big.json")),
      std::to_string(kMaxTraceFileBytes + 1) + " bytes; expected at most " + std::to_string(kMaxTraceFileBytes)));
}

// A file's claims are bounded by what a run can have: a world of 10^9 ranks in a small file would have
// the dashboard allocate memory series for all of them.
TEST_F(TraceChrome, AWorldLargerThanARunCanHaveIsRefused) {
  json doc = valid_json();
  doc["distributedInfo"]["world_size"] = 1'000'000'000;
  EXPECT_TRUE(contains(error_after(doc), "'world_size' = 1000000000; expected 1 to 1024"));
  doc["distributedInfo"]["world_size"] = 1024;
  spit(path("wide.json"), doc.dump());
  TraceMeta meta;
  read_chrome_trace(path("wide.json"), &meta);
  EXPECT_EQ(meta.world_size, 1024);
}

TEST_F(TraceChrome, TruncatedFileIsAnErrorWhereverItIsCut) {
  write_chrome_trace(path("t.json"), sample_data(), sample_meta());
  const std::string text = slurp(path("t.json"));
  std::vector<std::size_t> cuts;
  for (std::size_t k = 0; k < 16; ++k) cuts.push_back(text.size() * k / 16);
  cuts.push_back(text.size() - 2);  // just the final brace gone
  for (const std::size_t cut : cuts) {
    spit(path("cut.json"), text.substr(0, cut));
    EXPECT_TRUE(contains(read_error(path("cut.json")), "is not valid JSON")) << "cut at " << cut;
  }
}

TEST_F(TraceChrome, MissingFieldsAreNamedWithTheirEvent) {
  const json valid = valid_json();
  const std::size_t x = first(valid, "X");
  const std::size_t c = first(valid, "C");
  const std::string event = "event " + std::to_string(x);

  for (const char* key : {"dur", "ts", "pid", "tid", "ph", "args", "name"}) {
    json doc = valid;
    doc["traceEvents"][x].erase(key);
    EXPECT_TRUE(contains(error_after(doc), event + " has no '" + key + "'"));
  }
  for (const char* key : {"category", "step", "unit", "op", "bytes"}) {
    json doc = valid;
    doc["traceEvents"][x]["args"].erase(key);
    EXPECT_TRUE(contains(error_after(doc), event + "'s 'args' has no '" + key + "'"));
  }
  for (const char* key : {"distributedInfo", "traceEvents"}) {
    json doc = valid;
    doc.erase(key);
    EXPECT_TRUE(contains(error_after(doc), "has no '" + std::string(key) + "'"));
  }
  json doc = valid;
  doc["distributedInfo"].erase("world_size");
  EXPECT_TRUE(contains(error_after(doc), "has no 'world_size'"));
  doc = valid;
  doc["traceEvents"][c]["args"].erase("bytes");
  EXPECT_TRUE(contains(error_after(doc), "event " + std::to_string(c) + "'s 'args' has no 'bytes'"));
  doc = valid;
  doc["traceEvents"].erase(c + 1);  // the first sample's 'mem total'
  EXPECT_TRUE(contains(error_after(doc), "'mem total'"));
}

TEST_F(TraceChrome, WrongTypesAndValuesSayWhatWasExpected) {
  const json valid = valid_json();
  const std::size_t x = first(valid, "X");
  const std::size_t c = first(valid, "C");
  struct Case {
    std::function<void(json&)> breakit;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[&](json& d) { d["traceEvents"][x]["pid"] = "0"; }, "'pid' = \"0\" (a string); expected an integer"},
      {[&](json& d) { d["traceEvents"][x]["pid"] = 0.5; }, "'pid' = 0.5 (a number); expected an integer"},
      {[&](json& d) { d["traceEvents"][x]["pid"] = 2; }, "'pid' = 2; expected 0 to 1"},
      {[&](json& d) { d["traceEvents"][x]["ts"] = nullptr; }, "'ts' = null (a null); expected a number"},
      {[&](json& d) { d["traceEvents"][x]["ts"] = 1e300; }, "expected at most"},
      {[&](json& d) { d["traceEvents"][x]["dur"] = -1.0; }, "negative 'dur'"},
      {[&](json& d) { d["traceEvents"][x]["tid"] = 99; }, "tid 99, which is no lane"},
      {[&](json& d) { d["traceEvents"][x]["ph"] = "B"; }, "ph 'B'; expected 'X', 'C' or 'M'"},
      {[&](json& d) { d["traceEvents"][x]["args"] = json::array(); }, "'args' is an array; expected an object"},
      {[&](json& d) { d["traceEvents"][x]["args"]["category"] = "gemm"; }, "category 'gemm'; expected one of: compute"},
      {[&](json& d) { d["traceEvents"][x]["args"]["op"] = -3; }, "'op' = -3; expected 0 to"},
      {[&](json& d) { d["traceEvents"][x]["args"]["step"] = 1e10; }, "'step' = 10000000000.0 (a number)"},
      {[&](json& d) { d["traceEvents"][x]["args"]["step"] = 10'000'000'000LL; }, "'step' = 10000000000; expected"},
      {[&](json& d) { d["traceEvents"][x]["args"]["deps"] = json::array({json::array({0})}); }, "dependency [0]"},
      {[&](json& d) {
         d["traceEvents"][x]["args"]["deps"] = json::array({json::array({3, 1})});
       },
       "dependency [3,1]"},
      {[&](json& d) { d["traceEvents"][x]["args"]["deps"] = "none"; }, "'deps' = \"none\" (a string)"},
      {[&](json& d) {
         d["traceEvents"][x]["args"]["deps"] = json::array({json::array({0, 1, "stream"})});
       },
       "dependency [0,1,\"stream\"]; expected [rank, op id] with rank in 0 to 1, or [rank, op id, \"freed_block\"]"},
      {[&](json& d) { d["traceEvents"][x]["args"]["link"] = "pcie"; }, "link 'pcie'; expected in_node or between"},
      {[&](json& d) { d["traceEvents"][x] = 5; }, "event " + std::to_string(x) + " is a number; expected an object"},
      {[&](json& d) { d["traceEvents"] = json::object(); }, "'traceEvents' is an object; expected an array"},
      {[&](json& d) { d["traceEvents"][c]["name"] = "mem bogus"; }, "unknown memory tag 'bogus'"},
      {[&](json& d) { d["traceEvents"][c]["name"] = "vram"; }, "counter 'vram'; expected 'mem <tag>'"},
      {[&](json& d) { d["traceEvents"][c + 1]["ts"] = 0.5; }, "is the 'mem total' of rank 0 at 500 ns"},
      {[&](json& d) { d["distributedInfo"]["world_size"] = 0; }, "'world_size' = 0; expected 1 to"},
      {[&](json& d) { d["distributedInfo"]["rank"] = 1; }, "in rank 1's file"},
      {[&](json& d) { d["fsdplabTraceFormat"] = 2; }, "has format 2; this build reads format 1"},
      {[&](json& d) { d["deviceProperties"] = "h100"; }, "'deviceProperties' is a string; expected an array"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    json doc = valid;
    cases[i].breakit(doc);
    const std::string message = error_after(doc);
    EXPECT_TRUE(contains(message, cases[i].expected)) << "case " << i;
    EXPECT_TRUE(contains(message, path("broken.json").string())) << "case " << i;
  }
}

// ---- fuzzing -------------------------------------------------------------------------------------------

// Whatever the bytes, the reader returns a trace or throws fsdplab::Error: never another exception,
// never a crash (run under the sanitizers in CI). Two kinds of damage: random bytes, which mostly
// test the JSON parser, and random values put into valid JSON, which reach every field check.
TEST_F(TraceChrome, FuzzedFilesReadOrFailCleanly) {
  const json valid = valid_json();
  const std::string text = valid.dump();
  std::mt19937 rng(20240611);
  const auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  const std::vector<json> values = {nullptr,       true,           -1,           0,
                                    1,             7,              1e300,        -0.5,
                                    "",            "X",            "C",          "M",
                                    "mem total",   "all_gather",   json::array(), json::object(),
                                    json::array({json::array({0, 1})}), 18446744073709551615ULL,
                                    -9223372036854775807LL - 1};
  int read_ok = 0, read_failed = 0;
  const auto attempt = [&](const std::string& bytes) {
    spit(path("fuzz.json"), bytes);
    try {
      read_chrome_trace(path("fuzz.json"));
      ++read_ok;
    } catch (const Error&) {
      ++read_failed;
    }
  };

  for (int iteration = 0; iteration < 200; ++iteration) {
    std::string bytes = text;
    const std::size_t edits = 1 + pick(4);
    for (std::size_t k = 0; k < edits && !bytes.empty(); ++k) {
      const std::size_t at = pick(bytes.size());
      switch (pick(4)) {
        case 0: bytes[at] = static_cast<char>(rng()); break;
        case 1: bytes.erase(at, 1 + pick(16)); break;
        case 2: bytes.insert(at, 1, "{}[],:\"0-e.\\"[pick(12)]); break;
        default: bytes.insert(at, bytes.substr(pick(bytes.size()), pick(32))); break;
      }
    }
    attempt(bytes);
  }
  for (int iteration = 0; iteration < 200; ++iteration) {
    json doc = valid;
    json& events = doc["traceEvents"];
    json& e = events[pick(events.size())];
    std::vector<json*> slots = {&e, &doc, &doc["distributedInfo"]};
    if (e.contains("args") && e["args"].is_object()) slots.push_back(&e["args"]);
    json& target = *slots[pick(slots.size())];
    std::vector<std::string> keys;
    for (const auto& item : target.items()) keys.push_back(item.key());
    const std::string key = keys[pick(keys.size())];
    if (pick(4) == 0) target.erase(key);
    else target[key] = values[pick(values.size())];
    attempt(doc.dump());
  }
  // Both outcomes happen: the damage sometimes lands where it does not matter.
  EXPECT_GT(read_ok, 0);
  EXPECT_GT(read_failed, 0);
}

}  // namespace
}  // namespace fsdplab
