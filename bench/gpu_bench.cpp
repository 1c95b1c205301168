// GPU benchmark: scaled_dot_product_attention on CUDA device pointers (the zero-copy path) and on
// the OpenCL backend, as GFLOP/s and % of the fp32 (non-tensor-core) peak, with the naive CPU
// loop's answer checked once per shape (a wrong kernel must not report a speed). PyTorch's
// scaled_dot_product_attention, the peer on the same GPU, is measured by bench/torch_sdpa.py.
// Without a CUDA device the CUDA benchmarks are skipped with the reason.
//
// The "% of peak" counter divides by the GPU's fp32 peak computed from the device's properties
// (SMs × FP32 lanes per SM × 2 × boost clock), decode's "%bw" by its memory bandwidth (2 × memory
// clock × bus width); both are in the run's context. ATTENTION_GPU_PEAK_GFLOPS overrides the peak
// (without a device: 66900, an H100/H200 SXM: 132 SMs × 128 lanes × 2 × 1.98 GHz).
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#if ATTENTION_BENCH_GPU_MODS
#include <attention/mod_attention.h>

#include "mod_causal_prefill_cuda.h"
#include "mod_causal_ranges_cuda.h"
#include "mod_document_mask_prefill_cuda.h"
#include "mod_document_mask_ranges_cuda.h"
#endif

namespace {

struct Shape {
  int64_t B, H, Sq, Sk, D;
  int64_t Hkv = 0;  // kv heads (GQA); 0: H
  // Q·Kᵀ and P·V, 2 flops per FMA.
  double flops() const { return 4.0 * B * H * Sq * Sk * D; }
  int64_t kv_heads() const { return Hkv > 0 ? Hkv : H; }
};

// The device's name and limits, from the CUDA driver's attributes.
struct GpuLimits {
  std::string name = "none";
  double peak_gflops = 66900.0, bandwidth_gbs = 0.0;
};

// The CUDA driver, looked up at run time: device memory and synchronization (kernel launches
// return before the GPU finishes, so each timed call ends with cuCtxSynchronize).
struct Cuda {
  int (*alloc)(uint64_t*, size_t) = nullptr;
  int (*to_device)(uint64_t, const void*, size_t) = nullptr;
  int (*to_host)(void*, uint64_t, size_t) = nullptr;
  int (*synchronize)() = nullptr;
  bool ready = false;
  GpuLimits limits;

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
    auto get_name = reinterpret_cast<int (*)(char*, int, int)>(sym("cuDeviceGetName"));
    auto attribute = reinterpret_cast<int (*)(int*, int, int)>(sym("cuDeviceGetAttribute"));
    if (ready && get_name && attribute) {
      char text[256] = {};
      get_name(text, sizeof(text), device);
      limits.name = text;
      // CU_DEVICE_ATTRIBUTE_: MULTIPROCESSOR_COUNT 16, CLOCK_RATE 13 (kHz), MEMORY_CLOCK_RATE 36
      // (kHz), GLOBAL_MEMORY_BUS_WIDTH 37 (bits), COMPUTE_CAPABILITY_MAJOR 75, _MINOR 76.
      auto get = [&](int which) {
        int value = 0;
        attribute(&value, which, device);
        return static_cast<double>(value);
      };
      const double major = get(75), minor = get(76);
      // FP32 lanes per SM: 64 up to sm_80 (V100, A100), 128 from sm_86 (Ampere consumer, Ada,
      // Hopper, Blackwell).
      const double lanes = major < 8 || (major == 8 && minor == 0) ? 64 : 128;
      limits.peak_gflops = get(16) * lanes * 2 * get(13) * 1e-6;
      limits.bandwidth_gbs = 2 * get(36) * 1e3 * get(37) / 8 * 1e-9;
    }
  }

  // A device copy of `host` (elements of `dtype`, `bytes` in all), dense in `shape`.
  attention::TensorView upload(const void* host, size_t bytes, attention::DType dtype,
                               std::initializer_list<int64_t> shape) {
    uint64_t p = 0;
    if (alloc(&p, bytes) != 0 || to_device(p, host, bytes) != 0)
      bench::fail("gpu_bench", "cuMemAlloc/cuMemcpyHtoD failed");
    attention::TensorView t =
        attention::TensorView::contiguous(reinterpret_cast<void*>(p), dtype, shape);
    t.device = attention::Device::CUDA;
    return t;
  }
};

Cuda& cuda() {
  static Cuda instance;
  return instance;
}

double peak_gflops() {
  const char* env = std::getenv("ATTENTION_GPU_PEAK_GFLOPS");
  return env ? std::strtod(env, nullptr) : cuda().limits.peak_gflops;
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
  const int64_t kv = b * s.kv_heads() + h / (s.H / s.kv_heads());
  std::vector<double> scores(s.Sk);
  double top = -INFINITY;
  for (int64_t j = 0; j < s.Sk; ++j) {
    const float* kj = &k[(kv * s.Sk + j) * s.D];
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
    for (int64_t c = 0; c < s.D; ++c) row[c] += w * v[(kv * s.Sk + j) * s.D + c];
  }
  for (double& x : row) x /= sum;
  return row;
}

// `tolerance`: relative to max(1, |expected|); a half output's rounding needs more than fp32's.
void check_rows(const Shape& s, const std::vector<float>& q, const std::vector<float>& k,
                const std::vector<float>& v, const std::vector<float>& out,
                double tolerance = 2e-5) {
  for (int64_t i : {int64_t{0}, s.Sq / 2, s.Sq - 1}) {
    const int64_t b = s.B - 1, h = s.H / 2;
    const std::vector<double> expected = naive_row(s, q, k, v, b, h, i);
    for (int64_t c = 0; c < s.D; ++c) {
      const double got = out[((b * s.H + h) * s.Sq + i) * s.D + c];
      if (!(std::fabs(got - expected[c]) <= tolerance * std::max(1.0, std::fabs(expected[c]))))
        bench::fail("gpu_bench", "wrong result at row " + std::to_string(i) + ": " +
                                     std::to_string(got) + " vs " + std::to_string(expected[c]));
    }
  }
}

// `kv_bytes`: the size of k's and v's elements (decode's bytes are theirs).
void set_counters(benchmark::State& state, const Shape& s, size_t kv_bytes = sizeof(float)) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(s.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["%peak"] = benchmark::Counter(s.flops() * 1e-9 * 100.0 / peak_gflops(),
                                               benchmark::Counter::kIsIterationInvariantRate);
  const double bandwidth = cuda().limits.bandwidth_gbs;
  if (s.Sq == 1 && bandwidth > 0) {  // decode streams K and V once
    const double bytes = 2.0 * s.B * s.kv_heads() * s.Sk * s.D * kv_bytes;
    state.counters["GB/s"] =
        benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
    state.counters["%bw"] = benchmark::Counter(bytes * 1e-9 * 100.0 / bandwidth,
                                               benchmark::Counter::kIsIterationInvariantRate);
  }
}

// Element types of a CUDA benchmark: k and v (a half KV cache) and, with all_half, q and out too.
struct Types {
  attention::DType kv = attention::DType::Float32;
  bool all_half = false;
  // Key lengths (all Sk, a host tensor): the masked kernel, as paged decode runs.
  bool key_lengths = false;
};

// `values` stored as `dtype` (rounded on the host by the library's CPU conversion), and the
// rounded values as fp32 in place: what the kernel reads, for the check.
std::vector<uint16_t> stored_as(std::vector<float>& values, attention::DType dtype) {
  std::vector<uint16_t> bits(values.size());
  const auto n = static_cast<int64_t>(values.size());
  const attention::TensorView wide = attention::TensorView::contiguous(values.data(), {n}),
                              narrow = attention::TensorView::contiguous(bits.data(), dtype, {n});
  if (!attention::convert_dtype(wide, narrow) || !attention::convert_dtype(narrow, wide))
    bench::fail("gpu_bench", "convert_dtype failed");
  return bits;
}

void BM_CudaDevicePointers(benchmark::State& state, Shape s, Types types) {
  const attention::Status available = attention::backend_available(attention::Backend::CUDA);
  if (!available.ok()) return state.SkipWithError(available.message().c_str());
  Cuda& gpu = cuda();
  if (!gpu.ready) return state.SkipWithError("CUDA device memory could not be set up");
  std::vector<float> q = random_values(s.B * s.H * s.Sq * s.D, 1),
                     k = random_values(s.B * s.kv_heads() * s.Sk * s.D, 2),
                     v = random_values(s.B * s.kv_heads() * s.Sk * s.D, 3);
  std::vector<float> out(q.size());
  const bool half_kv = types.kv != attention::DType::Float32;
  const attention::DType q_type = types.all_half ? types.kv : attention::DType::Float32;
  std::vector<uint16_t> q16, k16, v16, out16(out.size());
  if (half_kv) {
    k16 = stored_as(k, types.kv);
    v16 = stored_as(v, types.kv);
  }
  if (types.all_half) q16 = stored_as(q, types.kv);
  // Device copies in the benchmark's types.
  auto upload = [&](const std::vector<float>& wide, const std::vector<uint16_t>& narrow,
                    attention::DType dtype, std::initializer_list<int64_t> shape) {
    return dtype == attention::DType::Float32
               ? gpu.upload(wide.data(), wide.size() * sizeof(float), dtype, shape)
               : gpu.upload(narrow.data(), narrow.size() * sizeof(uint16_t), dtype, shape);
  };
  const attention::TensorView dq = upload(q, q16, q_type, {s.B, s.H, s.Sq, s.D}),
                              dk = upload(k, k16, types.kv, {s.B, s.kv_heads(), s.Sk, s.D}),
                              dv = upload(v, v16, types.kv, {s.B, s.kv_heads(), s.Sk, s.D}),
                              dout = upload(out, out16, q_type, {s.B, s.H, s.Sq, s.D});
  std::vector<int32_t> lengths(s.B, static_cast<int32_t>(s.Sk));
  attention::SdpaOptions options;
  if (types.key_lengths) {
    options.mask.key_lengths =
        attention::TensorView::contiguous(lengths.data(), attention::DType::Int32, {s.B});
  }
  auto call = [&] {
    const attention::Status status =
        attention::scaled_dot_product_attention(dq, dk, dv, dout, options);
    if (!status.ok()) bench::fail("gpu_bench", status.message());
    gpu.synchronize();
  };
  call();  // first call: the driver JIT-compiles the PTX
  if (types.all_half) {
    gpu.to_host(out16.data(), reinterpret_cast<uint64_t>(dout.data), out16.size() * 2);
    const auto n = static_cast<int64_t>(out.size());
    if (!attention::convert_dtype(attention::TensorView::contiguous(out16.data(), q_type, {n}),
                                  attention::TensorView::contiguous(out.data(), {n})))
      bench::fail("gpu_bench", "convert_dtype failed");
  } else {
    gpu.to_host(out.data(), reinterpret_cast<uint64_t>(dout.data), out.size() * sizeof(float));
  }
  // A half output is rounded once: bfloat16's half ulp is 2^-9 of the value.
  check_rows(s, q, k, v, out, types.all_half ? 4e-3 : 2e-5);
  for (auto _ : state) call();
  set_counters(state, s, half_kv ? sizeof(uint16_t) : sizeof(float));
}

// paged_attention on CUDA device pools ([num_blocks, block, H, D], the sequences' blocks shuffled
// through the pool), fp32, the block table on the host: the paged row beside the contiguous one of
// the same shape (the cuda/ row) gives paging's cost. The answer is checked against the naive loop
// over the keys gathered back into [B, H, Sk, D].
void BM_CudaPaged(benchmark::State& state, Shape s, int64_t block) {
  const attention::Status available = attention::backend_available(attention::Backend::CUDA);
  if (!available.ok()) return state.SkipWithError(available.message().c_str());
  Cuda& gpu = cuda();
  if (!gpu.ready) return state.SkipWithError("CUDA device memory could not be set up");
  const int64_t per_seq = (s.Sk + block - 1) / block, blocks = s.B * per_seq;
  std::vector<int32_t> ids(blocks), seq_lens(s.B, static_cast<int32_t>(s.Sk));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(4));
  const size_t pool = static_cast<size_t>(blocks * block * s.H * s.D);
  const std::vector<float> q = random_values(s.B * s.H * s.Sq * s.D, 1),
                           k_pool = random_values(pool, 2), v_pool = random_values(pool, 3);
  // The contiguous k and v the pools hold, for the check.
  std::vector<float> k(s.B * s.H * s.Sk * s.D), v(k.size()), out(q.size());
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t j = 0; j < s.Sk; ++j)
      for (int64_t h = 0; h < s.H; ++h) {
        const size_t from = ((ids[b * per_seq + j / block] * block + j % block) * s.H + h) * s.D;
        const size_t to = ((b * s.H + h) * s.Sk + j) * s.D;
        std::copy_n(&k_pool[from], s.D, &k[to]);
        std::copy_n(&v_pool[from], s.D, &v[to]);
      }
  const attention::DType f32 = attention::DType::Float32;
  attention::PagedKvCache cache;
  cache.k = gpu.upload(k_pool.data(), pool * sizeof(float), f32, {blocks, block, s.H, s.D});
  cache.v = gpu.upload(v_pool.data(), pool * sizeof(float), f32, {blocks, block, s.H, s.D});
  cache.block_table =
      attention::TensorView::contiguous(ids.data(), attention::DType::Int32, {s.B, per_seq});
  cache.seq_lens =
      attention::TensorView::contiguous(seq_lens.data(), attention::DType::Int32, {s.B});
  const attention::TensorView dq = gpu.upload(q.data(), q.size() * sizeof(float), f32,
                                              {s.B, s.H, s.Sq, s.D}),
                              dout = gpu.upload(out.data(), out.size() * sizeof(float), f32,
                                                {s.B, s.H, s.Sq, s.D});
  auto call = [&] {
    const attention::Status status = attention::paged_attention(dq, cache, dout);
    if (!status.ok()) bench::fail("gpu_bench", status.message());
    gpu.synchronize();
  };
  call();
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

#if ATTENTION_BENCH_GPU_MODS
// User mods on CUDA device tensors (the example mods' CUDA kernels, tests/CMakeLists.txt) beside
// the call a user would make without them, as sdpa_bench's mods/ rows on the CPU: the document
// mask mod (8 documents of random lengths in 4096 tokens, its ids on the device; block skipping
// from its scan) against the equivalent Bool [1, 1, S, S] mask, and the causal mod against
// Causal::BottomRight (issue 22: within 10%). GFLOP/s counts the visible pairs (4·D each), so a
// pair's ratio is its time ratio. Each row checks its output against its peer's once.
enum class ModRow { kDocumentMod, kDenseBoolMask, kCausalMod, kCausalBuiltin };

void BM_CudaMods(benchmark::State& state, ModRow row) {
  const attention::Status available = attention::backend_available(attention::Backend::CUDA);
  if (!available.ok()) return state.SkipWithError(available.message().c_str());
  Cuda& gpu = cuda();
  if (!gpu.ready) return state.SkipWithError("CUDA device memory could not be set up");
  const bool documents = row == ModRow::kDocumentMod || row == ModRow::kDenseBoolMask;
  const int64_t S = documents ? 4096 : 2048, H = 8, D = 64;
  const size_t n = static_cast<size_t>(H * S * D);
  const attention::DType f32 = attention::DType::Float32;
  const std::vector<float> q = random_values(n, 1), k = random_values(n, 2),
                           v = random_values(n, 3);
  std::vector<float> out(n), peer_out(n);
  std::mt19937_64 rng(22);
  const bench::PackedDocuments docs =
      documents ? bench::packed_documents(S, 8, rng) : bench::PackedDocuments{};
  const double pairs = documents ? docs.pairs : 0.5 * double(S) * double(S + 1);
  const attention::TensorView dq = gpu.upload(q.data(), n * 4, f32, {1, H, S, D}),
                              dk = gpu.upload(k.data(), n * 4, f32, {1, H, S, D}),
                              dv = gpu.upload(v.data(), n * 4, f32, {1, H, S, D}),
                              dout = gpu.upload(out.data(), n * 4, f32, {1, H, S, D}),
                              dpeer = gpu.upload(peer_out.data(), n * 4, f32, {1, H, S, D});
  attention::TensorView dids, ddense;  // the document rows' ids and dense mask
  if (documents) {
    dids = gpu.upload(docs.ids.data(), docs.ids.size() * 4, attention::DType::Int32, {1, S});
    ddense = gpu.upload(docs.dense.data(), docs.dense.size(), attention::DType::Bool, {1, 1, S, S});
  }
  const auto call = [&](ModRow what, const attention::TensorView& to) {
    attention::SdpaOptions options;
    // A mod call runs whole: its split results (2 GiB at 8 heads × 4096²) exceed the default cap.
    options.gpu.workspace_limit = int64_t{4} << 30;
    switch (what) {
      case ModRow::kDocumentMod: {
        const attention::ModKernels kernels{"document_mask",
                                            ATTENTION_MOD_KERNEL(mod_document_mask_prefill_cuda),
                                            {},
                                            ATTENTION_MOD_KERNEL(mod_document_mask_ranges_cuda)};
        return attention::mod_attention(kernels, dq, dk, dv, to,
                                        {attention::ModArgument::of_tensor("document_ids", dids)},
                                        options);
      }
      case ModRow::kCausalMod: {
        const attention::ModKernels kernels{"causal",
                                            ATTENTION_MOD_KERNEL(mod_causal_prefill_cuda),
                                            {},
                                            ATTENTION_MOD_KERNEL(mod_causal_ranges_cuda)};
        return attention::mod_attention(kernels, dq, dk, dv, to, {}, options);
      }
      case ModRow::kDenseBoolMask:
        options.mask.bool_mask = ddense;
        break;
      case ModRow::kCausalBuiltin:
        options.mask.causal = attention::Causal::BottomRight;
        break;
    }
    return attention::scaled_dot_product_attention(dq, dk, dv, to, options);
  };
  const auto run = [&](ModRow what, const attention::TensorView& to) {
    const attention::Status status = call(what, to);
    if (!status.ok()) bench::fail("gpu_bench", status.message());
    gpu.synchronize();
  };
  // The peer of each row: the mod for a built-in row and the other way round.
  const ModRow peer = row == ModRow::kDocumentMod     ? ModRow::kDenseBoolMask
                      : row == ModRow::kDenseBoolMask ? ModRow::kDocumentMod
                      : row == ModRow::kCausalMod     ? ModRow::kCausalBuiltin
                                                      : ModRow::kCausalMod;
  run(row, dout);  // first call: the driver JIT-compiles the PTX
  run(peer, dpeer);
  gpu.to_host(out.data(), reinterpret_cast<uint64_t>(dout.data), n * 4);
  gpu.to_host(peer_out.data(), reinterpret_cast<uint64_t>(dpeer.data), n * 4);
  for (size_t i = 0; i < n; ++i) {
    if (!(std::fabs(out[i] - peer_out[i]) <= 1e-5f))
      bench::fail("gpu_bench", "a mod row and its built-in peer disagree at " + std::to_string(i));
  }
  for (auto _ : state) run(row, dout);
  const double flops = 4.0 * H * pairs * D;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
#endif

// The first is issue 23's prefill target shape (>= 50% of the fp32 peak), the last its decode.
const Shape kShapes[] = {{1, 16, 4096, 4096, 128},
                         {1, 8, 2048, 2048, 64},
                         {1, 16, 1024, 1024, 128},
                         {4, 12, 256, 256, 64},
                         {1, 32, 1, 4096, 128}};

std::string name(const char* backend, const Shape& s) {
  const std::string kv = s.Hkv > 0 ? "_Hkv" + std::to_string(s.Hkv) : "";
  return std::string(backend) + "/B" + std::to_string(s.B) + "_H" + std::to_string(s.H) + kv +
         "_Sq" + std::to_string(s.Sq) + "_Sk" + std::to_string(s.Sk) + "_D" + std::to_string(s.D);
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::initialize(&argc, argv)) return 1;
  const GpuLimits& limits = cuda().limits;
  benchmark::AddCustomContext("gpu", limits.name);
  benchmark::AddCustomContext("gpu_fp32_peak_gflops", std::to_string(peak_gflops()));
  benchmark::AddCustomContext("gpu_bandwidth_gbs", std::to_string(limits.bandwidth_gbs));
  for (const Shape& s : kShapes) {
    benchmark::RegisterBenchmark(name("cuda", s).c_str(), BM_CudaDevicePointers, s, Types{})
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  // GQA decode (issue 21): 32 query heads over 8 kv heads against 8 over 8, the same KV bytes.
  for (const Shape& s : {Shape{1, 32, 1, 4096, 128, 8}, Shape{1, 8, 1, 4096, 128, 8}}) {
    benchmark::RegisterBenchmark(name("cuda_gqa", s).c_str(), BM_CudaDevicePointers, s, Types{})
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  // Half precision: decode over an f16 / bf16 KV cache (fp32 q and out; the kernels that read the
  // cache as stored), and all-bf16 decode and prefill (q and out through the device conversions;
  // prefill's k and v widened into device scratch).
  const Shape& prefill = kShapes[0];
  const Shape& decode = kShapes[4];
  const struct {
    const char* backend;
    const Shape& shape;
    Types types;
  } half_runs[] = {{"cuda_f16kv", decode, {attention::DType::Float16, false}},
                   {"cuda_bf16kv", decode, {attention::DType::BFloat16, false}},
                   {"cuda_bf16", decode, {attention::DType::BFloat16, true}},
                   {"cuda_bf16", prefill, {attention::DType::BFloat16, true}}};
  for (const auto& run : half_runs) {
    benchmark::RegisterBenchmark(name(run.backend, run.shape).c_str(), BM_CudaDevicePointers,
                                 run.shape, run.types)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  // Paged decode (block sizes 16 and 64) at the decode shape, beside its contiguous cuda/ row and
  // the contiguous masked kernel with key lengths (what paging adds beyond the mask).
  benchmark::RegisterBenchmark(name("cuda_keylen", decode).c_str(), BM_CudaDevicePointers, decode,
                               Types{attention::DType::Float32, false, true})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  for (int64_t block : {16, 64}) {
    benchmark::RegisterBenchmark(
        (name("cuda_paged", decode) + "_block" + std::to_string(block)).c_str(), BM_CudaPaged,
        decode, block)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
#if ATTENTION_BENCH_GPU_MODS
  const struct {
    const char* name;
    ModRow row;
  } mod_rows[] = {{"cuda_mods/document_mask/1x8x4096x64_8docs", ModRow::kDocumentMod},
                  {"cuda_mods/dense_bool_mask/1x8x4096x64_8docs", ModRow::kDenseBoolMask},
                  {"cuda_mods/causal_mod/1x8x2048x64", ModRow::kCausalMod},
                  {"cuda_mods/causal_builtin/1x8x2048x64", ModRow::kCausalBuiltin}};
  for (const auto& m : mod_rows) {
    benchmark::RegisterBenchmark(m.name, BM_CudaMods, m.row)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
#endif
  // OpenCL on PoCL only at the small shape: it exists to show the path works end to end.
  benchmark::RegisterBenchmark(name("opencl", kShapes[3]).c_str(), BM_OpenClHostTensors, kShapes[3])
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
