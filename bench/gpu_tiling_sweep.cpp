// GPU tiling sweep (scripts/gpu_tiling_sweep.sh): the CUDA prefill kernel generated with several
// GpuTiling overrides (kernel_contract.h's gpu_* generator parameters), each called directly on
// device buffers at the benchmark's prefill shapes: median milliseconds and GFLOP/s per variant,
// and each variant's output against the first (the default tiling, which the cuda: suites check):
// unwritten (NaN-poisoned) or differing elements fail the variant. Prints a markdown table.
#include <HalideBuffer.h>
#if SWEEP_OPENCL
#include <HalideRuntimeOpenCL.h>
#else
#include <HalideRuntimeCuda.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "sweep_variants.h"  // written by the script: kVariants {name, function, split_keys}

namespace {

using Buffer = Halide::Runtime::Buffer<float>;

struct Shape {
  int B, H, S, D;
};

double run_ms(const Variant& v, Buffer& q, Buffer& k, Buffer& vv, Buffer& out, Buffer& lse,
              float scale, int reps) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    const int code = v.function(nullptr, q, k, vv, scale, v.split_keys, out, lse);
    out.device_sync();
    if (code != 0) return -1;
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

// `small` (the script's OpenCL build, PoCL): one small shape and one repetition, to check the
// variants' outputs before a GPU is at hand.
int main(int argc, char** argv) {
#if SWEEP_OPENCL
  const halide_device_interface_t* device = halide_opencl_device_interface();
#else
  const halide_device_interface_t* device = halide_cuda_device_interface();
#endif
  const bool small = argc > 1 && std::string(argv[1]) == "small";
  std::vector<Shape> shapes = {{1, 16, 4096, 128}, {1, 8, 2048, 64}};
  if (small) shapes = {{1, 2, 200, 64}};
  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::printf("| shape | variant | ms | GFLOP/s | max |diff| vs default |\n|---|---|---:|---:|---:|\n");
  for (const Shape s : shapes) {
    // Halide's dimension order: (feature, position, head, batch).
    Buffer q(s.D, s.S, s.H, s.B), k(s.D, s.S, s.H, s.B), v(s.D, s.S, s.H, s.B);
    Buffer out(s.D, s.S, s.H, s.B), lse(s.S, s.H, s.B), reference(s.D, s.S, s.H, s.B);
    for (Buffer* b : {&q, &k, &v}) {
      b->for_each_value([&](float& x) { x = uniform(rng); });
      b->set_host_dirty();
      b->copy_to_device(device);
    }
    out.device_malloc(device);
    lse.device_malloc(device);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
    const double flops = 4.0 * s.B * s.H * double(s.S) * s.S * s.D;
    const std::string shape = std::to_string(s.B) + "x" + std::to_string(s.H) + "x" +
                              std::to_string(s.S) + "x" + std::to_string(s.S) + "x" +
                              std::to_string(s.D);
    for (size_t i = 0; i < std::size(kVariants); ++i) {
      const Variant& variant = kVariants[i];
      out.set_device_dirty(false);  // the last timing's results are not read
      out.fill(NAN);
      out.set_host_dirty();
      out.copy_to_device(device);
      if (variant.function(nullptr, q, k, v, scale, variant.split_keys, out, lse) != 0) {
        std::printf("| %s | %s | failed | | |\n", shape.c_str(), variant.name);
        continue;
      }
      out.copy_to_host();
      double diff = 0;
      if (i == 0) reference.copy_from(out);
      out.for_each_element([&](int c, int p, int h, int b) {
        const double d = std::abs(double(out(c, p, h, b)) - reference(c, p, h, b));
        diff = std::isnan(d) ? INFINITY : std::max(diff, d);
      });
      const double ms = run_ms(variant, q, k, v, out, lse, scale, small ? 1 : 7);
      std::printf("| %s | %s | %.3f | %.0f | %.2g%s |\n", shape.c_str(), variant.name, ms,
                  flops / (ms * 1e6), diff, diff > 1e-4 ? " WRONG" : "");
      std::fflush(stdout);
    }
  }
  return 0;
}
