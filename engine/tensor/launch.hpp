// launch.hpp — how a tensor op reaches its device: the one place that turns tensors into the byte
// ranges an op reads and writes, and checks they all live on the stream's device.
//
// An op front-end checks shapes and dtypes, states its cost, and calls launch_op with its bodies
// (op.hpp): the host loop, and the CUDA kernel launch written inside FSDPLAB_CUDA_BODY, which a build
// without nvcc compiles to nothing. On the sim device the host body runs at once (and not at all on a dry
// run); the race detector sees exactly the ranges declared here, so an op must list every tensor it touches.
//
//   launch_op(s, "gelu", cost, {{&x}, {&out}},
//             {.host = [&] { cpu::gelu(...); },
//              .cuda = FSDPLAB_CUDA_BODY([&](CUstream_st* stream) { cuda::gelu(stream, ...); })});
#pragma once
#include <string>
#include <vector>

#include "engine/runtime/device.hpp"
#include "engine/tensor/tensor.hpp"

namespace fsdplab {

struct OpTensors {
  std::vector<const Tensor*> reads;
  std::vector<const Tensor*> writes;
};

OpId launch_op(Stream stream, std::string name, const OpCost& cost, OpTensors tensors, const OpBody& body);

#if FSDPLAB_HAVE_CUDA
#define FSDPLAB_CUDA_BODY(...) __VA_ARGS__
#else
#define FSDPLAB_CUDA_BODY(...) nullptr
#endif

}  // namespace fsdplab
