// The dashboard fed by runs in other processes (`fsdplab gui --listen`), headless: a run streamed over a
// loopback socket fills the store exactly as the same run recorded in-process does; a failed run is marked
// with its error; dropped streams and lost ones are listed with their reasons; the lists stay bounded.
#include <sys/socket.h>

#include <set>
#include <thread>
#include <tuple>

#include "dashboard_testing.hpp"
#include "engine/trace/fan_out_sink.hpp"
#include "engine/trace/trace_recorder.hpp"
#include "test_support.hpp"

namespace fsdplab::app {
namespace {

bool all_closed(const RemoteSession& remote, std::size_t streams) {
  if (remote.streams().size() != streams) return false;
  for (const auto& [id, s] : remote.streams())
    if (s.state == RemoteStream::State::connected || s.state == RemoteStream::State::streaming) return false;
  return true;
}

// GPT-2 test-tiny, ASYNC, clipped to gradient norm 0.5, on 2 rank threads, streamed as `fsdplab run --dashboard`
// streams it and recorded beside it; its step reports.
std::vector<StepReport> stream_and_record(const std::string& address, std::vector<TraceRecorder>& recorders) {
  SessionSettings settings = tiny_settings(3);
  settings.comparison = Comparison::async_only;
  settings.clip_grad_norm = 0.5;
  FsdpRun run = settings.plan().at(0).run;
  DashboardStream stream(address, WireHello{"tiny", 0, 2, "sim", 2, "async"});
  std::vector<std::unique_ptr<FanOutSink>> sinks;
  for (int r = 0; r < 2; ++r) {
    sinks.push_back(std::make_unique<FanOutSink>(
        std::vector<TraceSink*>{&recorders[static_cast<std::size_t>(r)], stream.sink(r)}));
    run.sinks.push_back(sinks.back().get());
  }
  std::vector<StepReport> steps = train_fsdp(run, PresetCatalog::builtin(), [&](const StepReport& s) {
    stream.step(WireStep{0, s.step, s.begin, s.end, s.loss, s.grad_norm});
  });
  stream.finish();
  return steps;
}

TEST(DashboardRemote, AStreamedRunFillsTheStoreAsARecordedOneDoes) {
  HeadlessImGui imgui;
  Dashboard dashboard(std::make_unique<RemoteSession>("0"));
  RemoteSession& remote = *dashboard.remote();
  std::vector<TraceRecorder> recorders(2);
  std::vector<StepReport> steps;
  // The run is another thread here, another process in use: the dashboard only sees the socket.
  std::thread run([&] { steps = stream_and_record(remote.listener().address(), recorders); });
  frames_until(imgui, dashboard, [&] { return all_closed(remote, 1); });
  run.join();
  frames_until(imgui, dashboard, [] { return true; });  // one more frame: the last drain drawn

  const auto& [connection, stream] = *remote.streams().begin();
  EXPECT_EQ(stream.state, RemoteStream::State::finished);
  EXPECT_EQ(stream.first_rank, 0);
  EXPECT_EQ(stream.ranks, 2);
  EXPECT_TRUE(remote.problems().empty());

  TraceStore recorded;
  const int source = recorded.add_source("recorded", 2, false);
  TraceData all;
  for (const TraceRecorder& r : recorders) all.append(r.data());
  recorded.add_trace(source, all);
  for (const StepReport& s : steps) recorded.add_step(source, s.step, s.begin, s.end, s.loss, s.grad_norm, false);

  const TraceStore& got = remote.store();
  ASSERT_EQ(got.sources().size(), 1u);
  EXPECT_EQ(got.source(0).label, "remote: tiny (2 ranks, async)");
  EXPECT_FALSE(got.source(0).sync);
  EXPECT_EQ(got.event_count(), recorded.event_count());
  ASSERT_EQ(got.lanes().size(), recorded.lanes().size());
  for (std::size_t l = 0; l < got.lanes().size(); ++l) {
    const TimelineLane& a = got.lanes()[l];
    const TimelineLane& b = recorded.lanes()[l];
    EXPECT_EQ(std::tuple(a.rank, a.lane, a.items.size()), std::tuple(b.rank, b.lane, b.items.size()));
    for (std::size_t i = 0; i < std::min(a.items.size(), b.items.size()); ++i)
      ASSERT_EQ(std::tuple(a.items[i].op, a.items[i].begin, a.items[i].end, got.text(a.items[i].name)),
                std::tuple(b.items[i].op, b.items[i].begin, b.items[i].end, recorded.text(b.items[i].name)));
  }
  // Steps as the step-time panel reads them: times, loss, gradient norm, and the compute and comm read from the
  // events.
  ASSERT_EQ(got.source(0).steps.size(), 3u);
  for (std::size_t s = 0; s < 3; ++s) {
    const StepTime& a = got.source(0).steps[s];
    const StepTime& b = recorded.source(0).steps[s];
    EXPECT_EQ(std::tuple(a.step, a.begin, a.end, a.loss, a.grad_norm, a.compute, a.comm),
              std::tuple(b.step, b.begin, b.end, b.loss, b.grad_norm, b.compute, b.comm));
    EXPECT_GT(a.grad_norm, 0.5);  // the run clips: every step's norm came through, above the limit
    EXPECT_GT(a.compute, 0);
    EXPECT_GT(a.comm, 0);
  }
  // Memory from the counters, per rank.
  ASSERT_EQ(got.source(0).memory.size(), 2u);
  for (std::size_t r = 0; r < 2; ++r)
    EXPECT_EQ(got.source(0).memory[r].total.peak(), recorded.source(0).memory[r].total.peak());
  EXPECT_GT(got.source(0).memory[0].total.peak(), 0);
  // And the timeline drew both ranks' stream lanes.
  std::set<std::tuple<int, Lane>> drawn;
  for (const LaneRect& l : dashboard.timeline().lanes_drawn()) drawn.emplace(l.rank, l.lane);
  for (int rank : {0, 1})
    for (Lane lane : {Lane::compute, Lane::all_gather, Lane::reduce_scatter})
      EXPECT_TRUE(drawn.count({rank, lane})) << rank << " " << lane_name(lane);
}

// Finished runs give their place back, oldest first: after more tiny hello+bye runs than the table
// holds, a real run still gets in, and the store keeps only the runs the listener kept.
TEST(DashboardRemote, EndedRunsMakeRoomForNewOnes) {
  RemoteSession remote("0", ListenerLimits{.runs = 2});
  for (int k = 0; k < 4; ++k) {
    DashboardStream tiny(remote.listener().address(), WireHello{"tiny " + std::to_string(k), 0, 1, "sim", 1});
    tiny.finish();
  }
  DashboardStream real(remote.listener().address(), WireHello{"real", 0, 1, "sim", 1, "async"});
  TraceEvent e;
  e.name = "forward";
  e.step = 0;
  e.begin = 10;
  e.end = 20;
  real.sink(0)->on_event(e);
  real.step(WireStep{0, 0, 0, 30, 1.5});
  real.finish();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!(all_closed(remote, 2) && remote.store().event_count() == 1 && remote.most_steps() == 1)) {
    remote.drain();
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the streams did not all arrive in time";
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const TraceStore& store = remote.store();
  ASSERT_EQ(store.sources().size(), 2u);
  EXPECT_EQ(store.source(0).label, "remote: tiny 3 (1 rank)");
  EXPECT_EQ(store.source(1).label, "remote: real (1 rank, async)");
  ASSERT_EQ(store.lanes().size(), 1u);
  EXPECT_EQ(store.lanes()[0].source, 1);
  EXPECT_EQ(store.text(store.lanes()[0].items[0].name), "forward");
  std::vector<int> sources;
  for (const auto& [connection, s] : remote.streams()) sources.push_back(s.source);
  EXPECT_EQ(sources, (std::vector<int>{0, 1}));  // the forgotten runs' streams went with them
  EXPECT_TRUE(remote.problems().empty());
}

// A run on a GPU (`fsdplab run --device cuda --dashboard ...`) times its ops by the wall clock: the dashboard says so
// of its steps ("wall ms"), as of a cuda run of its own; a sim run's are virtual. Both streamed to one dashboard, the
// panels name which is which.
TEST(DashboardRemote, AGpuRunsStreamIsInWallClockTime) {
  RemoteSession remote("0");
  for (const std::string backend : {"cuda", "sim"}) {
    DashboardStream stream(remote.listener().address(), WireHello{backend + " run", 0, 2, backend, 2, "async"});
    stream.step(WireStep{0, 0, 0, 30, 1.5});
    stream.finish();
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!(all_closed(remote, 2) && remote.store().sources().size() == 2)) {
    remote.drain();
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the streams did not all arrive in time";
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const TraceStore& store = remote.store();
  for (const TraceSource& source : store.sources())
    EXPECT_EQ(source.wall_clock, source.label.starts_with("remote: cuda run")) << source.label;
  EXPECT_EQ(clock_kind(store, "ms"), "ms: virtual for sim runs, wall for cuda runs");
}

// A peer sending garbage and one hanging up mid-stream: both listed with why, drawn without trouble.
TEST(DashboardRemote, DroppedAndLostStreamsAreListedWithTheirReasons) {
  HeadlessImGui imgui;
  Dashboard dashboard(std::make_unique<RemoteSession>("0"));
  RemoteSession& remote = *dashboard.remote();
  const SocketAddress address = parse_socket_address(remote.listener().address(), "test");
  {
    OwnedFd garbage = connect_tcp(address, std::chrono::seconds(2));
    ASSERT_EQ(::send(garbage.fd(), "GET / HTTP/1.1\r\n\r\n", 18, MSG_NOSIGNAL), 18);
    frames_until(imgui, dashboard, [&] { return remote.problem_count() == 1; });
  }
  {
    DashboardStream failing(remote.listener().address(), WireHello{"failing", 0, 1, "sim", 1});
    TraceEvent e;
    e.name = "matmul";
    failing.sink(0)->on_event(e);
  }  // no finish(): the run failed
  frames_until(imgui, dashboard, [&] { return all_closed(remote, 2); });
  ASSERT_EQ(remote.problems().size(), 2u);
  // Not read as a frame length ("GET ": 542393671 bytes) but named for what it is.
  EXPECT_TRUE(testing::contains(
      remote.problems()[0], ": not an fsdplab trace stream: it opens with 47 45 54 20 2f 20 48 54 54 (\"GET / HTT\")"))
      << remote.problems()[0];
  EXPECT_EQ(remote.problems()[0].rfind("dropped 127.0.0.1:", 0), 0u);
  EXPECT_TRUE(testing::contains(remote.problems()[1], "closed the stream without a bye (run 'failing', rank 0)"))
      << remote.problems()[1];
  EXPECT_EQ(remote.streams().at(1).state, RemoteStream::State::dropped);
  EXPECT_EQ(remote.streams().at(2).state, RemoteStream::State::lost);
  EXPECT_EQ(remote.store().event_count(), 1u);  // what the failed run sent before it went is kept
}

// A streamed run that fails (a student's task 3 still at its TODO) sends its error as `fsdplab run --dashboard`
// does: the remote dashboard marks the run failed as a local run's failure is marked, the error in the step-time
// table's row, the stream failed, the error in the list of streams that ended early. (It once learnt only that
// the stream closed without a bye.)
TEST(DashboardRemote, AFailedRunIsMarkedFailedWithItsError) {
  HeadlessImGui imgui;
  Dashboard dashboard(std::make_unique<RemoteSession>("0"));
  RemoteSession& remote = *dashboard.remote();
  std::string error;
  std::thread run([&] {
    SessionSettings settings = tiny_settings(2);
    settings.comparison = Comparison::async_only;
    settings.fsdp.impl = "3=student";
    FsdpRun student = settings.plan().at(0).run;
    DashboardStream stream(remote.listener().address(), WireHello{"student", 0, 2, "sim", 2, "async"});
    for (int r = 0; r < 2; ++r) student.sinks.push_back(stream.sink(r));
    try {
      train_fsdp(student, PresetCatalog::builtin(), [](const StepReport&) {});
      stream.finish();
    } catch (const Error& e) {
      error = e.what();
      stream.finish_failed(error);
    }
  });
  // The stream is marked failed when its WireFailed arrives; its error joins the problems list only with its
  // close, which may come in a later drain: wait for both.
  frames_until(imgui, dashboard, [&] { return all_closed(remote, 1) && remote.problem_count() == 1; });
  run.join();
  frames_until(imgui, dashboard, [] { return true; });  // one more frame: the last drain drawn
  ASSERT_TRUE(testing::contains(error, "task 3, ForwardTask::")) << "the student's run did not fail: " << error;

  EXPECT_EQ(remote.streams().begin()->second.state, RemoteStream::State::failed);
  ASSERT_EQ(remote.store().sources().size(), 1u);
  EXPECT_EQ(remote.store().source(0).failure, error);
  ASSERT_EQ(remote.problems().size(), 1u);
  EXPECT_EQ(remote.problems()[0], "run 'student' (ranks 0..1) failed: " + error);
  const std::vector<StepTimePanel::TableRow>& rows = dashboard.step_times().table_rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0].failed) << rows[0].name;
}

// A streamed run the race detector stopped (`fsdplab run --dashboard` of a task 4 without its event wait) sends the
// race with its error: the remote dashboard marks it on the timeline where it happened, as a local run's. (Remote
// runs once carried their error alone.)
TEST(DashboardRemote, AStreamedRunStoppedByARaceIsMarkedWhereItHappened) {
  HeadlessImGui imgui;
  Dashboard dashboard(std::make_unique<RemoteSession>("0"));
  RemoteSession& remote = *dashboard.remote();
  std::optional<RaceReport> sent;
  std::thread run([&] {
    SessionSettings settings = tiny_settings(2);
    settings.comparison = Comparison::async_only;
    settings.fsdp.impl = "4=mutant:missing-wait";
    FsdpRun racing = settings.plan().at(0).run;
    DashboardStream stream(remote.listener().address(), WireHello{"racing", 0, 2, "sim", 2, "async"});
    for (int r = 0; r < 2; ++r) racing.sinks.push_back(stream.sink(r));
    try {
      train_fsdp(racing, PresetCatalog::builtin(), [](const StepReport&) {});
      stream.finish();
    } catch (const Error& e) {
      if (const std::optional<RaceError> race = cause_of_type<RaceError>(e)) sent = race->report();
      stream.finish_failed(e.what(), sent);
    }
  });
  frames_until(imgui, dashboard, [&] { return all_closed(remote, 1) && remote.problem_count() == 1; });
  run.join();
  frames_until(imgui, dashboard, [] { return true; });
  ASSERT_TRUE(sent.has_value()) << "the run was not stopped by a race";
  ASSERT_EQ(remote.store().sources().size(), 1u);
  const std::optional<RaceReport>& race = remote.store().source(0).race;
  ASSERT_TRUE(race.has_value()) << remote.store().source(0).failure;
  EXPECT_EQ(race->message, sent->message);
  EXPECT_EQ(race->rank, sent->rank);
  EXPECT_EQ(race->later.op, sent->later.op);
  EXPECT_EQ(race->later.lane, Lane::reduce_scatter);
  EXPECT_EQ(race->earlier.lane, Lane::compute);
  std::set<bool> marked;  // both accesses, the earlier on its op and the later (never ran) as a box of its own
  for (const RaceMarkRect& mark : dashboard.timeline().race_marks()) marked.insert(mark.later);
  EXPECT_EQ(marked, (std::set<bool>{false, true}));
}

// A peer that connects and leaves again and again: the lists keep the most recent only.
TEST(DashboardRemote, ListsStayBounded) {
  RemoteSession remote("0");
  const SocketAddress address = parse_socket_address(remote.listener().address(), "test");
  constexpr std::size_t kPeers = RemoteSession::kKeptClosed + 8;
  for (std::size_t i = 0; i < kPeers; ++i) OwnedFd leaving = connect_tcp(address, std::chrono::seconds(2));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (remote.problem_count() < kPeers) {
    remote.drain();
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(remote.streams().size(), RemoteSession::kKeptClosed);
  EXPECT_EQ(remote.streams().begin()->first, 9);  // the first 8 forgotten
  EXPECT_EQ(remote.problems().size(), RemoteSession::kKeptProblems);
  EXPECT_TRUE(testing::contains(remote.problems().back(), "closed the stream before its hello"));
}

}  // namespace
}  // namespace fsdplab::app
