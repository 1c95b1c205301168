// GPU benchmark: scaled_dot_product_attention on CUDA device pointers (the zero-copy path) and on
// the OpenCL backend, as GFLOP/s and % of the fp32 (non-tensor-core) peak, with the naive CPU
// loop's answer checked once per shape (a wrong kernel must not report a speed). PyTorch's
// scaled_dot_product_attention, the peer on the same GPU, is measured by bench/torch_sdpa.py.
// Without a CUDA device the CUDA benchmarks are skipped with the reason.
//
// ATTENTION_GPU_PEAK_GFLOPS: the GPU's fp32 peak for the "% of peak" counter (default 66900, an
// H100/H200 SXM: 132 SMs × 128 FP32 lanes × 2 × 1.98 GHz).
#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"

namespace {

struct Shape {
  int64_t B, H, Sq, Sk, D;
  double flops() const { return 4.0 * B * H * Sq * Sk * D; }  // Q·Kᵀ and P·V, 2 flops per FMA
};

double peak_gflops() {
  const char* env = std::getenv("ATTENTION_GPU_PEAK_GFLOPS");
  return env ? std::strtod(env, nullptr) : 66900.0;
}

// The CUDA driver, looked up at run time: device memory and synchronization (kernel launches
// return before the GPU finishes, so each timed call ends with cuCtxSynchronize).
struct Cuda {
  int (*alloc)(uint64_t*, size_t) = nullptr;
  int (*to_device)(uint64_t, const void*, size_t) = nullptr;
  int (*to_host)(void*, uint64_t, size_t) = nullptr;
  int (*synchronize)() = nullptr;
  bool ready = false;

  Cuda() {
    void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!driver) return;
    auto sym = [&](const char* name) { return dlsym(driver, name); };
    auto init = reinterpret_cast<int (*)(unsigned)>(sym("cuInit"));
    auto device_get = reinterpret_cast<int (*)(int*, int)>(sym("cuDeviceGet"));
    auto retain = reinterpret_cast<int (*)(void**, int)>(sym("cuDevicePrimaryCtxRetain"));
    auto set_current = reinterpret_cast<int (*)(void*)>(sym("cuCtxSetCurrent"));
    alloc = reinterpret_cast<decltype(alloc)>(sym("cuMemAlloc_v2"));
    to_device = reinterpret_cast<decltype(to_device)>(sym("cuMemcpyHtoD_v2"));
    to_host = reinterpret_cast<decltype(to_host)>(sym("cuMemcpyDtoH_v2"));
    synchronize = reinterpret_cast<decltype(synchronize)>(sym("cuCtxSynchronize"));
    int device = 0;
    void* context = nullptr;
    ready = init && device_get && retain && set_current && alloc && to_device && to_host &&
            synchronize && init(0) == 0 && device_get(&device, 0) == 0 &&
            retain(&context, device) == 0 && set_current(context) == 0;
  }

  attention::TensorView upload(const std::vector<float>& host,
                               std::initializer_list<int64_t> shape) {
    uint64_t p = 0;
    if (alloc(&p, host.size() * sizeof(float)) != 0 ||
        to_device(p, host.data(), host.size() * sizeof(float)) != 0)
      bench::fail("gpu_bench", "cuMemAlloc/cuMemcpyHtoD failed");
    attention::TensorView t = attention::TensorView::contiguous(reinterpret_cast<float*>(p), shape);
    t.device = attention::Device::CUDA;
    return t;
  }
};

Cuda& cuda() {
  static Cuda instance;
  return instance;
}

std::vector<float> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> values(n);
  for (float& x : values) x = u(rng);
  return values;
}

// The naive loop (double accumulation) for row (b, h, i): the reference one output row is checked
// against. Checking a handful of rows keeps the setup short at the large shapes.
std::vector<double> naive_row(const Shape& s, const std::vector<float>& q,
                              const std::vector<float>& k, const std::vector<float>& v, int64_t b,
                              int64_t h, int64_t i) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  const float* qi = &q[((b * s.H + h) * s.Sq + i) * s.D];
  std::vector<double> scores(s.Sk);
  double top = -INFINITY;
  for (int64_t j = 0; j < s.Sk; ++j) {
    const float* kj = &k[((b * s.H + h) * s.Sk + j) * s.D];
    double dot = 0;
    for (int64_t d = 0; d < s.D; ++d) dot += double(qi[d]) * kj[d];
    scores[j] = dot * scale;
    top = std::max(top, scores[j]);
  }
  std::vector<double> row(s.D, 0.0);
  double sum = 0;
  for (int64_t j = 0; j < s.Sk; ++j) {
    const double w = std::exp(scores[j] - top);
    sum += w;
    for (int64_t c = 0; c < s.D; ++c) row[c] += w * v[((b * s.H + h) * s.Sk + j) * s.D + c];
  }
  for (double& x : row) x /= sum;
  return row;
}

void check_rows(const Shape& s, const std::vector<float>& q, const std::vector<float>& k,
                const std::vector<float>& v, const std::vector<float>& out) {
  for (int64_t i : {int64_t{0}, s.Sq / 2, s.Sq - 1}) {
    const int64_t b = s.B - 1, h = s.H / 2;
    const std::vector<double> expected = naive_row(s, q, k, v, b, h, i);
    for (int64_t c = 0; c < s.D; ++c) {
      const double got = out[((b * s.H + h) * s.Sq + i) * s.D + c];
      if (!(std::fabs(got - expected[c]) <= 2e-5 * std::max(1.0, std::fabs(expected[c]))))
        bench::fail("gpu_bench", "wrong result at row " + std::to_string(i) + ": " +
                                     std::to_string(got) + " vs " + std::to_string(expected[c]));
    }
  }
}

void set_counters(benchmark::State& state, const Shape& s) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(s.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["%peak"] = benchmark::Counter(s.flops() * 1e-9 * 100.0 / peak_gflops(),
                                               benchmark::Counter::kIsIterationInvariantRate);
}

void BM_CudaDevicePointers(benchmark::State& state, Shape s) {
  const attention::Status available = attention::backend_available(attention::Backend::CUDA);
  if (!available.ok()) return state.SkipWithError(available.message().c_str());
  Cuda& gpu = cuda();
  if (!gpu.ready) return state.SkipWithError("CUDA device memory could not be set up");
  const std::vector<float> q = random_values(s.B * s.H * s.Sq * s.D, 1),
                           k = random_values(s.B * s.H * s.Sk * s.D, 2),
                           v = random_values(s.B * s.H * s.Sk * s.D, 3);
  std::vector<float> out(q.size());
  const attention::TensorView dq = gpu.upload(q, {s.B, s.H, s.Sq, s.D}),
                              dk = gpu.upload(k, {s.B, s.H, s.Sk, s.D}),
                              dv = gpu.upload(v, {s.B, s.H, s.Sk, s.D}),
                              dout = gpu.upload(out, {s.B, s.H, s.Sq, s.D});
  auto call = [&] {
    const attention::Status status = attention::scaled_dot_product_attention(dq, dk, dv, dout);
    if (!status.ok()) bench::fail("gpu_bench", status.message());
    gpu.synchronize();
  };
  call();  // first call: the driver JIT-compiles the PTX
  gpu.to_host(out.data(), reinterpret_cast<uint64_t>(dout.data), out.size() * sizeof(float));
  check_rows(s, q, k, v, out);
  for (auto _ : state) call();
  set_counters(state, s);
}

// Host tensors on the OpenCL backend (copies in and out included): PoCL here, any OpenCL GPU
// elsewhere. On PoCL it measures correctness plumbing more than speed.
void BM_OpenClHostTensors(benchmark::State& state, Shape s) {
  const attention::Status available = attention::backend_available(attention::Backend::OpenCL);
  if (!available.ok()) return state.SkipWithError(available.message().c_str());
  const std::vector<float> q = random_values(s.B * s.H * s.Sq * s.D, 1),
                           k = random_values(s.B * s.H * s.Sk * s.D, 2),
                           v = random_values(s.B * s.H * s.Sk * s.D, 3);
  std::vector<float> out(q.size());
  attention::SdpaOptions options;
  options.backend = attention::Backend::OpenCL;
  auto view = [](const std::vector<float>& data, std::initializer_list<int64_t> shape) {
    return attention::TensorView::contiguous(const_cast<float*>(data.data()), shape);
  };
  auto call = [&] {
    const attention::Status status = attention::scaled_dot_product_attention(
        view(q, {s.B, s.H, s.Sq, s.D}), view(k, {s.B, s.H, s.Sk, s.D}),
        view(v, {s.B, s.H, s.Sk, s.D}), view(out, {s.B, s.H, s.Sq, s.D}), options);
    if (!status.ok()) bench::fail("gpu_bench", status.message());
  };
  call();
  check_rows(s, q, k, v, out);
  for (auto _ : state) call();
  set_counters(state, s);
}

const Shape kShapes[] = {
    {1, 8, 2048, 2048, 64}, {1, 16, 1024, 1024, 128}, {4, 12, 256, 256, 64}, {1, 32, 1, 4096, 128}};

std::string name(const char* backend, const Shape& s) {
  return std::string(backend) + "/B" + std::to_string(s.B) + "_H" + std::to_string(s.H) + "_Sq" +
         std::to_string(s.Sq) + "_Sk" + std::to_string(s.Sk) + "_D" + std::to_string(s.D);
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::initialize(&argc, argv)) return 1;
  for (const Shape& s : kShapes) {
    benchmark::RegisterBenchmark(name("cuda", s).c_str(), BM_CudaDevicePointers, s)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  // OpenCL on PoCL only at the small shape: it exists to show the path works end to end.
  benchmark::RegisterBenchmark(name("opencl", kShapes[2]).c_str(), BM_OpenClHostTensors, kShapes[2])
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
