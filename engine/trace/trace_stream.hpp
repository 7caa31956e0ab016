// trace_stream.hpp — ranks in one process streaming their trace to a dashboard in another
// (`fsdplab run --dashboard HOST:PORT` into `fsdplab gui --listen PORT`), over TCP in the wire format
// of trace_wire.hpp.
//
// DashboardStream is the ranks' side. Each hosted rank gets a sink (an EventQueue: the rank's thread
// pushes and never waits) and rank 0's thread pushes its steps; one sender thread drains them every
// few milliseconds and writes frames to a non-blocking socket. The engine never waits for the
// dashboard: a slow one only lets the queues grow; a lost one costs a warning, after which the sender
// drains and discards so the run goes on as if nobody listened. Only connecting at the start is an
// Error, as a run told to stream somewhere nobody listens is a mistake worth stopping for.
//
// DashboardListener is the dashboard's side. One thread accepts connections and reads them; every
// message is checked against its stream (a hello first and once, ranks within what the hello
// announced, one stream per rank of a run) and handed to the UI thread through a lock-free queue that
// the UI drains each frame. A stream that breaks any rule is dropped: its connection closed, a message
// saying why printed to stderr and handed to the UI. Memory is bounded: a partial frame per connection
// (the decoder refuses frames over 1 MiB from their length), a number of connections, the bytes
// waiting for the UI (above that the listener stops reading, so TCP slows the senders down), and the
// runs and messages a dashboard keeps at once (ListenerLimits; finished runs make room for new ones).
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/trace/event_queue.hpp"
#include "engine/trace/tcp_socket.hpp"
#include "engine/trace/trace_wire.hpp"

namespace fsdplab {

class DashboardStream {
 public:
  // Connects to the dashboard at `address` ("HOST:PORT") and announces `hello`: this process's ranks
  // hello.rank .. hello.rank + hello.ranks - 1 of a world of hello.world, in run hello.run. An Error
  // saying how to start the dashboard if nobody listens there.
  DashboardStream(std::string_view address, WireHello hello,
                  std::chrono::milliseconds connect_timeout = std::chrono::seconds(5));
  // Sends everything the ranks pushed and a bye (the run completed), waiting at most flush_timeout for a
  // slow dashboard to take it (then warns and closes). Call it after the ranks finished.
  void finish();
  // As finish(), for a run that failed with `error`: sends it in place of the bye (cut to kWireMaxString
  // bytes), so the dashboard marks the run failed and shows why, and marks `race` where one stopped it.
  void finish_failed(std::string_view error, std::optional<RaceReport> race = std::nullopt);
  // Without finish() or finish_failed() (a run that ended some other way): sends what the ranks pushed and closes
  // without a bye, so the dashboard says the run may have failed.
  ~DashboardStream();
  DashboardStream(const DashboardStream&) = delete;
  DashboardStream& operator=(const DashboardStream&) = delete;

  // The sink of hosted rank `rank`, for its device; only that rank's thread may push into it.
  TraceSink* sink(int rank);
  // A finished step; one thread (rank 0's) calls it, after the step's events were emitted.
  void step(const WireStep& step);

  const std::string& address() const { return address_; }
  // Whether the connection was lost mid-run (a warning was printed; the rest was discarded).
  bool lost() const { return lost_.load(std::memory_order_acquire); }

  std::chrono::milliseconds flush_timeout = std::chrono::seconds(10);

 private:
  void send_loop();
  // Moves what the ranks published into out_ as frames; returns how many messages it moved.
  std::size_t encode_published();
  // Writes as much of out_ as the socket takes now; false once the connection is lost.
  bool write_pending();
  void lose(const std::string& why);

  std::string address_;
  WireHello hello_;
  OwnedFd socket_;
  std::vector<std::unique_ptr<EventQueue>> queues_;  // by hosted rank, from hello_.rank
  SpscQueue<WireStep> steps_;
  // Sender thread only:
  std::string out_;        // frames not yet written
  std::size_t written_ = 0;  // bytes of out_ already written
  std::vector<TraceEvent> event_scratch_;
  std::vector<CounterSample> counter_scratch_;
  std::vector<WireStep> step_scratch_;
  bool encode_warned_ = false;

  std::atomic<bool> stopping_{false};
  std::atomic<bool> completed_{false};  // say bye when stopping
  // finish_failed()'s error, said when stopping: written before stopping_ is set, read by the sender once it saw it.
  std::optional<WireFailed> failure_;
  std::atomic<bool> lost_{false};
  std::thread sender_;  // last: started once everything above exists
};

// What the listener hands to the UI thread, in the order it happened on each connection.
struct RemoteUpdate {
  // forgotten: run `run` has no open stream and gave its place back to make room for newer ones (its
  // data is to be dropped); its connections were all closed before.
  enum class Kind { connected, message, closed, forgotten };
  Kind kind = Kind::message;
  int connection = 0;  // 1, 2, ... in the order connections were accepted
  std::string peer;    // connected: "127.0.0.1:53122"
  WireMessage message;  // message: a checked message of this connection (its hello first)
  // closed: empty after a bye; otherwise what ended the stream ("dropped 127.0.0.1:53122: frame of
  // 4294967295 bytes; at most 1048576", "127.0.0.1:53122 closed without a bye ...", after a WireFailed
  // message "run 'tiny' (ranks 0..1) failed: ...").
  std::string why;
  bool dropped = false;  // closed: the listener dropped the stream for breaking the rules
  std::string run;       // forgotten: its run id
};

struct ListenerLimits {
  int connections = 256;                              // open at once (MPI: one per process)
  std::size_t pending_bytes = std::size_t{64} << 20;  // waiting for the UI before reading pauses
  // What a dashboard keeps at once, so no peer can grow it without end: runs (each a source with memory
  // series per rank), and messages (events, counters and steps, ~1 GB in the trace store at the default).
  // Past either, runs with no open stream (finished, lost or dropped) are forgotten, oldest first, to
  // make room; only when every kept run is still streaming is a new stream or message refused.
  std::size_t runs = 64;
  std::size_t messages = 20'000'000;
};

class DashboardListener {
 public:
  // Listens on `address`: "[HOST:]PORT", PORT alone meaning 127.0.0.1:PORT, port 0 any free port. A
  // non-loopback host is bound only when named, with a warning on stderr that anyone who can reach it
  // can send the dashboard data. An Error naming the address and the reason if it cannot listen.
  explicit DashboardListener(std::string_view address, ListenerLimits limits = {});
  ~DashboardListener();
  DashboardListener(const DashboardListener&) = delete;
  DashboardListener& operator=(const DashboardListener&) = delete;

  int port() const { return port_; }
  const std::string& address() const { return address_; }  // "127.0.0.1:43123", with the bound port
  bool loopback() const { return loopback_; }

  // UI thread: appends everything received since the last call to `out`; never blocks. Returns how many.
  std::size_t drain(std::vector<RemoteUpdate>& out);

 private:
  struct Connection;
  // Which connection streams each rank of a run (0: none yet), while any of them is open.
  struct RunClaim {
    int world = 0;
    std::vector<int> stream_of_rank;
  };
  void receive_loop();
  void accept_connections();
  // Reads what `c` sent and hands on its messages; closes it on a bye, a hang-up or a broken rule.
  void read_from(Connection& c);
  void check_message(Connection& c, const WireMessage& m);
  void close_connection(Connection& c, std::string why, bool dropped);
  // Forgets the oldest runs with no open stream until a new run (`new_run`) and a message fit the limits.
  void make_room(bool new_run);
  void hand_on(RemoteUpdate update);

  ListenerLimits limits_;
  std::string address_;
  int port_ = 0;
  bool loopback_ = true;
  OwnedFd listening_;
  OwnedFd wake_read_, wake_write_;  // a pipe: the destructor's write ends the receiver's poll at once
  // Receiver thread only:
  std::vector<std::unique_ptr<Connection>> connections_;
  std::map<std::string, RunClaim> runs_;
  // Every run kept (accepted and not forgotten): when it came (to forget the oldest first), and the
  // messages it holds (given back with it).
  struct KeptRun {
    std::uint64_t order = 0;
    std::size_t messages = 0;
  };
  std::map<std::string, KeptRun> kept_runs_;
  std::uint64_t next_run_order_ = 0;
  std::size_t messages_taken_ = 0;  // by the kept runs
  int next_connection_ = 1;
  SpscQueue<RemoteUpdate> updates_;
  std::atomic<std::size_t> pending_bytes_{0};
  std::atomic<bool> stopping_{false};
  std::thread receiver_;  // last
};

}  // namespace fsdplab
