#include "engine/tensor/host_copy.hpp"

#include <cstring>

#include "engine/cuda/copies.hpp"
#include "engine/runtime/error.hpp"
#include "engine/tensor/launch.hpp"

namespace fsdplab {
namespace {

bool on_host(const Tensor& t) { return t.storage().stream() == Lane::host; }

void copy_across(Stream stream, const Tensor& src, const Tensor& dst, bool to_device) {
  const char* op = to_device ? "copy_to_device" : "copy_to_host";
  check(stream.device != nullptr && stream.lane != Lane::host, op, ": launched on the host lane; a copy runs on a "
        "device stream (the memcpy stream)");
  for (const Tensor* t : {&src, &dst}) {
    check(t->defined() && !t->is_meta(), op, ": an operand is undefined or a meta tensor");
    check(&t->device() == stream.device, op, ": operand ", t->describe(), " lives on rank ", t->device().rank(),
          " but the copy runs on rank ", stream.device->rank());
  }
  check(src.dtype() == dst.dtype() && src.numel() == dst.numel(), op, ": ", src.describe(), " into ", dst.describe(),
        "; expected the same dtype and element count");
  check(on_host(src) == to_device && on_host(dst) != to_device, op, ": ", src.describe(),
        to_device ? " must be in host memory and " : " must be in device memory and ", dst.describe(),
        to_device ? " in device memory" : " in host memory");
  OpSpec spec;
  spec.name = std::string(op) + " " + (to_device ? src.name() : dst.name());
  spec.category = OpCategory::memcpy;
  spec.duration = stream.device->cost_model().host_copy(src.nbytes());
  spec.bytes_moved = src.nbytes();
  if (src.numel() > 0) {
    spec.reads.push_back(src.access());
    spec.writes.push_back(dst.access());
  }
  stream.device->launch(stream.lane, std::move(spec),
                        {.host = [&] { std::memcpy(dst.raw(), src.raw(), static_cast<std::size_t>(src.nbytes())); },
                         .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* cuda_stream) {
                           cuda::copy_bytes(cuda_stream, dst.raw(), src.raw(), src.nbytes());
                         })});
}

}  // namespace

void copy_to_device(Stream stream, const Tensor& host, const Tensor& device_dst) {
  copy_across(stream, host, device_dst, true);
}

void copy_to_host(Stream stream, const Tensor& device_src, const Tensor& host) {
  copy_across(stream, device_src, host, false);
}

}  // namespace fsdplab
