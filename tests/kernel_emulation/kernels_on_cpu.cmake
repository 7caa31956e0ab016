# kernels_on_cpu.cmake — rewrites a .cu file into C++ that runs on the CPU (cuda_threads_on_cpu.hpp):
#   cmake -DIN=kernels.cu -DOUT=kernels_on_cpu.inc -P kernels_on_cpu.cmake
# Three things are not C++: a kernel's `extern __shared__` array (of any element type) becomes a pointer to the
# running block's shared memory; `kernel<<<grid, block, bytes, stream>>>(args)` (or `kernel<T><<<...`) becomes
# cuda_on_cpu::launch([](auto... a) { kernel(a...); }, grid, block, bytes, stream, args): the lambda lets a
# kernel template deduce its arguments as the launch did; and the one inline PTX statement the kernels use, a read of
# the global nanosecond timer (`asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));`), becomes
# `t = cuda_on_cpu::global_timer_ns();`. Any other `asm` stops the rewrite. The rest compiles as it is, against the
# headers in cuda/.
file(READ ${IN} source)
string(REGEX MATCHALL "<<<" launches "${source}")
if(NOT launches)
  message(FATAL_ERROR "kernels_on_cpu: ${IN} has no <<<...>>> launch to rewrite")
endif()
string(REGEX REPLACE "extern __shared__ (__align__\\([0-9]+\\) )?([A-Za-z_][A-Za-z_0-9 ]*) ([A-Za-z_][A-Za-z_0-9]*)\\[\\];"
       "\\2* \\3 = reinterpret_cast<\\2*>(cuda_on_cpu::block_shared_memory());" source "${source}")
string(REGEX REPLACE "([A-Za-z_][A-Za-z_0-9]*(<[^<>;()]*>)?)<<<" "cuda_on_cpu::launch([](auto... a) { \\1(a...); }, "
       source "${source}")
string(REPLACE ">>>(" ", " source "${source}")
string(REGEX REPLACE "asm volatile\\(\"mov\\.u64 %0, %%globaltimer;\" : \"=l\"\\(([A-Za-z_][A-Za-z_0-9]*)\\)\\);"
       "\\1 = cuda_on_cpu::global_timer_ns();" source "${source}")
if(source MATCHES "extern __shared__|<<<|>>>|asm[ (]")
  message(FATAL_ERROR "kernels_on_cpu: ${IN} has a shared array, a launch or inline PTX this script cannot rewrite")
endif()
file(WRITE ${OUT}.tmp "// Generated from ${IN} by kernels_on_cpu.cmake; do not edit.\n${source}")
file(RENAME ${OUT}.tmp ${OUT})
