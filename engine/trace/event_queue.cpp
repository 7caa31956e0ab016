// event_queue.cpp — EventQueue: two SPSC queues, one per kind of record, behind the TraceSink interface.
#include "engine/trace/event_queue.hpp"

namespace fsdplab {

void EventQueue::on_event(const TraceEvent& event) { events_.push(event); }

void EventQueue::on_counter(const CounterSample& sample) { counters_.push(sample); }

std::size_t EventQueue::drain(std::vector<TraceEvent>& events, std::vector<CounterSample>& counters) {
  return events_.drain(events) + counters_.drain(counters);
}

}  // namespace fsdplab
