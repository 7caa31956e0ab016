// host_memory_limit.hpp — how much memory this process may really use, for the checks that refuse a run
// the sim device could not hold (its tensors live in host RAM).
//
// The machine's RAM is only the outer bound: what the other programs hold is not free (the kernel's estimate of
// what a new allocation can still get, MemAvailable in /proc/meminfo, is what this process holds plus that much
// more), and a process under `ulimit -v` (RLIMIT_AS, RLIMIT_DATA) or in a container or batch job whose cgroup caps
// its memory (cgroup v2 memory.max, v1 memory.limit_in_bytes, on its own group or any ancestor) gets std::bad_alloc
// or the OOM killer long before the RAM is full. The limit is the smallest of all of them, each counted as the most
// this process may hold in all, with the name of the one that binds, so a refusal can say why.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace fsdplab {

struct HostMemoryLimit {
  double bytes = 0;    // 0 when nothing could be read (then no check refuses anything)
  std::string source;  // what sets it: "this host's RAM", "the memory this host has free ...", "cgroup ...", ...
};

// Where the limits are read from; tests point them at a fake tree.
struct HostMemorySources {
  std::filesystem::path proc_self_cgroup = "/proc/self/cgroup";
  std::filesystem::path cgroup_root = "/sys/fs/cgroup";
  bool read_rlimits = true;
  bool read_physical_ram = true;  // the host's RAM, and what of it is free (`meminfo`)
  std::filesystem::path meminfo = "/proc/meminfo";
};

// The smallest of the host's RAM, its free memory with what this process holds, the process's address-space and
// data rlimits and its cgroup's memory limit.
HostMemoryLimit host_memory_limit(const HostMemorySources& sources = {});

// The bytes this process holds in RAM now (its resident set, /proc/self/statm): what a check adds to the memory it
// is about to allocate. 0 where it cannot be read.
double resident_bytes();

// Refuses, with an Error, to allocate `bytes` more when they and what this process holds already (resident_bytes) would
// not fit in host_memory_limit(): `who` says what needs them ("the ranks (4 in this process, 1.2 GB each)"), `remedy`
// what to change. Refuses nothing where no limit can be read.
void check_fits_host_memory(double bytes, std::string_view who, std::string_view remedy);

// The kilobytes /proc/meminfo's `MemAvailable:` line gives, in bytes; nullopt where `text` has no such line.
std::optional<std::uint64_t> parse_meminfo_available(std::string_view text);

// A cgroup limit file's value: "max" (v2) or a byte count; nullopt for "max" or text that is not a number.
std::optional<std::uint64_t> parse_cgroup_memory_limit(std::string_view text);

// The message of a std::bad_alloc: out of host memory, with what this process may use.
std::string out_of_memory_message(std::string_view where);

}  // namespace fsdplab
