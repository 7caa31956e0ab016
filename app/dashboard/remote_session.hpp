// remote_session.hpp — the dashboard fed by ranks in other processes: `fsdplab gui --listen [HOST:]PORT`
// while runs elsewhere train with `fsdplab run ... --dashboard HOST:PORT` (engine/trace/trace_stream.hpp).
//
// The listener checks every stream on its own thread; once a frame the UI thread drains what it handed
// over into the trace store: one source per run id ("remote: <run> (W ranks, mode)"), its lanes as the
// ranks' events arrive, its steps in the step-time panel, its memory from the counters, its failure (the
// error a rank failed with) marked as a local run's is. Beside the store
// it keeps what the panel on the left lists instead of run settings: each stream (who, which run and
// ranks, whether it is open, finished, failed, lost or dropped) and why streams ended early. Both lists are
// bounded: a peer that connects over and over cannot grow them without end; nor can it hold the runs'
// places for good: a run with no open stream is forgotten, oldest first, when newer ones need its room
// (ListenerLimits).
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "app/dashboard/trace_store.hpp"
#include "engine/trace/trace_stream.hpp"

namespace fsdplab::app {

struct RemoteStream {
  // failed: its run sent the error it failed with (TraceSource::failure), and the stream ended there.
  enum class State { connected, streaming, finished, failed, lost, dropped };
  std::string peer;   // "127.0.0.1:53122"
  State state = State::connected;
  int source = -1;    // its run's source in the store, once its hello came
  int first_rank = 0;
  int ranks = 0;
  std::size_t messages = 0;
};
std::string_view remote_state_name(RemoteStream::State s);  // "connected", "streaming", ...

class RemoteSession {
 public:
  // Listens on `address` (DashboardListener's rules); an Error if it cannot.
  explicit RemoteSession(std::string_view address, ListenerLimits limits = {});

  // UI thread, once a frame: moves what the listener received into the store and the lists. Never blocks.
  std::size_t drain();

  const DashboardListener& listener() const { return listener_; }
  const TraceStore& store() const { return store_; }
  // By connection, in the order they connected: every open stream, and the most recent closed ones (at
  // most kKeptClosed).
  const std::map<int, RemoteStream>& streams() const { return streams_; }
  // Why streams ended early, oldest first: the last kKeptProblems, and how many there were in all.
  const std::vector<std::string>& problems() const { return problems_; }
  std::size_t problem_count() const { return problem_count_; }
  // The steps of the run that has sent the most.
  std::size_t most_steps() const;

  static constexpr std::size_t kKeptClosed = 32;
  static constexpr std::size_t kKeptProblems = 32;

 private:
  void apply(RemoteUpdate& update);
  void forget_old_streams();
  // The listener forgot `run` to make room for newer ones: its source and its closed streams go.
  void forget_run(const std::string& run);

  DashboardListener listener_;
  TraceStore store_;
  std::map<std::string, int> source_of_run_;
  std::map<int, RemoteStream> streams_;
  std::vector<std::string> problems_;
  std::size_t problem_count_ = 0;
  std::vector<RemoteUpdate> scratch_;
};

}  // namespace fsdplab::app
