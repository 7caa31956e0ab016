// host_blas_kernel.cpp — OpenBLAS's kernels chosen by name (host_blas_kernel.hpp).
//
// [Note: the same digits on every machine]
// The sim device computes on the host, its matrix products in OpenBLAS (engine/tensor/matmul.cpp, one thread per
// call). OpenBLAS picks its kernels when it is loaded, for the CPU it finds: on one with FMA (Intel Haswell and
// later, AMD Zen) a product and its sum are rounded once, on one without twice, and the kernels block the inner
// dimension differently. So the same training printed 4.18290281 as its fifth loss on one machine and 4.18290234 on
// another, and a lab README's "what right looks like", which a student compares digit for digit, held on some
// machines only. OpenBLAS takes a kernel by name (OPENBLAS_CORETYPE) only before it loads, and it loads with the
// program, so main() sets the name and re-executes fsdplab once, before anything else (the price: one more start
// of the program, about 70 ms). Sandybridge's kernels (AVX, no FMA) run on every x86-64 CPU since 2011 and give the
// READMEs' digits; an x86-64 without AVX gets Prescott's (SSE3), whose digits may differ. A name the user set is
// kept. What it costs: `fsdplab bench --what ops` measured 90-92 GFLOP/s for f32 GEMMs of 512^3 and 1024^3 against
// 98-100 with the kernels OpenBLAS picked for this AVX-512 CPU (Cooperlake), and half at 256^3. The test binaries,
// which compare runs with each other and not with printed digits, keep the machine's own choice.
#include "app/host_blas_kernel.hpp"

#include <cblas.h>
#include <strings.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace fsdplab::app {
namespace {
constexpr const char* kCoreType = "OPENBLAS_CORETYPE";
}  // namespace

std::string lab_blas_kernel() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx") ? "Sandybridge" : "Prescott";
#else
  return "";
#endif
}

void run_on_the_lab_blas_kernel(char** argv) {
  const std::string kernel = lab_blas_kernel();
  if (kernel.empty() || std::getenv(kCoreType) != nullptr) return;
  ::setenv(kCoreType, kernel.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  std::cerr << "fsdplab: cannot start again with OpenBLAS's " << kernel
            << " kernels (execv /proc/self/exe: " << std::strerror(errno)
            << "); the losses may differ from the labs' READMEs in their last digits\n";
}

std::string host_blas_summary() {
  const std::string running = openblas_get_corename();
  const std::string asked = lab_blas_kernel();
  std::string summary = "host GEMMs in OpenBLAS, " + running + " kernels";
  if (asked.empty()) return summary + " (OpenBLAS's choice for this CPU)";
  const char* set = std::getenv(kCoreType);
  if (strcasecmp(running.c_str(), asked.c_str()) == 0)
    return summary + " (the lab's: the same losses on every machine)";
  return summary + " (" + kCoreType + "=" + (set ? set : "") + "; the lab's are " + asked +
         ": losses may differ from the READMEs' in their last digits)";
}

}  // namespace fsdplab::app
