// host_blas_kernel.hpp — fsdplab computes with the same OpenBLAS kernels on every x86-64 machine, so that the sim
// device's losses are the same digits everywhere, those the labs' READMEs give. See [Note: the same digits on every
// machine] in host_blas_kernel.cpp.
#pragma once
#include <string>

namespace fsdplab::app {

// The OpenBLAS kernels fsdplab asks for on this CPU: "Sandybridge" where it has AVX, "Prescott" on an x86-64 without,
// "" elsewhere (another architecture: OpenBLAS's own choice).
std::string lab_blas_kernel();

// Re-executes this program (/proc/self/exe, the same arguments) with OPENBLAS_CORETYPE set to lab_blas_kernel(),
// unless it is set already (by the user, or by this call before the exec) or there is none to ask for. Returns
// where it does not re-execute, saying on stderr when the exec failed. Call first in main, before any thread starts.
void run_on_the_lab_blas_kernel(char** argv);

// The kernels OpenBLAS runs in this process ("Sandybridge") and whether they are lab_blas_kernel()'s, in a line for
// `fsdplab devices`.
std::string host_blas_summary();

}  // namespace fsdplab::app
