// The report header's facts about where it ran: the host and its CPU.
#include <unistd.h>

#include <array>
#include <fstream>
#include <string>
#include <thread>

#include "app/report/report_context.hpp"

namespace fsdplab::app {

std::string report_hostname() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0 || host[0] == '\0') return "unknown";
  return host.data();
}

// "Intel(R) Xeon(R) ... (2 hardware threads)": /proc/cpuinfo's model name where there is one.
std::string report_cpu() {
  std::string model;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; model.empty() && std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos) model = line.substr(line.find_first_not_of(" \t", colon + 1));
  }
  if (model.empty()) model = "unknown CPU";
  const unsigned threads = std::thread::hardware_concurrency();
  return threads ? model + " (" + std::to_string(threads) + " hardware threads)" : model;
}

}  // namespace fsdplab::app
