#include "engine/runtime/host_memory_limit.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string_view>
#include <vector>

#include "engine/runtime/error.hpp"

namespace fsdplab {

namespace {

// cgroup v1 writes "no limit" as a page-rounded 2^63 - 1: anything this large limits nothing.
constexpr std::uint64_t kUnlimited = std::uint64_t{1} << 62;

struct Candidate {
  std::uint64_t bytes;
  std::string source;
};

void keep_smaller(HostMemoryLimit& limit, const Candidate& candidate) {
  if (candidate.bytes == 0 || candidate.bytes >= kUnlimited) return;
  const auto bytes = static_cast<double>(candidate.bytes);
  if (limit.bytes > 0 && limit.bytes <= bytes) return;
  limit.bytes = bytes;
  limit.source = candidate.source;
}

std::optional<std::string> read_small_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string text;
  std::getline(in, text);
  return text;
}

// The limit file `name` in the group `relative` under `hierarchy` and in each of its ancestors: a parent's
// limit binds its children too. The group's own folder may be missing where the process sees a cgroup
// namespace mounted at its root; its ancestors present are still read.
void read_cgroup_tree(HostMemoryLimit& limit, const std::filesystem::path& hierarchy, const std::string& relative,
                      const char* name, const std::string& label) {
  std::error_code ec;
  if (!std::filesystem::is_directory(hierarchy, ec)) return;
  std::filesystem::path group = std::filesystem::path(relative).relative_path();
  for (;;) {
    const std::filesystem::path file = hierarchy / group / name;
    if (const auto text = read_small_file(file))
      if (const auto bytes = parse_cgroup_memory_limit(*text))
        keep_smaller(limit, {*bytes, label + " " + file.string()});
    if (group.empty()) return;
    group = group.parent_path();
  }
}

void read_cgroups(HostMemoryLimit& limit, const HostMemorySources& sources) {
  std::ifstream in(sources.proc_self_cgroup);
  std::string line;
  while (std::getline(in, line)) {
    // "hierarchy-id:controllers:path"; cgroup v2's line is "0::path".
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? std::string::npos : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string relative = line.substr(second + 1);
    if (line.compare(0, first, "0") == 0 && controllers.empty()) {
      read_cgroup_tree(limit, sources.cgroup_root, relative, "memory.max", "cgroup v2");
      read_cgroup_tree(limit, sources.cgroup_root / "unified", relative, "memory.max", "cgroup v2");
      continue;
    }
    std::istringstream names(controllers);
    for (std::string controller; std::getline(names, controller, ',');)
      if (controller == "memory")
        read_cgroup_tree(limit, sources.cgroup_root / "memory", relative, "memory.limit_in_bytes", "cgroup v1");
  }
}

void read_rlimit(HostMemoryLimit& limit, int resource, const char* label) {
  rlimit value{};
  if (::getrlimit(resource, &value) != 0 || value.rlim_cur == RLIM_INFINITY) return;
  keep_smaller(limit, {static_cast<std::uint64_t>(value.rlim_cur), label});
}

}  // namespace

std::optional<std::uint64_t> parse_meminfo_available(std::string_view text) {
  constexpr std::string_view kKey = "MemAvailable:";
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t newline = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, newline - start);
    start = newline + 1;
    if (!line.starts_with(kKey)) continue;
    line.remove_prefix(kKey.size());
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    std::uint64_t kilobytes = 0;
    const auto [after, error] = std::from_chars(line.data(), line.data() + line.size(), kilobytes);
    if (error != std::errc() || line.substr(static_cast<std::size_t>(after - line.data())) != " kB")
      return std::nullopt;
    return kilobytes * 1024;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> parse_cgroup_memory_limit(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::uint64_t bytes = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), bytes);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return bytes;
}

HostMemoryLimit host_memory_limit(const HostMemorySources& sources) {
  HostMemoryLimit limit;
  if (sources.read_physical_ram) {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0)
      keep_smaller(limit, {static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page), "this host's RAM"});
    std::ifstream in(sources.meminfo);
    const std::string meminfo{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (const auto available = parse_meminfo_available(meminfo))
      keep_smaller(limit, {*available + static_cast<std::uint64_t>(resident_bytes()),
                           "the memory this host has free (MemAvailable in " + sources.meminfo.string() +
                               ") with what this process holds"});
  }
  if (sources.read_rlimits) {
    read_rlimit(limit, RLIMIT_AS, "the process's address-space limit (RLIMIT_AS, ulimit -v)");
    read_rlimit(limit, RLIMIT_DATA, "the process's data limit (RLIMIT_DATA, ulimit -d)");
  }
  read_cgroups(limit, sources);
  return limit;
}

double resident_bytes() {
  std::ifstream statm("/proc/self/statm");  // sizes in pages: total, resident, ...
  std::uint64_t total = 0, resident = 0;
  const long page = ::sysconf(_SC_PAGE_SIZE);
  if (!(statm >> total >> resident) || page <= 0) return 0;
  return static_cast<double>(resident) * static_cast<double>(page);
}

void check_fits_host_memory(double bytes, std::string_view who, std::string_view remedy) {
  const HostMemoryLimit host = host_memory_limit();  // RAM, or less under an rlimit or a cgroup limit
  const double held = resident_bytes();              // the program, its libraries, what it built to plan the run
  check(host.bytes <= 0 || bytes + held <= host.bytes, who, " need about ", bytes / 1e9,
        " GB of this host's memory (the sim device keeps its memory in host RAM) beside the ", held / 1e9,
        " GB this process holds already, and it may use ", host.bytes / 1e9, " GB (", host.source, "); ", remedy);
}

std::string out_of_memory_message(std::string_view where) {
  const HostMemoryLimit limit = host_memory_limit();
  std::ostringstream message;
  message << "out of host memory (std::bad_alloc) " << where;
  if (limit.bytes > 0) message << "; this process may use " << limit.bytes / 1e9 << " GB, set by " << limit.source;
  message << "; use fewer ranks, a smaller model or batch, or --dry-run (shapes, time and memory only)";
  return message.str();
}

}  // namespace fsdplab
