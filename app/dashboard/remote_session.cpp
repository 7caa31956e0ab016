#include "app/dashboard/remote_session.hpp"

#include <algorithm>

namespace fsdplab::app {

std::string_view remote_state_name(RemoteStream::State s) {
  switch (s) {
    case RemoteStream::State::connected: return "connected";
    case RemoteStream::State::streaming: return "streaming";
    case RemoteStream::State::finished: return "finished";
    case RemoteStream::State::failed: return "failed";
    case RemoteStream::State::lost: return "lost";
    case RemoteStream::State::dropped: return "dropped";
  }
  return "?";
}

RemoteSession::RemoteSession(std::string_view address, ListenerLimits limits) : listener_(address, limits) {}

std::size_t RemoteSession::drain() {
  scratch_.clear();
  const std::size_t moved = listener_.drain(scratch_);
  for (RemoteUpdate& u : scratch_) apply(u);
  store_.remeasure_steps();
  if (moved > 0) forget_old_streams();
  return moved;
}

// The listener has checked every message against its stream (a hello first, ranks within it), so the
// store's own checks hold here.
void RemoteSession::apply(RemoteUpdate& u) {
  if (u.kind == RemoteUpdate::Kind::connected) {
    streams_[u.connection].peer = std::move(u.peer);
    return;
  }
  if (u.kind == RemoteUpdate::Kind::forgotten) return forget_run(u.run);
  const auto found = streams_.find(u.connection);
  RemoteStream* s = found == streams_.end() ? nullptr : &found->second;
  if (u.kind == RemoteUpdate::Kind::closed) {
    // A failed stream's close says why it failed (the problems list keeps it); its state stays failed.
    if (s && s->state != RemoteStream::State::failed)
      s->state = u.why.empty() ? RemoteStream::State::finished
                 : u.dropped   ? RemoteStream::State::dropped
                               : RemoteStream::State::lost;
    if (!u.why.empty()) {
      problems_.push_back(std::move(u.why));
      ++problem_count_;
      if (problems_.size() > kKeptProblems) problems_.erase(problems_.begin());
    }
    return;
  }
  if (!s) return;  // a connection forgotten as old cannot send: it was closed before it was forgotten
  ++s->messages;
  if (const auto* h = std::get_if<WireHello>(&u.message)) {
    auto [at, fresh] = source_of_run_.try_emplace(h->run, -1);
    if (fresh) {
      const std::string mode = h->mode.empty() ? "" : ", " + h->mode;
      at->second = store_.add_source(
          "remote: " + h->run + " (" + std::to_string(h->world) + (h->world == 1 ? " rank" : " ranks") + mode + ")",
          h->world, h->mode == "sync");
      store_.set_wall_clock(at->second, h->backend != "sim");  // a GPU's run: its times are wall-clock
    }
    s->state = RemoteStream::State::streaming;
    s->source = at->second;
    s->first_rank = h->rank;
    s->ranks = h->ranks;
  } else if (const auto* e = std::get_if<TraceEvent>(&u.message)) {
    store_.add_event(s->source, *e);
  } else if (const auto* c = std::get_if<CounterSample>(&u.message)) {
    store_.add_counter(s->source, *c);
  } else if (const auto* step = std::get_if<WireStep>(&u.message)) {
    store_.add_step(s->source, step->step, step->begin, step->end, step->loss, step->grad_norm,
                    store_.source(s->source).sync);
  } else if (auto* failed = std::get_if<WireFailed>(&u.message)) {
    s->state = RemoteStream::State::failed;
    // The first failure a run's streams report is its cause (a process's peers fail after it); a race the stream's own
    // ranks ran into is marked as a live run's.
    const TraceSource& source = store_.source(s->source);
    if (failed->race && !source.race && failed->race->rank >= s->first_rank &&
        failed->race->rank < s->first_rank + s->ranks)
      store_.set_race(s->source, std::move(*failed->race));
    if (source.failure.empty()) store_.set_failure(s->source, std::move(failed->error));
  }
}

void RemoteSession::forget_run(const std::string& run) {
  const auto found = source_of_run_.find(run);
  if (found == source_of_run_.end()) return;
  const int source = found->second;
  source_of_run_.erase(found);
  store_.remove_source(source);
  for (auto& [id, other] : source_of_run_)
    if (other > source) --other;
  // Its streams were all closed (the listener forgets only such runs); the sources after it moved down.
  std::erase_if(streams_, [&](const auto& entry) { return entry.second.source == source; });
  for (auto& [connection, s] : streams_)
    if (s.source > source) --s.source;
}

void RemoteSession::forget_old_streams() {
  const auto closed = [](const RemoteStream& s) {
    return s.state != RemoteStream::State::connected && s.state != RemoteStream::State::streaming;
  };
  auto count = static_cast<std::size_t>(
      std::count_if(streams_.begin(), streams_.end(), [&](const auto& entry) { return closed(entry.second); }));
  for (auto it = streams_.begin(); count > kKeptClosed && it != streams_.end();) {
    if (closed(it->second)) {
      it = streams_.erase(it);
      --count;
    } else {
      ++it;
    }
  }
}

std::size_t RemoteSession::most_steps() const {
  std::size_t most = 0;
  for (const TraceSource& s : store_.sources()) most = std::max(most, s.steps.size());
  return most;
}

}  // namespace fsdplab::app
