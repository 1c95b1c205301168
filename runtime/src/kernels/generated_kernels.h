// The generated kernels are C++ functions in namespace attention::kernels (the names
// cmake/AttentionKernels.cmake gives Halide), so an application's own linear_f32 or mha_f32 links
// beside them. The runtime, all inside namespace attention, names them unqualified.
#pragma once

namespace attention::kernels {}

namespace attention {
using namespace kernels;  // NOLINT(google-build-using-namespace): the generated functions only
}  // namespace attention
