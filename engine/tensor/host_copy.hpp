// host_copy.hpp — the two ops that cross between pinned host memory and device memory (CPU offload):
// cudaMemcpyAsync on a stream, usually the memcpy stream. They last bytes / the device's host
// bandwidth (PCIe), and are the only ops that may touch both sides (launch.hpp refuses the rest).
#pragma once
#include "engine/runtime/device.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

// `host` (Lane::host memory) into `device_dst` (device memory): same dtype and element count.
void copy_to_device(Stream stream, const Tensor& host, const Tensor& device_dst);
// `device_src` (device memory) into `host` (Lane::host memory).
void copy_to_host(Stream stream, const Tensor& device_src, const Tensor& host);

}  // namespace fsdplab
