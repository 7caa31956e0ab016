// flash_attention_blocks_an_sm.hpp — the blocks of each flash attention kernel one sm_90 SM (H100, H200) holds
// at once, as the table at the top of engine/cuda/flash_attention_kernels.cu says. The CPU-thread kernels check it
// by shared memory alone (an H100's SM, tests/kernel_emulation/cuda/cuda_runtime.h); tests/gpu on a GPU, with the
// kernels' registers counted.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "engine/cuda/flash_attention_kernels.hpp"
#include "engine/runtime/dtype.hpp"

namespace fsdplab {

inline void expect_the_flash_attention_blocks_an_sm_of_the_table() {
  struct Row {
    DType dtype;
    std::int64_t head_dim;
    int forward, key_pass, query_pass;
  };
  for (const Row& row : {Row{DType::bf16, 64, 4, 3, 3}, Row{DType::bf16, 128, 2, 2, 2}, Row{DType::f32, 64, 3, 2, 0}}) {
    SCOPED_TRACE(std::string(dtype_name(row.dtype)) + ", hd " + std::to_string(row.head_dim));
    const cuda::FlashAttentionBlocksAnSm got = cuda::flash_attention_blocks_an_sm(row.dtype, row.head_dim);
    EXPECT_EQ(got.forward, row.forward);
    EXPECT_EQ(got.key_pass, row.key_pass);
    EXPECT_EQ(got.query_pass, row.query_pass);
  }
}

}  // namespace fsdplab
