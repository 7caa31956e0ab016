#include "engine/cuda/sm_partition.hpp"

#include <cuda.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/runtime/error.hpp"

namespace fsdplab::cuda {

// [Note: ranks sharing a GPU]
// With `--comm local` on cuda every rank is a thread driving the same GPU. The block scheduler hands SMs to
// whichever kernel is ready, so the ranks' kernels interleave: when rank 0 launches a GEMM whose grid fills
// the GPU, rank 1's next kernel starts only as rank 0's blocks drain. Measured on one H100 (gpt2 124M,
// 2 ranks x 4 x 1024 tokens, f32): rank 1's forward gelu, launched right after rank 0's LM-head GEMM,
// started 6.1 ms after its stream reached it, every step. The lab means the two ranks as two GPUs, so it
// splits the SMs: each rank's streams belong to a green context holding 1/N of them (rounded down to the
// granularity the GPU partitions in, or less where the chip's layout allows no more; the rest idle). Ranks of
// runs side by side (the dashboard's SYNC and ASYNC) each get their own share too (SmShare). A rank then
// computes at its share's speed, never at another rank's expense, and its op spans (CUDA events) hold its own
// kernels only, as CUPTI sees them. cuBLAS is told the share's SM count (op_sm_count in op_scratch.hpp), so it
// sizes its GEMMs for the SMs they will have, not for the whole GPU.
// `--sm-split off` goes back to sharing every SM; where the driver cannot split (older than CUDA 12.5, or
// refusing), the default `auto` shares every SM with a warning and `--sm-split on` fails (cuda_device.cpp).
//
// The driver's green-context calls are looked up through the runtime (cudaGetDriverEntryPointByVersion):
// linking libcuda would stop the binary from starting on a machine without a driver (engine/CMakeLists.txt).

namespace {

constexpr unsigned int kDriverApiVersion = 12050;  // cuGreenCtxStreamCreate's first version

struct DriverCalls {
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*get_dev_resource)(CUdevice, CUdevResource*, CUdevResourceType) = nullptr;
  CUresult (*split_by_count)(CUdevResource*, unsigned int*, const CUdevResource*, CUdevResource*, unsigned int,
                             unsigned int) = nullptr;
  CUresult (*generate_desc)(CUdevResourceDesc*, CUdevResource*, unsigned int) = nullptr;
  CUresult (*green_create)(CUgreenCtx*, CUdevResourceDesc, CUdevice, unsigned int) = nullptr;
  CUresult (*green_destroy)(CUgreenCtx) = nullptr;
  CUresult (*stream_create)(CUstream*, CUgreenCtx, unsigned int, int) = nullptr;
  CUresult (*error_name)(CUresult, const char**) = nullptr;
};

template <class Fn>
void look_up(Fn& fn, const char* symbol) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t status =
      cudaGetDriverEntryPointByVersion(symbol, &address, kDriverApiVersion, cudaEnableDefault, &found);
  check(status == cudaSuccess && found == cudaDriverEntryPointSuccess && address != nullptr,
        "--sm-split: the CUDA driver has no ", symbol, " (green contexts need a driver of CUDA 12.5 or later); ",
        "run with --sm-split off to share every SM");
  fn = reinterpret_cast<Fn>(address);
}

const DriverCalls& driver() {
  static const DriverCalls calls = [] {
    DriverCalls c;
    look_up(c.device_get, "cuDeviceGet");
    look_up(c.get_dev_resource, "cuDeviceGetDevResource");
    look_up(c.split_by_count, "cuDevSmResourceSplitByCount");
    look_up(c.generate_desc, "cuDevResourceGenerateDesc");
    look_up(c.green_create, "cuGreenCtxCreate");
    look_up(c.green_destroy, "cuGreenCtxDestroy");
    look_up(c.stream_create, "cuGreenCtxStreamCreate");
    look_up(c.error_name, "cuGetErrorName");
    return c;
  }();
  return calls;
}

const char* driver_error_name(CUresult status) {
  const char* name = nullptr;
  if (driver().error_name(status, &name) != CUDA_SUCCESS || !name) name = "an unknown driver error";
  return name;
}

template <class... Parts>
void check_driver(CUresult status, const Parts&... what) {
  if (status == CUDA_SUCCESS) return;
  fail(what..., ": CUDA driver error ", driver_error_name(status), "; run with --sm-split off to share every SM");
}

// One split of a GPU's SMs into `shares` groups, made once per process and shared by its ranks, so their
// groups are disjoint.
struct Split {
  CUdevice device = 0;
  std::vector<CUdevResource> groups;
};

const Split& split_of(int gpu, int shares, int rank) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, Split> splits;
  std::lock_guard lock(mutex);
  auto [it, made] = splits.try_emplace({gpu, shares});
  if (!made) return it->second;
  try {
    const DriverCalls& d = driver();
    Split& split = it->second;
    check_driver(d.device_get(&split.device, gpu), "rank ", rank, ": GPU ", gpu);
    CUdevResource all{};
    check_driver(d.get_dev_resource(split.device, &all, CU_DEV_RESOURCE_TYPE_SM), "rank ", rank, ": reading GPU ",
                 gpu, "'s SMs");
    // Each group's size: at most an equal share, rounded down to what the GPU partitions in (the split would
    // round it up). The driver may make fewer groups of a size than the SM count divided by it: its clusters
    // must fit in a chip's GPCs, and which SMs are disabled differs from chip to chip. So smaller sizes are
    // tried in turn, down to the GPU's minimum partition.
    const unsigned int align = std::max(all.sm.smCoscheduledAlignment, 1u);
    const unsigned int smallest = std::max(all.sm.minSmPartitionSize, 1u);
    const unsigned int largest = all.sm.smCount / static_cast<unsigned int>(shares) / align * align;
    check(largest >= smallest, "rank ", rank, ": GPU ", gpu, " has ", all.sm.smCount, " SMs, too few for ", shares,
          " shares of at least ", smallest, " (--sm-split off shares every SM)");
    std::string refused;
    for (unsigned int each = largest;; each -= align) {
      unsigned int count = static_cast<unsigned int>(shares);
      split.groups.assign(count, CUdevResource{});
      CUdevResource rest{};
      const CUresult status = d.split_by_count(split.groups.data(), &count, &all, &rest, 0, each);
      if (status == CUDA_SUCCESS && count == static_cast<unsigned int>(shares)) return split;
      refused = (status == CUDA_SUCCESS ? std::to_string(count) + " groups" : std::string(driver_error_name(status))) +
                " for groups of " + std::to_string(each);
      if (each < smallest + align) break;
    }
    fail("rank ", rank, ": GPU ", gpu, "'s ", all.sm.smCount, " SMs cannot be split into ", shares, " shares of ",
         smallest, " to ", largest, " SMs (the driver's last answer: ", refused, "); --sm-split off shares every SM");
  } catch (...) {
    splits.erase(it);  // the next rank tries again and reports the same reason
    throw;
  }
}

}  // namespace

struct SmPartition::Context {
  CUgreenCtx green = nullptr;
};

SmPartition::SmPartition(int gpu, int index, int shares, int rank)
    : context_(std::make_unique<Context>()), rank_(rank) {
  check(shares >= 1 && index >= 0 && index < shares, "rank ", rank, ": SM share ", index, " of ", shares,
        "; expected 0 <= index < shares");
  const Split& split = split_of(gpu, shares, rank);
  CUdevResource group = split.groups[static_cast<std::size_t>(index)];
  const DriverCalls& d = driver();
  CUdevResourceDesc desc = nullptr;
  check_driver(d.generate_desc(&desc, &group, 1), "rank ", rank, ": describing its SM share");
  check_driver(d.green_create(&context_->green, desc, split.device, CU_GREEN_CTX_DEFAULT_STREAM), "rank ", rank,
               ": creating a green context of ", group.sm.smCount, " SMs on GPU ", gpu);
  sm_count_ = static_cast<int>(group.sm.smCount);
}

SmPartition::~SmPartition() {
  if (context_->green) driver().green_destroy(context_->green);
}

cudaStream_t SmPartition::create_stream(int priority) const {
  CUstream stream = nullptr;
  check_driver(driver().stream_create(&stream, context_->green, CU_STREAM_NON_BLOCKING, priority), "rank ", rank_,
               ": creating a stream on its ", sm_count_, " SMs");
  return stream;
}

}  // namespace fsdplab::cuda
