// host_memory_limit.hpp — how much memory this process may really use, for the checks that refuse a run
// the sim device could not hold (its tensors live in host RAM).
//
// The machine's RAM is only the outer bound: what the other programs hold is not free (the kernel's estimate of
// what a new allocation can still get, MemAvailable in /proc/meminfo, is what this process holds plus that much
// more), and a process under `ulimit -v` (RLIMIT_AS, RLIMIT_DATA) or in a container or batch job whose cgroup caps
// its memory (cgroup v2 memory.max, v1 memory.limit_in_bytes, on its own group or any ancestor) gets std::bad_alloc
// or the OOM killer long before the RAM is full; in a group with a limit, the group's other processes use part of it
// (what the group has free is its limit less their usage, page cache counted free as MemAvailable counts it). The
// limit is the smallest of all of them, each counted as the most this process may hold in all, with the name of the
// one that binds, so a refusal can say why.
//
// See [Note: processes on one host share its memory].
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

// One bound on what this process may hold, as this process reads it.
struct HostMemoryBound {
  double bytes = 0;
  std::string source;  // its name in a refusal; bounds of one source on one host are the same bound
  // Whether the processes on this host share it (the RAM, the free memory, a cgroup's limit: the processes of one
  // group share that group's), or it is this process's own (an rlimit).
  bool host_wide = true;
  // Whether `bytes` is what is free beyond what the processes hold already (MemAvailable; what a cgroup has free),
  // not all they may hold.
  bool beyond_held = false;
};

// Every bound that can be read: the host's RAM, its free memory, the process's address-space and data rlimits, its
// cgroups' memory limits and what each of those groups has free. Empty where none can be read.
std::vector<HostMemoryBound> host_memory_bounds(const HostMemorySources& sources = {});

// The smallest of host_memory_bounds, as the most this process may hold (the free memory with what it holds).
HostMemoryLimit host_memory_limit(const HostMemorySources& sources = {});

// The bytes this process holds in RAM now (its resident set, /proc/self/statm): what a check adds to the memory it
// is about to allocate. 0 where it cannot be read.
double resident_bytes();

// What one process of a run asks of its host before it allocates: `need` bytes more beside the `held` it holds.
struct ProcessMemoryRequest {
  int rank = 0;  // the process's rank in its MPI world (0 for a process alone): the refusal names it
  double need = 0;
  double held = 0;                      // resident_bytes when the request was made
  std::vector<HostMemoryBound> bounds;  // host_memory_bounds, as this process read them
};
ProcessMemoryRequest this_process_memory_request(double need, int rank = 0);

// The smallest of a process's bounds, as the most it may hold (a bound of free memory with what it holds): what
// host_memory_limit reads, from a request already read.
HostMemoryLimit host_memory_limit_of(const ProcessMemoryRequest& process);

// [Note: processes on one host share its memory]
// Ranks that are threads of one process are counted together by the process (its `need` is all of theirs). Ranks
// that are processes (`mpirun -np 4 fsdplab run --comm mpi`) each read the same host, and four that each fit in
// what is free may not fit together. So the processes of a run on one host send each other their requests, and
// each decides on all of them, alike: a bound the processes share (same source, host_wide) must hold what they all
// need and hold, the least any of them read; a bound of a process's own (its rlimit) holds what that one needs and
// holds, and is never multiplied by the processes. The check runs before any rank allocates, at one point of the
// launch every process reaches (rank_launch.hpp: check_ranks_fit_host_memory), so each has made its plan and
// nothing more: what a peer holds is in its `held`, and not yet out of what the others read as free.
//
// The refusal of the requests of the processes of one run on one host (`on_host`: one entry per process, a process
// alone is one), nullopt where they fit. Of the bounds they exceed, it names the one exceeded most: `who` needs it
// ("the ranks (4 in this process, 1.2 GB each)"), `remedy` says what to change. Pure: tests feed it fake bounds.
std::optional<std::string> host_memory_refusal(const std::vector<ProcessMemoryRequest>& on_host, std::string_view who,
                                               std::string_view remedy);

// Refuses, with an Error, to allocate `bytes` more in this process when they and what it holds already would not fit
// in its bounds: host_memory_refusal of this process alone. Refuses nothing where no bound can be read.
void check_fits_host_memory(double bytes, std::string_view who, std::string_view remedy);

// The kilobytes /proc/meminfo's `MemAvailable:` line gives, in bytes; nullopt where `text` has no such line.
std::optional<std::uint64_t> parse_meminfo_available(std::string_view text);

// A cgroup limit file's value: "max" (v2) or a byte count; nullopt for "max" or text that is not a number.
std::optional<std::uint64_t> parse_cgroup_memory_limit(std::string_view text);

// The message of a std::bad_alloc: out of host memory, with what this process may use.
std::string out_of_memory_message(std::string_view where);

}  // namespace fsdplab
