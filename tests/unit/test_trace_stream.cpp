// Trace streams over loopback sockets: what ranks send arrives in order; a stream that breaks the
// rules is dropped with a message while good ones go on; a missing, slow or vanished dashboard never
// stops a run; addresses are checked. Port 0 everywhere: the listener says which port it got.
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

#include "engine/trace/trace_stream.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using namespace std::chrono_literals;

std::string local(const DashboardListener& listener) { return "127.0.0.1:" + std::to_string(listener.port()); }

// Drains `listener` into `got` until `done(got)` holds, failing the test after `limit`.
void drain_until(DashboardListener& listener, std::vector<RemoteUpdate>& got,
                 const std::function<bool(const std::vector<RemoteUpdate>&)>& done,
                 std::chrono::milliseconds limit = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    listener.drain(got);
    if (done(got)) return;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the listener did not get there in time";
    std::this_thread::sleep_for(1ms);
  }
}

// The update that closed `connection`, if it came.
const RemoteUpdate* closing(const std::vector<RemoteUpdate>& got, int connection) {
  for (const RemoteUpdate& u : got)
    if (u.kind == RemoteUpdate::Kind::closed && u.connection == connection) return &u;
  return nullptr;
}

int connection_of(const std::vector<RemoteUpdate>& got, std::size_t nth) {
  std::size_t seen = 0;
  for (const RemoteUpdate& u : got)
    if (u.kind == RemoteUpdate::Kind::connected && seen++ == nth) return u.connection;
  return 0;
}

TraceEvent event(int rank, OpId op, int step) {
  TraceEvent e;
  e.rank = rank;
  e.lane = op % 2 ? Lane::all_gather : Lane::compute;
  e.category = op % 2 ? OpCategory::all_gather : OpCategory::compute;
  e.name = "op " + std::to_string(op);
  e.step = step;
  e.op = op;
  e.begin = static_cast<SimTime>(op) * 10;
  e.end = e.begin + 5;
  if (op > 1) e.deps = {OpRef{1 - rank, op - 1}};
  return e;
}

// A raw connection that writes whatever bytes a test gives it.
class RawClient {
 public:
  explicit RawClient(const DashboardListener& listener)
      : socket_(connect_tcp(parse_socket_address(local(listener), "test"), 2s)) {}
  void send_bytes(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(socket_.fd(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
      ASSERT_GT(n, 0) << "sending failed: " << errno_words(errno);
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
  }
  void send_frames(const std::vector<WireMessage>& messages) {
    std::string bytes;
    for (const WireMessage& m : messages) append_frame(bytes, m);
    send_bytes(bytes);
  }

 private:
  OwnedFd socket_;
};

// Two rank threads and rank 0's steps through one stream: every message arrives, each rank's in the
// order pushed, each step after rank 0's events of that step, then a clean close.
TEST(TraceStream, TwoRanksArriveInOrder) {
  DashboardListener listener("0");
  constexpr int kSteps = 5, kPerStep = 200;
  {
    DashboardStream stream(local(listener), WireHello{"run-a", 0, 2, "sim", 2});
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        TraceSink* sink = stream.sink(r);
        OpId op = 1;
        for (int s = 0; s < kSteps; ++s) {
          for (int i = 0; i < kPerStep; ++i, ++op) {
            sink->on_event(event(r, op, s));
            if (i % 50 == 0) sink->on_counter(CounterSample{r, static_cast<SimTime>(op), MemTag::param_full, i, 2 * i});
          }
          if (r == 0) stream.step(WireStep{0, s, s * 1000, s * 1000 + 900, 1.0 / (s + 1)});
        }
      });
    }
    for (auto& t : ranks) t.join();
    stream.finish();  // flushes and says bye
  }
  std::vector<RemoteUpdate> got;
  drain_until(listener, got, [](const auto& g) { return closing(g, 1) != nullptr; });

  ASSERT_EQ(got.front().kind, RemoteUpdate::Kind::connected);
  EXPECT_EQ(got.front().peer.rfind("127.0.0.1:", 0), 0u) << got.front().peer;
  ASSERT_EQ(got[1].kind, RemoteUpdate::Kind::message);
  const auto& hello = std::get<WireHello>(got[1].message);
  EXPECT_EQ(hello.run, "run-a");
  EXPECT_EQ(hello.world, 2);
  EXPECT_EQ(hello.ranks, 2);
  std::vector<OpId> next_op = {1, 1};
  std::vector<int> counters = {0, 0};
  int steps = 0;
  for (const RemoteUpdate& u : got) {
    if (u.kind != RemoteUpdate::Kind::message) continue;
    if (const auto* e = std::get_if<TraceEvent>(&u.message)) {
      ASSERT_EQ(e->op, next_op[static_cast<std::size_t>(e->rank)]++) << "rank " << e->rank << " out of order";
      EXPECT_EQ(e->name, "op " + std::to_string(e->op));
      if (e->op > 1) {
        EXPECT_EQ(e->deps, (std::vector<OpRef>{OpRef{1 - e->rank, e->op - 1}}));
      }
    } else if (const auto* c = std::get_if<CounterSample>(&u.message)) {
      ++counters[static_cast<std::size_t>(c->rank)];
    } else if (const auto* s = std::get_if<WireStep>(&u.message)) {
      EXPECT_EQ(s->step, steps++);
      EXPECT_GE(next_op[0], static_cast<OpId>((s->step + 1) * kPerStep + 1))
          << "step " << s->step << " before its events";
      EXPECT_EQ(s->loss, 1.0 / (s->step + 1));
    }
  }
  EXPECT_EQ(next_op, (std::vector<OpId>{kSteps * kPerStep + 1, kSteps * kPerStep + 1}));
  EXPECT_EQ(counters, (std::vector<int>{kSteps * 4, kSteps * 4}));
  EXPECT_EQ(steps, kSteps);
  const RemoteUpdate* closed = closing(got, 1);
  EXPECT_TRUE(closed->why.empty()) << closed->why;
  EXPECT_FALSE(closed->dropped);
}

TEST(TraceStream, GarbageIsDroppedWhileAGoodStreamGoesOn) {
  DashboardListener listener("0");
  std::vector<RemoteUpdate> got;
  {
    DashboardStream good(local(listener), WireHello{"run-b", 0, 1, "sim", 1});
    good.sink(0)->on_event(event(0, 1, 0));
    RawClient garbage(listener);
    garbage.send_bytes("GET / HTTP/1.0\r\n\r\n");  // once read as a frame of 542393671 bytes
    drain_until(listener, got, [](const auto& g) { return closing(g, 2) != nullptr; });
    const RemoteUpdate* dropped = closing(got, 2);
    EXPECT_TRUE(dropped->dropped);
    EXPECT_EQ(dropped->why.rfind("dropped 127.0.0.1:", 0), 0u) << dropped->why;
    EXPECT_TRUE(testing::contains(dropped->why,
                                  ": not an fsdplab trace stream: it opens with 47 45 54 20 2f 20 48 54 54 (\"GET / "
                                  "HTT\"); an fsdplab trace stream opens with a hello"))
        << dropped->why;
    // The good stream is untouched: what it sends after the drop arrives too.
    TraceEvent second = event(0, 2, 0);
    second.deps.clear();  // a world of one rank: nothing to depend on elsewhere
    good.sink(0)->on_event(second);
    good.step(WireStep{0, 0, 0, 100, 2.5});
    good.finish();
  }
  drain_until(listener, got, [](const auto& g) { return closing(g, 1) != nullptr; });
  std::vector<OpId> ops;
  int steps = 0;
  for (const RemoteUpdate& u : got) {
    if (u.connection != 1 || u.kind != RemoteUpdate::Kind::message) continue;
    if (const auto* e = std::get_if<TraceEvent>(&u.message)) ops.push_back(e->op);
    steps += std::holds_alternative<WireStep>(u.message);
  }
  EXPECT_EQ(ops, (std::vector<OpId>{1, 2}));
  EXPECT_EQ(steps, 1);
  EXPECT_TRUE(closing(got, 1)->why.empty());
}

// Streams that speak the format but break the listener's rules, each dropped with its reason; the
// first connection (a good stream of run "r", ranks 0..1 of 4) stays open throughout.
TEST(TraceStream, StreamsBreakingTheRulesAreDropped) {
  DashboardListener listener("0");
  RawClient first(listener);
  first.send_frames({WireHello{"r", 0, 4, "sim", 2}});
  std::vector<RemoteUpdate> got;
  drain_until(listener, got, [](const auto& g) { return g.size() == 2; });  // connected, hello
  ASSERT_TRUE(std::holds_alternative<WireHello>(got[1].message));
  TraceEvent far = event(0, 5, 0);
  far.deps = {OpRef{7, 1}};
  const std::vector<std::pair<std::vector<WireMessage>, std::string>> cases = {
      {{event(0, 1, 0)}, "not an fsdplab trace stream: it opens with "},  // no hello first
      {{WireHello{"s", 0, 2, "sim", 1}, WireHello{"s", 1, 2, "sim", 1}}, "a second hello (run 's'"},
      {{WireHello{"s", 0, 2, "sim", 1}, event(1, 1, 0)}, "event of rank 1; this stream carries rank 0 of a world of 2"},
      {{WireHello{"s", 1, 2, "sim", 1}, WireStep{0, 0, 0, 1, 0}}, "step of rank 0; this stream carries rank 1"},
      {{WireHello{"s", 0, 2, "sim", 1}, CounterSample{3, 0, MemTag::activation, 1, 1}}, "counter of rank 3"},
      {{WireHello{"s", 0, 4, "sim", 1}, far}, "event 'op 5' depends on rank 7; expected 0..3"},
      {{WireHello{"r", 1, 4, "sim", 2}}, "rank 1 of run 'r' already has a stream (connection 1)"},
      {{WireHello{"r", 2, 8, "sim", 2}}, "run 'r' has a world of 4 (its first stream said so); this hello says 8"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    RawClient hostile(listener);
    hostile.send_frames(cases[i].first);
    const int connection = static_cast<int>(i) + 2;
    drain_until(listener, got, [&](const auto& g) { return closing(g, connection) != nullptr; });
    const RemoteUpdate* closed = closing(got, connection);
    EXPECT_TRUE(closed->dropped) << i;
    EXPECT_TRUE(testing::contains(closed->why, cases[i].second)) << i << ": " << closed->why;
  }
  // A hello of the same run for ranks nobody streams is welcome.
  RawClient third(listener);
  third.send_frames({WireHello{"r", 2, 4, "sim", 2}, event(3, 1, 0), WireBye{}});
  const int ok = static_cast<int>(cases.size()) + 2;
  drain_until(listener, got, [&](const auto& g) { return closing(g, ok) != nullptr; });
  EXPECT_FALSE(closing(got, ok)->dropped) << closing(got, ok)->why;
  EXPECT_EQ(closing(got, 1), nullptr) << "the first stream was closed: " << closing(got, 1)->why;
}

TEST(TraceStream, TooManyConnectionsAreDropped) {
  DashboardListener listener("0", ListenerLimits{.connections = 2});
  RawClient a(listener), b(listener);
  std::vector<RemoteUpdate> got;
  drain_until(listener, got, [](const auto& g) { return connection_of(g, 1) != 0; });
  RawClient c(listener);
  drain_until(listener, got, [](const auto& g) { return closing(g, 3) != nullptr; });
  EXPECT_TRUE(testing::contains(closing(got, 3)->why, ": too many connections (2 open; at most 2)"))
      << closing(got, 3)->why;
  EXPECT_EQ(closing(got, 1), nullptr);
  EXPECT_EQ(closing(got, 2), nullptr);
}

// A run that fails never calls finish(): what it sent arrives, and the dashboard is told there was no bye.
TEST(TraceStream, AStreamClosedWithoutFinishHasNoBye) {
  DashboardListener listener("0");
  {
    DashboardStream stream(local(listener), WireHello{"run-e", 1, 2, "cuda", 1});
    TraceEvent e = event(1, 1, 0);
    stream.sink(1)->on_event(e);
    EXPECT_EQ(testing::error_of([&] { stream.sink(0); }),
              "dashboard stream: rank 0 is not streamed by this process (it streams rank 1)");
  }
  std::vector<RemoteUpdate> got;
  drain_until(listener, got, [](const auto& g) { return closing(g, 1) != nullptr; });
  ASSERT_EQ(got.size(), 4u);  // connected, hello, the event, closed
  EXPECT_EQ(std::get<TraceEvent>(got[2].message).name, "op 1");
  EXPECT_FALSE(got[3].dropped);
  EXPECT_TRUE(
      testing::contains(got[3].why, " closed the stream without a bye (run 'run-e', rank 1): the run may have failed"))
      << got[3].why;
}

// What a dashboard keeps is bounded: past its runs or its messages while every kept run still streams,
// streams are dropped.
TEST(TraceStream, RunsAndMessagesTakenAreBounded) {
  DashboardListener listener("0", ListenerLimits{.runs = 1, .messages = 4});
  std::vector<RemoteUpdate> got;
  RawClient first(listener);
  first.send_frames({WireHello{"one", 0, 1, "sim", 1}, event(0, 1, 0)});
  drain_until(listener, got, [](const auto& g) { return g.size() == 3; });  // connected, hello, event
  RawClient second(listener);
  second.send_frames({WireHello{"two", 0, 1, "sim", 1}});
  drain_until(listener, got, [](const auto& g) { return closing(g, 2) != nullptr; });
  EXPECT_TRUE(testing::contains(closing(got, 2)->why, ": run 'two' would be run 2; this dashboard shows at most 1 "
                                                       "and all of them are still streaming"))
      << closing(got, 2)->why;
  TraceEvent more = event(0, 1, 0);
  more.deps.clear();
  first.send_frames({more, more, more});  // messages 3, 4 and 5 (the dropped hello is not kept)
  drain_until(listener, got, [](const auto& g) { return closing(g, 1) != nullptr; });
  EXPECT_TRUE(testing::contains(closing(got, 1)->why, ": this dashboard holds 4 messages of runs still streaming"))
      << closing(got, 1)->why;
}

// Runs that ended (with a bye, hung up or dropped) give their place and their messages back, oldest
// first: tiny hello+bye streams cannot fill the table for good and shut out every later real run.
TEST(TraceStream, RunsThatEndedGiveTheirPlaceBackOldestFirst) {
  DashboardListener listener("0", ListenerLimits{.runs = 2, .messages = 6});
  std::vector<RemoteUpdate> got;
  const auto forgotten = [&] {
    std::vector<std::string> runs;
    for (const RemoteUpdate& u : got)
      if (u.kind == RemoteUpdate::Kind::forgotten) runs.push_back(u.run);
    return runs;
  };
  for (int k = 0; k < 5; ++k) {
    RawClient tiny(listener);
    tiny.send_frames({WireHello{"tiny " + std::to_string(k), 0, 1, "sim", 1}, WireBye{}});
    drain_until(listener, got, [&](const auto& g) { return closing(g, k + 1) != nullptr; });
    EXPECT_TRUE(closing(got, k + 1)->why.empty()) << closing(got, k + 1)->why;  // finished, not dropped
  }
  EXPECT_EQ(forgotten(), (std::vector<std::string>{"tiny 0", "tiny 1", "tiny 2"}));
  // A real run after them is taken, and its messages past what the ended runs held make room too.
  RawClient real(listener);
  TraceEvent e = event(0, 1, 0);
  real.send_frames({WireHello{"real", 0, 1, "sim", 1}, e, e, e, e});
  drain_until(listener, got, [&](const auto& g) {
    return std::count_if(g.begin(), g.end(), [](const RemoteUpdate& u) { return u.connection == 6; }) == 6;
  });
  EXPECT_EQ(closing(got, 6), nullptr);
  EXPECT_EQ(forgotten(), (std::vector<std::string>{"tiny 0", "tiny 1", "tiny 2", "tiny 3", "tiny 4"}));
}

TEST(TraceStream, ConnectingWhereNobodyListensIsAClearError) {
  int port = 0;
  {
    DashboardListener gone("0");
    port = gone.port();
  }
  const std::string address = "127.0.0.1:" + std::to_string(port);
  EXPECT_EQ(testing::error_of([&] { DashboardStream(address, WireHello{"x", 0, 1, "sim", 1}); }),
            "cannot reach the dashboard at " + address + ": connection refused; start `fsdplab gui --listen " +
                address + "` first");
}

TEST(TraceStream, AddressesAreChecked) {
  const auto listen_error = [](std::string_view a) { return testing::error_of([&] { DashboardListener l(a); }); };
  EXPECT_EQ(listen_error("seventy"), "dashboard listen address 'seventy': the port is not a number; expected "
                                     "[HOST:]PORT (e.g. 7077 or 127.0.0.1:7077)");
  EXPECT_TRUE(testing::contains(listen_error("127.0.0.1:70000"), "port 70000 is outside 0..65535"));
  EXPECT_TRUE(testing::contains(listen_error(":7077"), "no host before the ':'"));
  EXPECT_TRUE(testing::contains(listen_error("::1:7077"), "an IPv6 address needs brackets"));
  EXPECT_TRUE(testing::contains(listen_error("127.0.0.1:"), "the port is not a number"));
  DashboardListener taken("0");
  EXPECT_EQ(listen_error(local(taken)), "cannot listen on " + local(taken) + ": address already in use");
  // The ranks' side needs a host and a real port.
  const auto stream_error = [](std::string_view a) {
    return testing::error_of([&] { DashboardStream s(a, WireHello{"x", 0, 1, "sim", 1}); });
  };
  EXPECT_EQ(stream_error("7077"), "dashboard address '7077': no port; expected HOST:PORT (e.g. 127.0.0.1:7077)");
  EXPECT_TRUE(testing::contains(stream_error("127.0.0.1:0"), "port 0 is outside 1..65535"));
  EXPECT_EQ(testing::error_of([] { DashboardStream s("127.0.0.1:9", WireHello{"x", 1, 1, "sim", 1}); }),
            "trace wire: cannot send hello of ranks 1..1; expected within 0..0");
}

TEST(TraceStream, PortAloneListensOnLoopbackOnly) {
  DashboardListener listener("0");
  EXPECT_TRUE(listener.loopback());
  EXPECT_EQ(listener.address(), local(listener));
  EXPECT_GT(listener.port(), 0);
  DashboardListener everywhere("0.0.0.0:0");  // named: bound, with a warning on stderr
  EXPECT_FALSE(everywhere.loopback());
}

// The dashboard goes away mid-run: the stream warns once, the rank goes on pushing (into a sender
// that now discards), and closing the stream returns at once.
TEST(TraceStream, ALostDashboardNeverStopsTheRun) {
  auto listener = std::make_unique<DashboardListener>("0");
  DashboardStream stream(local(*listener), WireHello{"run-c", 0, 1, "sim", 1});
  stream.sink(0)->on_event(event(0, 1, 0));
  listener.reset();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (OpId op = 2; !stream.lost(); ++op) {
    stream.sink(0)->on_event(event(0, op, 0));
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the stream never noticed the dashboard was gone";
    std::this_thread::sleep_for(1ms);
  }
  for (OpId op = 0; op < 1000; ++op) stream.sink(0)->on_event(event(0, op + 1, 0));
}

// A dashboard that stops reading: the ranks' pushes never wait, the listener's memory stays within its
// limit (it stops reading; TCP holds the sender back), and the stream gives up flushing after its timeout.
TEST(TraceStream, ASlowDashboardNeverBlocksAndStaysBounded) {
  constexpr std::size_t kLimit = std::size_t{1} << 20;
  constexpr std::size_t kEvents = 12'000;
  DashboardListener listener("0", ListenerLimits{.pending_bytes = kLimit});
  std::vector<RemoteUpdate> got;
  const auto start = std::chrono::steady_clock::now();
  {
    DashboardStream stream(local(listener), WireHello{"run-d", 0, 1, "sim", 1});
    stream.flush_timeout = 300ms;
    TraceEvent e = event(0, 1, 0);
    e.name.assign(kWireMaxString, 'n');
    for (OpId op = 1; op <= kEvents; ++op) {  // ~50 MB of frames: more than the kernel's socket buffers hold
      e.op = op;
      stream.sink(0)->on_event(e);
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);
  listener.drain(got);
  std::size_t events = 0;
  for (const RemoteUpdate& u : got) events += std::holds_alternative<TraceEvent>(u.message);
  EXPECT_GT(events, 0u);
  EXPECT_LT(events, kEvents);
  // Held for the UI: the limit, plus what one read of 64 KiB (frames of over 4 KiB) brought past it.
  EXPECT_LE(events, kLimit / (sizeof(RemoteUpdate) + kWireMaxString) + 1 + (std::size_t{64} << 10) / kWireMaxString);
}

}  // namespace
}  // namespace fsdplab
