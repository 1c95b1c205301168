// GPU tiling sweep (scripts/gpu_tiling_sweep.sh): the CUDA prefill kernel generated with several
// GpuTiling overrides (kernel_contract.h's gpu_* generator parameters), each called directly on
// device buffers at the benchmark's prefill shapes: median milliseconds and GFLOP/s per variant,
// and each variant's output against the first (the default tiling, which the cuda: suites check):
// unwritten (NaN-poisoned) or differing elements fail the variant. Prints a markdown table.
// SWEEP_DECODE (MODE=decode): the decode kernel at decode shapes, with its K+V stream in GB/s;
// with SWEEP_PAGED (MODE=paged) the paged decode kernel on block pools.
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
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "sweep_variants.h"  // written by the script: kVariants {name, function, split_keys}

namespace {

using Buffer = Halide::Runtime::Buffer<float>;

struct Shape {
  int B, H, Sq, Sk, D;
  int block = 0;  // paged: keys per pool block
};

// Times `call` (one kernel call on device buffers, its result synchronized into `out`).
template <typename Call>
double run_ms(const Call& call, Buffer& out, int reps) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    const int code = call();
    out.device_sync();
    if (code != 0) return -1;
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// A buffer whose dimensions repeat one element (stride 0) copied to the device as the bytes it
// spans: Halide's own copy would move it one element per transfer.
template <typename T>
void broadcast_to_device(Halide::Runtime::Buffer<T>& b, const halide_device_interface_t* device) {
  b.device_malloc(device);
  halide_dimension_t bytes(0, static_cast<int32_t>(b.size_in_bytes()), 1);
  halide_buffer_t span{};
  span.device = b.raw_buffer()->device;
  span.device_interface = b.raw_buffer()->device_interface;
  span.host = reinterpret_cast<uint8_t*>(b.data());
  span.type = halide_type_t(halide_type_uint, 8);
  span.dimensions = 1;
  span.dim = &bytes;
  span.set_host_dirty(true);
  halide_copy_to_device(nullptr, &span, device);
  b.set_host_dirty(false);
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
#if SWEEP_PAGED
  // gpu_bench's paged rows (blocks of 16 and 64 keys) and a batch of them.
  std::vector<Shape> shapes = {
      {1, 32, 1, 4096, 128, 16}, {1, 32, 1, 4096, 128, 64}, {8, 32, 1, 4096, 128, 16}};
  if (small) shapes = {{1, 2, 1, 300, 64, 16}, {2, 2, 2, 300, 64, 64}};
#elif SWEEP_DECODE
  // gpu_bench's decode row, a batch of them, and a longer cache; two rows (Sq = 2: GQA's rows).
  std::vector<Shape> shapes = {
      {1, 32, 1, 4096, 128}, {8, 32, 1, 4096, 128}, {1, 32, 1, 16384, 128}, {1, 8, 2, 4096, 128}};
  if (small) shapes = {{1, 2, 1, 300, 64}, {1, 2, 2, 300, 64}};
#else
  std::vector<Shape> shapes = {{1, 16, 4096, 4096, 128}, {1, 8, 2048, 2048, 64}};
  if (small) shapes = {{1, 2, 200, 200, 64}};
#endif
  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::printf(
      "| shape | variant | ms | GFLOP/s | GB/s (K+V) | max |diff| vs default |\n"
      "|---|---|---:|---:|---:|---:|\n");
  for (const Shape s : shapes) {
    // Halide's dimension order: (feature, position, head, batch).
    Buffer q(s.D, s.Sq, s.H, s.B), k(s.D, s.Sk, s.H, s.B), v(s.D, s.Sk, s.H, s.B);
    Buffer out(s.D, s.Sq, s.H, s.B), lse(s.Sq, s.H, s.B), reference(s.D, s.Sq, s.H, s.B);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
#if SWEEP_PAGED
    // Pools (d, head, slot, block) of the sequences' blocks, shuffled; every mask argument neutral
    // but the cache lengths (what paged_attention passes without a mask).
    const int per_seq = (s.Sk + s.block - 1) / s.block, blocks = s.B * per_seq;
    k = Buffer(s.D, s.H, s.block, blocks);
    v = Buffer(s.D, s.H, s.block, blocks);
    std::vector<int> ids(blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    Halide::Runtime::Buffer<int32_t> table(per_seq, s.B), key_lengths(s.B), query_lengths(s.B);
    table.for_each_element(
        [&](int column, int b) { table(column, b) = ids[b * per_seq + column]; });
    key_lengths.fill(s.Sk);
    query_lengths.fill(s.Sq);
    Buffer slopes(s.H);
    slopes.fill(0.0f);
    uint8_t allowed = 1;  // the kernels take Bool masks as bytes
    float no_bias = 0.0f;
    const halide_dimension_t repeated[] = {{0, s.Sk, 0}, {0, s.Sq, 0}, {0, s.H, 0}, {0, s.B, 0}};
    Halide::Runtime::Buffer<uint8_t> bool_mask(&allowed, 4, repeated);
    Buffer additive_mask(&no_bias, 4, repeated);
    for (auto* b : {&table, &key_lengths, &query_lengths}) {
      b->set_host_dirty();
      b->copy_to_device(device);
    }
    slopes.set_host_dirty();
    slopes.copy_to_device(device);
    broadcast_to_device(bool_mask, device);
    broadcast_to_device(additive_mask, device);
    const int band = s.Sq + s.Sk, shift = __builtin_ctz(s.block);
    const auto call = [&](const Variant& variant) {
      return variant.function(nullptr, q, k, v, scale, key_lengths, query_lengths, 0, band, band,
                              false, bool_mask, additive_mask, slopes, 0.0f, false, table, shift,
                              variant.split_keys, out, lse);
    };
#else
    const auto call = [&](const Variant& variant) {
      return variant.function(nullptr, q, k, v, scale, variant.split_keys, out, lse);
    };
#endif
    for (Buffer* b : {&q, &k, &v}) {
      b->for_each_value([&](float& x) { x = uniform(rng); });
      b->set_host_dirty();
      b->copy_to_device(device);
    }
    out.device_malloc(device);
    lse.device_malloc(device);
    const double flops = 4.0 * s.B * s.H * double(s.Sq) * s.Sk * s.D;
    const double kv_bytes = 2.0 * s.B * s.H * double(s.Sk) * s.D * sizeof(float);
    std::string shape = std::to_string(s.B) + "x" + std::to_string(s.H) + "x" +
                        std::to_string(s.Sq) + "x" + std::to_string(s.Sk) + "x" +
                        std::to_string(s.D);
    if (s.block > 0) shape += " block " + std::to_string(s.block);
    for (size_t i = 0; i < std::size(kVariants); ++i) {
      const Variant& variant = kVariants[i];
      out.set_device_dirty(false);  // the last timing's results are not read
      out.fill(NAN);
      out.set_host_dirty();
      out.copy_to_device(device);
      if (call(variant) != 0) {
        std::printf("| %s | %s | failed | | | |\n", shape.c_str(), variant.name);
        continue;
      }
      out.copy_to_host();
      double diff = 0;
      if (i == 0) reference.copy_from(out);
      out.for_each_element([&](int c, int p, int h, int b) {
        const double d = std::abs(double(out(c, p, h, b)) - reference(c, p, h, b));
        diff = std::isnan(d) ? INFINITY : std::max(diff, d);
      });
      const double ms = run_ms([&] { return call(variant); }, out, small ? 1 : 7);
      std::printf("| %s | %s | %.3f | %.0f | %.0f | %.2g%s |\n", shape.c_str(), variant.name, ms,
                  flops / (ms * 1e6), kv_bytes / (ms * 1e6), diff, diff > 1e-4 ? " WRONG" : "");
      std::fflush(stdout);
    }
  }
  return 0;
}
