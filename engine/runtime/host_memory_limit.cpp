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

// A limit of 0 on all a process may hold is one the system does not set; nothing free beyond what the processes hold
// is a real bound.
void add_bound(std::vector<HostMemoryBound>& bounds, std::uint64_t bytes, std::string source, bool host_wide = true,
               bool beyond_held = false) {
  if ((bytes == 0 && !beyond_held) || bytes >= kUnlimited) return;
  bounds.push_back({static_cast<double>(bytes), std::move(source), host_wide, beyond_held});
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

// One cgroup version's files: the group's limit, what its processes use (page cache included), and the keys of
// memory.stat that count its page cache on the file LRU lists (what the kernel reclaims before it fails an allocation;
// shared memory sits on the anonymous lists, so it is not among them).
struct CgroupFiles {
  const char* limit;
  const char* usage;
  const char* active_file;
  const char* inactive_file;
  const char* label;
};
constexpr CgroupFiles kCgroupV2{"memory.max", "memory.current", "active_file", "inactive_file", "cgroup v2"};
// v1's usage is hierarchical: so are the total_ keys of its memory.stat.
constexpr CgroupFiles kCgroupV1{"memory.limit_in_bytes", "memory.usage_in_bytes", "total_active_file",
                                "total_inactive_file", "cgroup v1"};

// The whole of a file of keyed lines (/proc/meminfo, memory.stat); empty where it cannot be read, so no key is found.
std::string whole_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// What follows `key` on the first line of `text` that starts with it; nullopt where no line does.
std::optional<std::string_view> after_key(std::string_view text, std::string_view key) {
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t newline = std::min(text.find('\n', start), text.size());
    const std::string_view line = text.substr(start, newline - start);
    start = newline + 1;
    if (line.starts_with(key)) return line.substr(key.size());
  }
  return std::nullopt;
}

// The value of `key` in a memory.stat ("key bytes" lines); nullopt where it has none.
std::optional<std::uint64_t> memory_stat_value(std::string_view text, std::string_view key) {
  const auto value = after_key(text, std::string(key) + ' ');
  return value ? parse_cgroup_memory_limit(*value) : std::nullopt;
}

// What a group with a limit has free: its limit less what its processes use, their page cache counted free (the
// kernel reclaims it for them before the group runs out), as MemAvailable counts it for the host. Beyond what the
// processes hold, which its usage includes. nullopt where its usage or memory.stat cannot be read.
std::optional<std::uint64_t> cgroup_free_bytes(const std::filesystem::path& folder, std::uint64_t limit,
                                               const CgroupFiles& files) {
  const auto usage_text = read_small_file(folder / files.usage);
  const auto usage = usage_text ? parse_cgroup_memory_limit(*usage_text) : std::nullopt;
  const std::string stat = whole_file(folder / "memory.stat");
  const auto active = memory_stat_value(stat, files.active_file);
  const auto inactive = memory_stat_value(stat, files.inactive_file);
  if (!usage || !active || !inactive) return std::nullopt;
  const std::uint64_t working_set = *usage - std::min(*usage, *active + *inactive);
  return limit - std::min(limit, working_set);
}

// The limit of the group `relative` under `hierarchy` and of each of its ancestors: a parent's limit binds its
// children too. Each limit bounds twice: as the most the processes may hold, and as what its group has free beside
// what they hold (the group's other processes use the rest). The group's own folder may be missing where the
// process sees a cgroup namespace mounted at its root; its ancestors present are still read.
void read_cgroup_tree(std::vector<HostMemoryBound>& bounds, const std::filesystem::path& hierarchy,
                      const std::string& relative, const CgroupFiles& files) {
  std::error_code ec;
  if (!std::filesystem::is_directory(hierarchy, ec)) return;
  std::filesystem::path group = std::filesystem::path(relative).relative_path();
  for (;;) {
    const std::filesystem::path folder = hierarchy / group, file = folder / files.limit;
    const auto text = read_small_file(file);
    if (const auto limit = text ? parse_cgroup_memory_limit(*text) : std::nullopt; limit && *limit < kUnlimited) {
      add_bound(bounds, *limit, std::string(files.label) + " " + file.string());
      if (const auto free = cgroup_free_bytes(folder, *limit, files))
        add_bound(bounds, *free,
                  "what " + std::string(files.label) + " " + folder.string() + " has free (" + files.limit + " less " +
                      files.usage + ", its page cache counted free)",
                  /*host_wide=*/true, /*beyond_held=*/true);
    }
    if (group.empty()) return;
    group = group.parent_path();
  }
}

void read_cgroups(std::vector<HostMemoryBound>& bounds, const HostMemorySources& sources) {
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
      read_cgroup_tree(bounds, sources.cgroup_root, relative, kCgroupV2);
      read_cgroup_tree(bounds, sources.cgroup_root / "unified", relative, kCgroupV2);
      continue;
    }
    std::istringstream names(controllers);
    for (std::string controller; std::getline(names, controller, ',');)
      if (controller == "memory") read_cgroup_tree(bounds, sources.cgroup_root / "memory", relative, kCgroupV1);
  }
}

void read_rlimit(std::vector<HostMemoryBound>& bounds, int resource, const char* label) {
  rlimit value{};
  if (::getrlimit(resource, &value) != 0 || value.rlim_cur == RLIM_INFINITY) return;
  add_bound(bounds, static_cast<std::uint64_t>(value.rlim_cur), label, /*host_wide=*/false);
}

}  // namespace

std::optional<std::uint64_t> parse_meminfo_available(std::string_view text) {
  std::optional<std::string_view> value = after_key(text, "MemAvailable:");
  if (!value) return std::nullopt;
  while (!value->empty() && value->front() == ' ') value->remove_prefix(1);
  std::uint64_t kilobytes = 0;
  const auto [after, error] = std::from_chars(value->data(), value->data() + value->size(), kilobytes);
  if (error != std::errc() || value->substr(static_cast<std::size_t>(after - value->data())) != " kB")
    return std::nullopt;
  return kilobytes * 1024;
}

std::optional<std::uint64_t> parse_cgroup_memory_limit(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::uint64_t bytes = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), bytes);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return bytes;
}

std::vector<HostMemoryBound> host_memory_bounds(const HostMemorySources& sources) {
  std::vector<HostMemoryBound> bounds;
  if (sources.read_physical_ram) {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0)
      add_bound(bounds, static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page), "this host's RAM");
    if (const auto available = parse_meminfo_available(whole_file(sources.meminfo)))
      add_bound(bounds, *available, "the memory this host has free (MemAvailable in " + sources.meminfo.string() + ")",
                /*host_wide=*/true, /*beyond_held=*/true);
  }
  if (sources.read_rlimits) {
    read_rlimit(bounds, RLIMIT_AS, "the process's address-space limit (RLIMIT_AS, ulimit -v)");
    read_rlimit(bounds, RLIMIT_DATA, "the process's data limit (RLIMIT_DATA, ulimit -d)");
  }
  read_cgroups(bounds, sources);
  return bounds;
}

HostMemoryLimit host_memory_limit(const HostMemorySources& sources) {
  return host_memory_limit_of({0, 0, resident_bytes(), host_memory_bounds(sources)});
}

HostMemoryLimit host_memory_limit_of(const ProcessMemoryRequest& process) {
  HostMemoryLimit limit;
  for (const HostMemoryBound& bound : process.bounds) {
    const double bytes = bound.bytes + (bound.beyond_held ? process.held : 0);
    if (limit.bytes > 0 && limit.bytes <= bytes) continue;
    limit.bytes = bytes;
    limit.source = bound.source + (bound.beyond_held ? " with what this process holds" : "");
  }
  return limit;
}

double resident_bytes() {
  std::ifstream statm("/proc/self/statm");  // sizes in pages: total, resident, ...
  std::uint64_t total = 0, resident = 0;
  const long page = ::sysconf(_SC_PAGE_SIZE);
  if (!(statm >> total >> resident) || page <= 0) return 0;
  return static_cast<double>(resident) * static_cast<double>(page);
}

ProcessMemoryRequest this_process_memory_request(double need, int rank) {
  return {rank, need, resident_bytes(), host_memory_bounds()};
}

// See [Note: processes on one host share its memory] (host_memory_limit.hpp).
std::optional<std::string> host_memory_refusal(const std::vector<ProcessMemoryRequest>& on_host, std::string_view who,
                                               std::string_view remedy) {
  double worst_excess = 0;
  std::string worst;
  const auto consider = [&](double need_and_held, double may_use, const auto& message) {
    if (need_and_held - may_use > worst_excess) {
      worst_excess = need_and_held - may_use;
      worst = message(may_use);
    }
  };
  const auto shares = [](const ProcessMemoryRequest& process, const HostMemoryBound& bound) -> const HostMemoryBound* {
    for (const HostMemoryBound& b : process.bounds)
      if (b.host_wide && b.source == bound.source) return &b;
    return nullptr;
  };
  for (std::size_t i = 0; i < on_host.size(); ++i) {
    const ProcessMemoryRequest& process = on_host[i];
    for (const HostMemoryBound& bound : process.bounds) {
      // The processes bound by it together: those that read it too, if it is the host's; else this one alone.
      std::vector<const ProcessMemoryRequest*> sharers;
      double least_read = bound.bytes;
      for (std::size_t j = 0; j < on_host.size(); ++j) {
        const HostMemoryBound* theirs = bound.host_wide ? shares(on_host[j], bound) : nullptr;
        if (j == i || theirs) sharers.push_back(&on_host[j]);
        if (theirs) least_read = std::min(least_read, theirs->bytes);
      }
      if (sharers.front() != &process) continue;  // weighed already, at the first process that read it
      double need = 0, held = 0;
      for (const ProcessMemoryRequest* p : sharers) {
        need += p->need;
        held += p->held;
      }
      const std::string source = bound.source + (!bound.beyond_held    ? ""
                                                 : sharers.size() == 1 ? " with what this process holds"
                                                                       : " with what they hold");
      consider(need + held, least_read + (bound.beyond_held ? held : 0), [&](double may_use) {
        std::ostringstream message;
        if (sharers.size() == 1) {
          if (on_host.size() > 1) message << "rank " << process.rank << ": ";
          message << who << " need about " << need / 1e9
                  << " GB of this host's memory (the sim device keeps its memory in host RAM) beside the " << held / 1e9
                  << " GB this process holds already, and it may use " << may_use / 1e9 << " GB (" << source << "); "
                  << remedy;
        } else {
          message << who << " need about " << need / static_cast<double>(sharers.size()) / 1e9 << " GB in each of the "
                  << sharers.size() << " processes of this run on this host (ranks ";
          for (std::size_t k = 0; k < sharers.size(); ++k) message << (k == 0 ? "" : ", ") << sharers[k]->rank;
          message << "): " << need / 1e9
                  << " GB of this host's memory together (the sim device keeps its memory in host RAM) beside the "
                  << held / 1e9 << " GB they hold already, and together they may use " << may_use / 1e9 << " GB ("
                  << source << "); " << remedy;
        }
        return message.str();
      });
    }
  }
  if (worst.empty()) return std::nullopt;
  return worst;
}

void check_fits_host_memory(double bytes, std::string_view who, std::string_view remedy) {
  if (const auto refusal = host_memory_refusal({this_process_memory_request(bytes)}, who, remedy)) fail(*refusal);
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
