// How much memory the process may use (engine/runtime/host_memory_limit.hpp): the smallest of RAM, the free
// memory (from a fake /proc/meminfo), the rlimits and the cgroup limits (v2 and v1, the group's own or an ancestor's),
// read here from a fake /proc/self/cgroup and cgroup tree; and a lowered RLIMIT_AS, in a child process so the test
// runner keeps its own address space.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

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
