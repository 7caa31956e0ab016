// exposed_communication.cpp — the exposed-communication lines of the benches.
#include "app/exposed_communication.hpp"

#include <cstdio>

#include "engine/runtime/sim_time.hpp"

namespace fsdplab::app {

void print_exposed_communication(const ExposedCommunication& exposed, const std::string& heading) {
  std::printf("%s, %.3f ms in all; the largest parts (time from the step's start):\n", heading.c_str(),
              ns_to_ms(exposed.total));
  for (const ExposedPart& p : exposed.largest)
    std::printf("  %-48s  %-9s  at %9.3f ms, %8.3f ms long, %8.3f ms exposed\n", p.name.c_str(), p.phase.c_str(),
                ns_to_ms(p.at), ns_to_ms(p.length), ns_to_ms(p.exposed));
}

}  // namespace fsdplab::app
