// trace_stream.cpp — DashboardStream (the ranks' sender) and DashboardListener (the dashboard's
// receiver); see trace_stream.hpp for what each promises.
#include "engine/trace/trace_stream.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <optional>

#include "engine/runtime/error.hpp"

namespace fsdplab {
namespace {

using Clock = std::chrono::steady_clock;

// How often the sender looks for new events when it has nothing to write: ranks never signal it (a
// signal would cost them a lock or a system call per event), so it comes to look.
constexpr int kSendIntervalMs = 5;
// How often a listener paused for a UI that fell behind looks whether it caught up.
constexpr int kPausedIntervalMs = 5;
// Frames encoded ahead of what the socket took: the rest waits in the ranks' queues.
constexpr std::size_t kEncodeAhead = std::size_t{1} << 20;
constexpr std::size_t kReadChunk = std::size_t{64} << 10;

// "rank 3", "ranks 0..7"
std::string ranks_text(int first, int count) {
  return count == 1 ? "rank " + std::to_string(first)
                    : "ranks " + std::to_string(first) + ".." + std::to_string(first + count - 1);
}

std::string_view kind_name(const WireMessage& m) {
  static constexpr std::string_view kNames[] = {"hello", "event", "counter", "step", "bye", "failure"};
  return kNames[m.index()];
}

// What an update holds in memory, roughly: what the listener counts against ListenerLimits::pending_bytes.
std::size_t footprint(const RemoteUpdate& u) {
  std::size_t bytes = sizeof(RemoteUpdate) + u.peer.size() + u.why.size() + u.run.size();
  if (const auto* e = std::get_if<TraceEvent>(&u.message)) {
    bytes += e->name.size() + e->phase.size() + e->deps.size() * sizeof(OpRef);
  } else if (const auto* h = std::get_if<WireHello>(&u.message)) {
    bytes += h->run.size() + h->backend.size();
  }
  return bytes;
}

}  // namespace

// ==== the ranks' side ===============================================================================

DashboardStream::DashboardStream(std::string_view address, WireHello hello, std::chrono::milliseconds connect_timeout)
    : hello_(std::move(hello)) {
  const SocketAddress where = parse_socket_address(address, "dashboard address");
  address_ = where.text();
  append_frame(out_, hello_);  // checks the hello (its ranks within its world) before anything connects
  try {
    socket_ = connect_tcp(where, connect_timeout);
  } catch (const Error& e) {
    fail("cannot reach the dashboard at ", address_, ": ", e.what(), "; start `fsdplab gui --listen ", address_,
         "` first");
  }
  for (int r = 0; r < hello_.ranks; ++r) queues_.push_back(std::make_unique<EventQueue>());
  sender_ = std::thread([this] { send_loop(); });
}

void DashboardStream::finish() {
  completed_.store(true, std::memory_order_release);
  stopping_.store(true, std::memory_order_release);
  if (sender_.joinable()) sender_.join();
}

void DashboardStream::finish_failed(std::string_view error, std::optional<RaceReport> race) {
  const auto cut = [](std::string& text) { text.resize(std::min(text.size(), kWireMaxString)); };
  if (race) {
    cut(race->message);
    cut(race->earlier.name);
    cut(race->later.name);
  }
  failure_ = WireFailed{std::string(error.substr(0, kWireMaxString)), std::move(race)};
  stopping_.store(true, std::memory_order_release);
  if (sender_.joinable()) sender_.join();
}

DashboardStream::~DashboardStream() {
  stopping_.store(true, std::memory_order_release);
  if (sender_.joinable()) sender_.join();
}

TraceSink* DashboardStream::sink(int rank) {
  check(rank >= hello_.rank && rank < hello_.rank + hello_.ranks, "dashboard stream: rank ", rank,
        " is not streamed by this process (it streams ", ranks_text(hello_.rank, hello_.ranks), ")");
  return queues_[static_cast<std::size_t>(rank - hello_.rank)].get();
}

void DashboardStream::step(const WireStep& step) {
  check(step.rank >= hello_.rank && step.rank < hello_.rank + hello_.ranks, "dashboard stream: a step of rank ",
        step.rank, ", which this process does not stream (it streams ", ranks_text(hello_.rank, hello_.ranks), ")");
  steps_.push(step);
}

void DashboardStream::send_loop() {
  std::optional<Clock::time_point> deadline;
  bool end_queued = false;
  for (;;) {
    // Read before draining: once the destructor's flag is seen, every push of the ranks is visible.
    const bool stopping = stopping_.load(std::memory_order_acquire);
    if (stopping && !deadline) deadline = Clock::now() + flush_timeout;
    const bool room = lost() || out_.size() - written_ < kEncodeAhead;
    const std::size_t moved = room ? encode_published() : 0;
    const bool all_encoded = stopping && room && moved == 0;
    if (all_encoded && !end_queued && !lost() && completed_.load(std::memory_order_acquire)) {
      append_frame(out_, WireBye{});
      end_queued = true;
    }
    if (all_encoded && !end_queued && !lost() && failure_) {
      append_frame(out_, *failure_);
      end_queued = true;
    }
    if (!lost()) write_pending();
    if (all_encoded && (lost() || written_ == out_.size())) break;
    if (deadline && Clock::now() >= *deadline) {
      std::fprintf(stderr, "fsdplab: the dashboard at %s did not take the last %zu bytes of the trace within %lld ms; "
                   "closing the stream\n", address_.c_str(), out_.size() - written_,
                   static_cast<long long>(flush_timeout.count()));
      break;
    }
    if (moved > 0 && room) continue;  // more may be waiting: encode on while there is room
    // Wait for the socket to take more (or for the dashboard to hang up), or for the next look.
    pollfd p{socket_.fd(), static_cast<short>(POLLIN | (written_ < out_.size() ? POLLOUT : 0)), 0};
    if (poll(&p, 1, kSendIntervalMs) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
      char ignored[256];  // the dashboard never sends anything; reading only tells whether it hung up
      const ssize_t n = recv(socket_.fd(), ignored, sizeof ignored, 0);
      if (n == 0) lose("the dashboard closed the connection");
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) lose(errno_words(errno));
    }
  }
  socket_.close();
}

std::size_t DashboardStream::encode_published() {
  // Steps first: a step is pushed after its events, so every step drained here has its events drained
  // below and sent before it (the dashboard reads a step's compute and comm from its events).
  step_scratch_.clear();
  std::size_t moved = steps_.drain(step_scratch_);
  const auto encode = [this](const WireMessage& m) {
    if (lost()) return;  // drained only so the queues do not grow
    try {
      append_frame(out_, m);
    } catch (const Error& e) {
      if (!encode_warned_)
        std::fprintf(stderr, "fsdplab: not streamed to the dashboard: %s (further ones are skipped quietly)\n",
                     e.what());
      encode_warned_ = true;
    }
  };
  for (const auto& queue : queues_) {
    event_scratch_.clear();
    counter_scratch_.clear();
    moved += queue->drain(event_scratch_, counter_scratch_);
    for (const TraceEvent& e : event_scratch_) encode(e);
    for (const CounterSample& c : counter_scratch_) encode(c);
  }
  for (const WireStep& s : step_scratch_) encode(s);
  return moved;
}

bool DashboardStream::write_pending() {
  while (written_ < out_.size()) {
    const ssize_t n = send(socket_.fd(), out_.data() + written_, out_.size() - written_, MSG_NOSIGNAL);
    if (n > 0) {
      written_ += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else {
      lose(errno_words(errno));
      return false;
    }
  }
  if (written_ == out_.size()) {
    out_.clear();
    written_ = 0;
  } else if (written_ >= out_.size() / 2) {
    out_.erase(0, written_);
    written_ = 0;
  }
  return true;
}

void DashboardStream::lose(const std::string& why) {
  std::fprintf(stderr, "fsdplab: lost the dashboard at %s (%s); the run goes on without it\n", address_.c_str(),
               why.c_str());
  lost_.store(true, std::memory_order_release);
  socket_.close();
  out_.clear();
  written_ = 0;
}

// ==== the dashboard's side ==========================================================================

struct DashboardListener::Connection {
  int id = 0;
  std::string peer;
  OwnedFd socket;
  WireDecoder decoder{WireDecoder::Opening::hello};  // bytes from anyone: not fsdplab's refused as such
  std::optional<WireHello> hello;
};

DashboardListener::DashboardListener(std::string_view address, ListenerLimits limits) : limits_(limits) {
  SocketAddress where = parse_socket_address(address, "dashboard listen address", "127.0.0.1", true);
  ListeningSocket bound;
  try {
    bound = listen_tcp(where);
  } catch (const Error& e) {
    fail("cannot listen on ", where.text(), ": ", e.what());
  }
  port_ = bound.port;
  loopback_ = bound.loopback;
  listening_ = std::move(bound.socket);
  where.port = port_;
  address_ = where.text();
  if (!loopback_)
    std::fprintf(stderr, "fsdplab: listening on %s, not a loopback address: anyone who can reach it can send this "
                 "dashboard data\n", address_.c_str());
  int pipe_ends[2];
  check(pipe2(pipe_ends, O_CLOEXEC | O_NONBLOCK) == 0, "dashboard listener: cannot make a pipe: ", errno_words(errno));
  wake_read_ = OwnedFd(pipe_ends[0]);
  wake_write_ = OwnedFd(pipe_ends[1]);
  receiver_ = std::thread([this] { receive_loop(); });
}

DashboardListener::~DashboardListener() {
  stopping_.store(true, std::memory_order_release);
  const char wake = 1;
  [[maybe_unused]] const ssize_t n = write(wake_write_.fd(), &wake, 1);  // a full pipe is awake already
  receiver_.join();
}

std::size_t DashboardListener::drain(std::vector<RemoteUpdate>& out) {
  const std::size_t before = out.size();
  const std::size_t moved = updates_.drain(out);
  std::size_t bytes = 0;
  for (std::size_t i = before; i < out.size(); ++i) bytes += footprint(out[i]);
  pending_bytes_.fetch_sub(bytes, std::memory_order_acq_rel);
  return moved;
}

void DashboardListener::hand_on(RemoteUpdate update) {
  pending_bytes_.fetch_add(footprint(update), std::memory_order_acq_rel);
  updates_.push(update);
}

void DashboardListener::receive_loop() {
  std::vector<pollfd> polled;
  while (!stopping_.load(std::memory_order_acquire)) {
    // Past the limit of bytes waiting for the UI, connections are not read: TCP holds the senders back.
    const bool paused = pending_bytes_.load(std::memory_order_acquire) > limits_.pending_bytes;
    polled.assign({pollfd{wake_read_.fd(), POLLIN, 0}, pollfd{listening_.fd(), POLLIN, 0}});
    const std::size_t watched = paused ? 0 : connections_.size();
    for (std::size_t i = 0; i < watched; ++i) polled.push_back(pollfd{connections_[i]->socket.fd(), POLLIN, 0});
    if (poll(polled.data(), polled.size(), paused ? kPausedIntervalMs : -1) <= 0) continue;
    if (polled[0].revents) continue;  // woken to stop: the loop's condition says so
    // Reads before accepts: accepting appends to connections_, which the indices below refer to.
    for (std::size_t i = 0; i < watched; ++i)
      if (polled[i + 2].revents) read_from(*connections_[i]);
    if (polled[1].revents) accept_connections();
    std::erase_if(connections_, [](const auto& c) { return !c->socket.open(); });
  }
}

void DashboardListener::accept_connections() {
  for (;;) {
    const int fd = accept4(listening_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0 && errno == EINTR) continue;
    if (fd < 0) return;  // none left (or none possible now: the next poll tries again)
    auto c = std::make_unique<Connection>();
    c->id = next_connection_++;
    c->socket = OwnedFd(fd);
    c->peer = peer_name(fd);
    hand_on(RemoteUpdate{RemoteUpdate::Kind::connected, c->id, c->peer, {}, {}, false});
    const auto open = static_cast<int>(std::count_if(connections_.begin(), connections_.end(),
                                                     [](const auto& k) { return k->socket.open(); }));
    if (open >= limits_.connections) {
      close_connection(*c, "dropped " + c->peer + ": too many connections (" + std::to_string(open) +
                               " open; at most " + std::to_string(limits_.connections) + ")",
                       true);
      continue;
    }
    connections_.push_back(std::move(c));
  }
}

void DashboardListener::read_from(Connection& c) {
  char buffer[kReadChunk];
  const ssize_t n = recv(c.socket.fd(), buffer, sizeof buffer, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) {
    const std::string how = n == 0 ? "closed the stream" : "lost the connection (" + errno_words(errno) + ")";
    close_connection(c,
                     c.hello ? c.peer + " " + how + " without a bye (run '" + c.hello->run + "', " +
                                   ranks_text(c.hello->rank, c.hello->ranks) + "): the run may have failed"
                             : c.peer + " " + how + " before its hello",
                     false);
    return;
  }
  try {
    c.decoder.feed(std::string_view(buffer, static_cast<std::size_t>(n)));
    while (std::optional<WireMessage> m = c.decoder.next()) {
      check_message(c, *m);
      if (std::holds_alternative<WireBye>(*m)) {  // the run is done; anything after its bye is ignored
        close_connection(c, "", false);
        return;
      }
      // A failure ends the stream as a bye does, after the UI has it: the run is marked failed with its error.
      const auto* failed = std::get_if<WireFailed>(&*m);
      const std::string why = failed ? "run '" + c.hello->run + "' (" + ranks_text(c.hello->rank, c.hello->ranks) +
                                           ") failed: " + failed->error
                                     : "";
      hand_on(RemoteUpdate{RemoteUpdate::Kind::message, c.id, {}, std::move(*m), {}, false});
      if (failed) {
        close_connection(c, why, false);
        return;
      }
    }
  } catch (const Error& e) {
    close_connection(c, "dropped " + c.peer + ": " + e.what(), true);
  }
}

void DashboardListener::make_room(bool new_run) {
  while ((new_run && kept_runs_.size() >= limits_.runs) || messages_taken_ >= limits_.messages) {
    auto oldest = kept_runs_.end();
    for (auto it = kept_runs_.begin(); it != kept_runs_.end(); ++it)
      if (!runs_.count(it->first) && (oldest == kept_runs_.end() || it->second.order < oldest->second.order))
        oldest = it;
    if (oldest == kept_runs_.end()) return;  // every kept run still streams: the caller refuses
    messages_taken_ -= oldest->second.messages;
    hand_on(RemoteUpdate{RemoteUpdate::Kind::forgotten, 0, {}, {}, {}, false, oldest->first});
    kept_runs_.erase(oldest);
  }
}

void DashboardListener::check_message(Connection& c, const WireMessage& m) {
  const auto* hello = std::get_if<WireHello>(&m);
  make_room(hello && !c.hello && !kept_runs_.count(hello->run));
  check(messages_taken_ < limits_.messages, "this dashboard holds ", limits_.messages,
        " messages of runs still streaming, all it holds (start another for more)");
  if (const WireHello* h = hello) {
    check(!c.hello, "a second hello (run '", h->run, "'; the first was run '", c.hello ? c.hello->run : "", "')");
    check(kept_runs_.count(h->run) || kept_runs_.size() < limits_.runs, "run '", h->run, "' would be run ",
          kept_runs_.size() + 1, "; this dashboard shows at most ", limits_.runs,
          " and all of them are still streaming (start another for more)");
    // Another stream of the same run must agree on the world and carry other ranks.
    if (const auto other = runs_.find(h->run); other != runs_.end()) {
      const RunClaim& run = other->second;
      check(run.world == h->world, "run '", h->run, "' has a world of ", run.world, " (its first stream said so); this "
            "hello says ", h->world);
      for (int r = h->rank; r < h->rank + h->ranks; ++r)
        check(run.stream_of_rank[static_cast<std::size_t>(r)] == 0, "rank ", r, " of run '", h->run,
              "' already has a stream (connection ", run.stream_of_rank[static_cast<std::size_t>(r)], ")");
    }
    RunClaim& run = runs_[h->run];
    if (run.world == 0) {
      run.world = h->world;
      run.stream_of_rank.assign(static_cast<std::size_t>(h->world), 0);
    }
    for (int r = h->rank; r < h->rank + h->ranks; ++r) run.stream_of_rank[static_cast<std::size_t>(r)] = c.id;
    const auto [kept, fresh] = kept_runs_.try_emplace(h->run);
    if (fresh) kept->second.order = next_run_order_++;
    ++kept->second.messages;
    ++messages_taken_;
    c.hello = *h;
    return;
  }
  // The decoder lets nothing but a hello open a stream; *c.hello below must never be empty all the same.
  check(c.hello.has_value(), kind_name(m), " before the stream's hello");
  const WireHello& h = *c.hello;
  const auto check_rank = [&](int rank) {
    check(rank >= h.rank && rank < h.rank + h.ranks, kind_name(m), " of rank ", rank, "; this stream carries ",
          ranks_text(h.rank, h.ranks), " of a world of ", h.world);
  };
  if (const auto* e = std::get_if<TraceEvent>(&m)) {
    check_rank(e->rank);
    for (const OpRef& d : e->deps)
      check(d.rank >= 0 && d.rank < h.world, "event '", e->name, "' depends on rank ", d.rank, "; expected 0..",
            h.world - 1);
  } else if (const auto* s = std::get_if<CounterSample>(&m)) {
    check_rank(s->rank);
  } else if (const auto* s = std::get_if<WireStep>(&m)) {
    check_rank(s->rank);
  }
  // The stream is open, so its run is kept: make_room forgets only runs with no open stream.
  ++kept_runs_[h.run].messages;
  ++messages_taken_;
}

void DashboardListener::close_connection(Connection& c, std::string why, bool dropped) {
  if (!why.empty()) std::fprintf(stderr, "fsdplab: %s\n", why.c_str());
  if (c.hello) {
    const auto found = runs_.find(c.hello->run);
    if (found != runs_.end()) {
      for (int& stream : found->second.stream_of_rank)
        if (stream == c.id) stream = 0;
      const auto& streams = found->second.stream_of_rank;
      if (std::all_of(streams.begin(), streams.end(), [](int s) { return s == 0; })) runs_.erase(found);
    }
  }
  c.socket.close();
  hand_on(RemoteUpdate{RemoteUpdate::Kind::closed, c.id, {}, {}, std::move(why), dropped});
}

}  // namespace fsdplab
