// How much memory the process may use (engine/runtime/host_memory_limit.hpp): the smallest of RAM, the free
// memory (from a fake /proc/meminfo), the rlimits and the cgroup limits (v2 and v1, the group's own or an ancestor's),
// read here from a fake /proc/self/cgroup and cgroup tree; and a lowered RLIMIT_AS, in a child process so the test
// runner keeps its own address space. And what the processes of one run on one host may use together: the refusal
// decided on their requests, fed fake bounds.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <vector>

#include "engine/runtime/host_memory_limit.hpp"
#include "engine/train/world.hpp"
#include "test_support.hpp"

namespace fsdplab {
namespace {

using testing::contains;

class HostMemoryLimitTest : public testing::TempDirTest {
 protected:
  // Only the fake tree counts: no RAM, no rlimits.
  HostMemorySources fake(const std::string& proc_self_cgroup) {
    std::filesystem::create_directories(path("cgroup"));
    spit(path("self_cgroup"), proc_self_cgroup);
    return {path("self_cgroup"), path("cgroup"), false, false};
  }
  void limit_file(const std::string& relative, const std::string& text) {
    std::filesystem::create_directories(path("cgroup/" + relative).parent_path());
    spit(path("cgroup/" + relative), text);
  }
  // A group's limit, what its processes use and its memory.stat, in `folder` (under the fake cgroup root), with
  // cgroup v2's file names or v1's.
  void group_files(const std::string& folder, int version, const std::string& limit, const std::string& usage,
                   const std::string& stat) {
    limit_file(folder + (version == 2 ? "/memory.max" : "/memory.limit_in_bytes"), limit + "\n");
    limit_file(folder + (version == 2 ? "/memory.current" : "/memory.usage_in_bytes"), usage + "\n");
    limit_file(folder + "/memory.stat", stat);
  }
};

TEST(HostMemoryLimitParse, MaxIsNoLimitAndNumbersAreBytes) {
  EXPECT_EQ(parse_cgroup_memory_limit("max\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_memory_limit("1073741824\n"), 1073741824u);
  EXPECT_EQ(parse_cgroup_memory_limit(""), std::nullopt);
  EXPECT_EQ(parse_cgroup_memory_limit("12ab"), std::nullopt);
}

TEST_F(HostMemoryLimitTest, CgroupV2AncestorLimitBindsTheChild) {
  // The job's own group is unlimited, its parent holds 2 GB: the parent's limit is the one that binds.
  limit_file("batch/job7/memory.max", "max\n");
  limit_file("batch/memory.max", "2000000000\n");
  limit_file("memory.max", "max\n");
  const HostMemoryLimit limit = host_memory_limit(fake("0::/batch/job7\n"));
  EXPECT_EQ(limit.bytes, 2e9);
  EXPECT_TRUE(contains(limit.source, "cgroup v2")) << limit.source;
  EXPECT_TRUE(contains(limit.source, "batch/memory.max")) << limit.source;
}

TEST_F(HostMemoryLimitTest, CgroupV1MemoryControllerAndItsUnlimitedValue) {
  limit_file("memory/docker/abc/memory.limit_in_bytes", "536870912\n");
  limit_file("memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "no limit"
  const HostMemoryLimit limit = host_memory_limit(fake("5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n"));
  EXPECT_EQ(limit.bytes, 536870912.0);
  EXPECT_TRUE(contains(limit.source, "cgroup v1")) << limit.source;
  // Only "no limit" anywhere: nothing binds.
  std::filesystem::remove(path("cgroup/memory/docker/abc/memory.limit_in_bytes"));
  EXPECT_EQ(host_memory_limit(fake("4:memory:/docker/abc\n")).bytes, 0.0);
}

// The group's other processes use part of its limit: what it has free, beside what this process holds, binds below
// the limit. Its page cache on the file lists counts as free (the kernel reclaims it first); shared memory does not.
TEST_F(HostMemoryLimitTest, WhatACgroupHasFreeBindsBelowItsLimit) {
  group_files("job", 2, "8000000000", "6000000000",
              "anon 4800000000\nfile 1200000000\nactive_file 400000000\ninactive_file 600000000\nshmem 200000000\n");
  const std::vector<HostMemoryBound> bounds = host_memory_bounds(fake("0::/job\n"));
  ASSERT_EQ(bounds.size(), 2u);
  EXPECT_EQ(bounds[0].bytes, 8e9);
  EXPECT_FALSE(bounds[0].beyond_held);
  EXPECT_EQ(bounds[1].bytes, 3e9);  // 8 GB less the 6 GB used, of which 1 GB is page cache
  EXPECT_TRUE(bounds[1].host_wide && bounds[1].beyond_held);
  EXPECT_TRUE(contains(bounds[1].source, "what cgroup v2 " + path("cgroup").string() +
                                             "/job has free (memory.max less memory.current, its page cache counted "
                                             "free)"))
      << bounds[1].source;
  const HostMemoryLimit limit = host_memory_limit(fake("0::/job\n"));
  EXPECT_TRUE(contains(limit.source,
                       "has free (memory.max less memory.current, its page cache counted free) with "
                       "what this process holds"))
      << limit.source;
  // A group using all its limit but its page cache has nothing free: a bound of 0, not none.
  limit_file("job/memory.current", "9000000000\n");
  ASSERT_EQ(host_memory_bounds(fake("0::/job\n")).size(), 2u);
  EXPECT_EQ(host_memory_bounds(fake("0::/job\n"))[1].bytes, 0.0);
  // Without its usage, only the limit bounds.
  std::filesystem::remove(path("cgroup/job/memory.current"));
  EXPECT_EQ(host_memory_bounds(fake("0::/job\n")).size(), 1u);
}

TEST_F(HostMemoryLimitTest, WhatACgroupV1HasFreeCountsItsWholeSubtree) {
  // v1's usage counts the group's children: so do the total_ keys, not the group's own.
  group_files("memory/docker/abc", 1, "2000000000", "1500000000",
              "active_file 1\ninactive_file 1\ntotal_active_file 100000000\ntotal_inactive_file 400000000\n");
  const std::vector<HostMemoryBound> bounds = host_memory_bounds(fake("4:memory:/docker/abc\n"));
  ASSERT_EQ(bounds.size(), 2u);
  EXPECT_EQ(bounds[1].bytes, 1e9);
  EXPECT_TRUE(contains(bounds[1].source, "what cgroup v1 ")) << bounds[1].source;
}

TEST(HostMemoryLimitParse, MeminfoAvailableIsInKilobytes) {
  EXPECT_EQ(parse_meminfo_available("MemTotal:       32768000 kB\nMemFree:  100 kB\nMemAvailable:   2000000 kB\n"),
            2'048'000'000u);
  EXPECT_EQ(parse_meminfo_available("MemTotal:       32768000 kB\n"), std::nullopt);
  EXPECT_EQ(parse_meminfo_available("MemAvailable: lots\n"), std::nullopt);
  EXPECT_EQ(parse_meminfo_available("MemAvailable: 12 MB\n"), std::nullopt);
}

// Another program holding most of the RAM leaves less than the RAM: the free memory, with what this process holds
// already (its resident set), binds, and is named.
TEST_F(HostMemoryLimitTest, FreeMemoryBindsBelowTheRam) {
  HostMemorySources sources = fake("0::/\n");
  sources.read_physical_ram = true;
  sources.meminfo = path("meminfo");
  spit(path("meminfo"), "MemTotal:       999999999999 kB\nMemAvailable:     1000 kB\n");  // 1 MB free
  const double held = resident_bytes();
  const HostMemoryLimit limit = host_memory_limit(sources);
  EXPECT_GE(limit.bytes, 1'024'000 + 0.9 * held);
  EXPECT_LE(limit.bytes, 1'024'000 + 1.1 * held + (16 << 20));
  EXPECT_TRUE(contains(limit.source, "the memory this host has free (MemAvailable in ")) << limit.source;
  // Without the file, the RAM (more than the fake's 1 MB) is the bound.
  std::filesystem::remove(path("meminfo"));
  EXPECT_TRUE(contains(host_memory_limit(sources).source, "this host's RAM")) << host_memory_limit(sources).source;
}

TEST_F(HostMemoryLimitTest, MissingOrGarbledFilesLimitNothing) {
  limit_file("memory.max", "not a number\n");
  EXPECT_EQ(host_memory_limit(fake("0::/gone/away\n")).bytes, 0.0);
  EXPECT_EQ(host_memory_limit({path("no_such_file"), path("no_such_tree"), false, false}).bytes, 0.0);
}

// host_memory_refusal, fed requests: see [Note: processes on one host share its memory].
HostMemoryBound ram(double bytes) { return {bytes, "this host's RAM", true, false}; }
HostMemoryBound free_memory(double bytes) {
  return {bytes, "the memory this host has free (MemAvailable)", true, true};
}
HostMemoryBound address_space_limit(double bytes) {
  return {bytes, "the process's address-space limit (RLIMIT_AS)", false, false};
}
HostMemoryBound cgroup(const std::string& group, double bytes) { return {bytes, "cgroup v2 " + group, true, false}; }

std::optional<std::string> refusal(const std::vector<ProcessMemoryRequest>& on_host) {
  return host_memory_refusal(on_host, "the ranks", "use fewer");
}

TEST(HostMemoryRefusal, AProcessAloneIsRefusedByItsSmallestBound) {
  const std::vector<HostMemoryBound> bounds = {ram(8e9), free_memory(5e9), address_space_limit(3.5e9)};
  EXPECT_EQ(refusal({{0, 2.5e9, 1e9, bounds}}), std::nullopt);  // 3.5 GB in all: just fits the rlimit
  const auto refused = refusal({{0, 3e9, 1e9, bounds}});
  ASSERT_TRUE(refused);
  EXPECT_EQ(
      *refused,
      "the ranks need about 3 GB of this host's memory (the sim device keeps its memory in host RAM) beside the 1 "
      "GB this process holds already, and it may use 3.5 GB (the process's address-space limit (RLIMIT_AS)); "
      "use fewer");
  // The free memory counts beyond what the process holds: 5 GB free and 1 GB held is 6 GB in all.
  const auto short_of_free = refusal({{0, 5.5e9, 1e9, {ram(8e9), free_memory(5e9)}}});
  ASSERT_TRUE(short_of_free);
  EXPECT_TRUE(contains(*short_of_free,
                       "it may use 6 GB (the memory this host has free (MemAvailable) with what this "
                       "process holds)"))
      << *short_of_free;
}

// Two processes that each fit in what is free do not fit together; the least free memory either read binds.
TEST(HostMemoryRefusal, ProcessesOnOneHostShareItsFreeMemory) {
  const ProcessMemoryRequest rank0{0, 3e9, 0.5e9, {ram(64e9), free_memory(5e9)}};
  const ProcessMemoryRequest rank1{1, 3e9, 0.5e9, {ram(64e9), free_memory(4.9e9)}};
  EXPECT_EQ(refusal({rank0}), std::nullopt);
  EXPECT_EQ(refusal({rank1}), std::nullopt);
  const auto refused = refusal({rank0, rank1});
  ASSERT_TRUE(refused);
  EXPECT_EQ(*refused,
            "the ranks need about 3 GB in each of the 2 processes of this run on this host (ranks 0, 1): 6 GB of this "
            "host's memory together (the sim device keeps its memory in host RAM) beside the 1 GB they hold already, "
            "and together they may use 5.9 GB (the memory this host has free (MemAvailable) with what they hold); use "
            "fewer");
  // Every process decides on the same requests, and so alike, whichever reads them.
  EXPECT_EQ(refusal({rank0, rank1}), refusal({rank0, rank1}));
}

// An rlimit is each process's own: processes that each keep under theirs are not added up against it.
TEST(HostMemoryRefusal, AnRlimitIsEachProcessOwn) {
  const std::vector<HostMemoryBound> bounds = {ram(100e9), address_space_limit(3e9)};
  EXPECT_EQ(refusal({{0, 2e9, 0.5e9, bounds}, {1, 2e9, 0.5e9, bounds}, {2, 2e9, 0.5e9, bounds}}), std::nullopt);
  // Rank 1's own lower limit refuses it, by its rank, for every process.
  const auto refused = refusal({{0, 2e9, 0.5e9, bounds}, {1, 2e9, 0.5e9, {ram(100e9), address_space_limit(2e9)}}});
  ASSERT_TRUE(refused);
  EXPECT_TRUE(contains(*refused, "rank 1: the ranks need about 2 GB of this host's memory")) << *refused;
  EXPECT_TRUE(contains(*refused,
                       "beside the 0.5 GB this process holds already, and it may use 2 GB (the process's "
                       "address-space limit (RLIMIT_AS))"))
      << *refused;
}

// A cgroup's limit binds the processes in that group: two groups' limits are not one.
TEST(HostMemoryRefusal, ACgroupLimitBindsTheProcessesOfThatGroup) {
  const ProcessMemoryRequest in_a{0, 3e9, 0.5e9, {ram(100e9), cgroup("/sys/fs/cgroup/a/memory.max", 4e9)}};
  const ProcessMemoryRequest in_b{1, 3e9, 0.5e9, {ram(100e9), cgroup("/sys/fs/cgroup/b/memory.max", 4e9)}};
  const ProcessMemoryRequest also_in_a{1, 3e9, 0.5e9, {ram(100e9), cgroup("/sys/fs/cgroup/a/memory.max", 4e9)}};
  EXPECT_EQ(refusal({in_a, in_b}), std::nullopt);
  const auto refused = refusal({in_a, also_in_a});
  ASSERT_TRUE(refused);
  EXPECT_TRUE(contains(*refused, "in each of the 2 processes of this run on this host (ranks 0, 1)")) << *refused;
  EXPECT_TRUE(contains(*refused, "together they may use 4 GB (cgroup v2 /sys/fs/cgroup/a/memory.max)")) << *refused;
}

// Of the bounds exceeded, the one exceeded most is named: here rank 1's rlimit (by 2 GB), not the host's RAM (by 1).
TEST(HostMemoryRefusal, TheBoundExceededMostIsNamed) {
  const ProcessMemoryRequest rank0{0, 4e9, 0, {ram(7e9)}};
  const ProcessMemoryRequest rank1{1, 4e9, 0, {ram(7e9), address_space_limit(2e9)}};
  const auto refused = refusal({rank0, rank1});
  ASSERT_TRUE(refused);
  EXPECT_TRUE(contains(*refused, "rank 1: ")) << *refused;
  EXPECT_TRUE(contains(*refused, "(RLIMIT_AS)")) << *refused;
  const ProcessMemoryRequest roomier1{1, 4e9, 0, {ram(7e9), address_space_limit(3.5e9)}};
  EXPECT_TRUE(contains(refusal({rank0, roomier1}).value_or(""), "together they may use 7 GB (this host's RAM)"));
}

TEST(HostMemoryLimitRlimit, AddressSpaceLimitBelowRamWins) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's shadow memory already holds terabytes of address space: RLIMIT_AS cannot be "
                  "lowered to 1.5 GB in this build (the default build runs this test)";
#endif
  // In a child: a 1.5 GB RLIMIT_AS must be the limit, named as such (exit code 0 when it is).
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const rlimit lowered{1'500'000'000, 1'500'000'000};
    if (::setrlimit(RLIMIT_AS, &lowered) != 0) ::_exit(2);
    const HostMemoryLimit limit = host_memory_limit();
    ::_exit(limit.bytes == 1.5e9 && contains(limit.source, "RLIMIT_AS") ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "RLIMIT_AS of 1.5 GB not taken for the limit (2: setrlimit failed)";
}

// What this process holds counts beside what a run will allocate: 64 MB touched shows in the resident set.
TEST(HostMemoryLimit, ResidentBytesGrowWithTouchedMemory) {
  const double before = resident_bytes();
  ASSERT_GT(before, 0);
  constexpr std::size_t kBytes = 64u << 20;
  std::vector<unsigned char> touched(kBytes, 1);
  const double after = resident_bytes();
  EXPECT_GE(after - before, 0.9 * kBytes) << "before " << before << ", after " << after;
  EXPECT_EQ(touched[kBytes - 1], 1);
}

TEST(HostMemoryLimitMessage, OutOfMemoryNamesWhereAndTheLimit) {
  const std::string message = out_of_memory_message("in rank 1");
  EXPECT_TRUE(contains(message, "out of host memory (std::bad_alloc) in rank 1; this process may use")) << message;
}

TEST(HostMemoryLimitMessage, RankOutOfMemoryIsNamedNotStdBadAlloc) {
  const std::string error = testing::error_of([] {
    run_world(2, [](int rank, LocalWorld&) {
      if (rank == 1) throw std::bad_alloc();
    });
  });
  EXPECT_TRUE(contains(error, "rank 1 failed: out of host memory (std::bad_alloc) in this rank's thread")) << error;
}

}  // namespace
}  // namespace fsdplab
