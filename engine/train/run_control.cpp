#include "engine/train/run_control.hpp"

#include <algorithm>
#include <array>
#include <string>

namespace fsdplab {
namespace {

// Whether any of the break choices (kinds or tasks) is on.
template <std::size_t N>
bool any_on(const std::array<bool, N>& chosen) {
  return std::any_of(chosen.begin(), chosen.end(), [](bool on) { return on; });
}

}  // namespace

void RunControl::pause() {
  const std::lock_guard lock(mutex_);
  paused_ = true;
  stepping_ = false;
  last_break_.reset();
  changed();
}

void RunControl::resume() {
  const std::lock_guard lock(mutex_);
  paused_ = false;
  stepping_ = false;
  last_break_.reset();
  changed();
}

void RunControl::step_once() {
  const std::lock_guard lock(mutex_);
  paused_ = false;
  stepping_ = true;
  last_break_.reset();
  changed();
}

void RunControl::stop() {
  const std::lock_guard lock(mutex_);
  stopped_ = true;
  changed();
}

bool RunControl::paused() const {
  const std::lock_guard lock(mutex_);
  return paused_;
}

bool RunControl::stopped() const {
  const std::lock_guard lock(mutex_);
  return stopped_;
}

void RunControl::set_break_on(FsdpEventKind kind, bool on) {
  const std::lock_guard lock(mutex_);
  break_on_[static_cast<std::size_t>(kind)] = on;
}

bool RunControl::breaks_on(FsdpEventKind kind) const {
  const std::lock_guard lock(mutex_);
  return break_on_[static_cast<std::size_t>(kind)];
}

void RunControl::set_break_on_task(int task, bool on) {
  check(task >= 1 && task <= kTaskCount, "break on task ", task, ": the lab's tasks are numbered 1 to ", kTaskCount);
  check(!on || task_reports_events(task), "break on task ", task, ": ", why_task_reports_no_events(task),
        ", so step-through has no event of it to stop at (tasks 3 to 8 report events)");
  const std::lock_guard lock(mutex_);
  break_on_task_[static_cast<std::size_t>(task - 1)] = on;
}

bool RunControl::breaks_on_task(int task) const {
  const std::lock_guard lock(mutex_);
  return task >= 1 && task <= kTaskCount && break_on_task_[static_cast<std::size_t>(task - 1)];
}

void RunControl::set_breaking(bool on) {
  const std::lock_guard lock(mutex_);
  breaking_ = on;
}

bool RunControl::breaking() const {
  const std::lock_guard lock(mutex_);
  return breaking_;
}

void RunControl::set_focus(int source, int rank) {
  const std::lock_guard lock(mutex_);
  focus_source_ = source;
  focus_rank_ = rank;
}

void RunControl::set_break_from_step(int step) {
  const std::lock_guard lock(mutex_);
  break_from_step_ = step;
}

void RunControl::set_hold_others_from_step(int step) {
  const std::lock_guard lock(mutex_);
  hold_others_from_step_ = step;
  changed();
}

int RunControl::held_ranks(int source) const {
  const std::lock_guard lock(mutex_);
  const auto held = held_ranks_.find(source);
  return held == held_ranks_.end() ? 0 : held->second;
}

bool RunControl::holds(int source, const FsdpEvent& event) const {
  if (hold_others_from_step_ < 0) return false;
  const bool chosen = breaking_ && (any_on(break_on_) || any_on(break_on_task_));
  if (source == focus_source_) return event.rank != focus_rank_ && chosen && break_event(event);
  // Another run: at its own first break event of the step (a reference beside a student's run stops where the
  // student's does), else at the first event of the step after it, which it then never passes.
  if (event.step > hold_others_from_step_) return true;
  return event.step == hold_others_from_step_ && (!chosen || break_event(event));
}

std::pair<int, int> RunControl::focus() const {
  const std::lock_guard lock(mutex_);
  return {focus_source_, focus_rank_};
}

void RunControl::set_steps_per_second(double limit) {
  check(limit >= 0, "steps per second ", limit, "; expected 0 (no limit) or more");
  const std::lock_guard lock(mutex_);
  steps_per_second_ = limit;
  wake_.notify_all();  // a pacing rank recomputes its wake-up time
}

std::optional<FsdpEvent> RunControl::last_break() const {
  const std::lock_guard lock(mutex_);
  return paused_ ? last_break_ : std::nullopt;
}

std::uint64_t RunControl::generation() const {
  const std::lock_guard lock(mutex_);
  return generation_;
}

bool RunControl::holding() const {
  const std::lock_guard lock(mutex_);
  int held = 0;  // at their holds, until stop(): not waited for (see the file's comment)
  for (const auto& [source, ranks] : held_ranks_) held += ranks;
  return paused_ || waiting_ > held;
}

void RunControl::gate(int source, const FsdpEvent& event) {
  std::unique_lock lock(mutex_);
  if (!stopped_ && breaks_at(source, event)) {
    paused_ = true;
    stepping_ = false;
    last_break_ = event;
    changed();
  }
  wait_turn(lock, source, event);
}

bool RunControl::break_event(const FsdpEvent& event) const {
  if (event.step < break_from_step_) return false;
  const bool any_kind = any_on(break_on_), any_task = any_on(break_on_task_);
  const bool task_chosen = event.task >= 1 && event.task <= kTaskCount &&
                           break_on_task_[static_cast<std::size_t>(event.task - 1)];
  return (any_kind || any_task) && (!any_kind || break_on_[static_cast<std::size_t>(event.kind)]) &&
         (!any_task || task_chosen);
}

bool RunControl::breaks_at(int source, const FsdpEvent& event) const {
  if (source != focus_source_ || event.rank != focus_rank_ || event.step < break_from_step_) return false;
  // A step with nothing to break at goes one event.
  if (stepping_) return !breaking_ || !(any_on(break_on_) || any_on(break_on_task_)) || break_event(event);
  return breaking_ && break_event(event);
}

void RunControl::wait_turn(std::unique_lock<std::mutex>& lock, int source, const FsdpEvent& event) {
  const bool step_done = event.kind == FsdpEventKind::optimizer_step;
  const std::pair key{source, event.rank};
  const auto wait = [&](const auto& how) {
    ++waiting_;
    how();
    --waiting_;
  };
  for (;;) {
    if (stopped_)
      throw RunStopped("run " + std::to_string(source) + " stopped (RunControl::stop) at rank " +
                       std::to_string(event.rank) + "'s " + std::string(fsdp_event_name(event.kind)) + " of step " +
                       std::to_string(event.step));
    // A rank that holds does not pause: it goes on to its hold (set_hold_others_from_step).
    const bool focus_rank = source == focus_source_ && event.rank == focus_rank_;
    if (paused_ && !(hold_others_from_step_ >= 0 && !focus_rank)) {
      wait([&] { wake_.wait(lock); });
      continue;
    }
    if (holds(source, event)) {
      ++held_ranks_[source];
      wait([&] { wake_.wait(lock); });
      --held_ranks_[source];
      continue;
    }
    const auto last = last_step_.find(key);
    if (step_done && steps_per_second_ > 0 && last != last_step_.end()) {
      const auto due = last->second + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(1.0 / steps_per_second_));
      if (Clock::now() < due) {
        wait([&] { wake_.wait_until(lock, due); });
        continue;  // due, or something changed: look again
      }
    }
    break;
  }
  if (step_done) last_step_[key] = Clock::now();
}

void RunControl::changed() {
  ++generation_;
  wake_.notify_all();
}

}  // namespace fsdplab
