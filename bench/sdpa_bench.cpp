// Benchmarks attention::scaled_dot_product_attention (fp32, CPU) against, in the same run:
//   - the "math path" a framework takes on CPU: per (batch, head) sgemm S = scale·Q·Kᵀ, row
//   softmax,
//     sgemm O = P·V, with OpenBLAS;
//   - naive loops (small shapes and decode only);
//   - a square sgemm probe: the machine's practical peak, so every GFLOP/s reads as a % of it.
//   - a copy probe: the memory bandwidth a large memcpy reaches, the ceiling of decode.
// Every implementation's output is checked once against the math path before it is timed.
// Decode shapes rotate through several copies of K and V, 256 MiB or more in all, so no iteration
// finds its cache in L3.
// Threads: ATTENTION_BENCH_THREADS, else all hardware threads, for our library and OpenBLAS alike.
// bench/table.py turns the JSON output into a markdown table (scripts/bench.sh does both).
#include <attention/attention.h>
#include <benchmark/benchmark.h>
#include <cblas.h>  // OpenBLAS's own (see bench/CMakeLists.txt): declares openblas_set_num_threads
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"

namespace {

// The masks of the masked-attention benchmarks. Ours gets them as MaskOptions (fused); the math
// path as an explicit additive mask tensor added to the scores, as a framework would.
enum class Mask {
  kNone,
  kCausal,     // top-left causal
  kPadded,     // per-batch lengths (random in [S/4, S], same for keys and queries)
  kWindow256,  // causal sliding window of 256 keys back
};

// Row-major [B, H, S, D] operands; k and v have Hkv heads and the value dim equals D.
struct Shape {
  int64_t b, h, hkv, sq, sk, d;
  Mask mask = Mask::kNone;
};

struct Case {
  Shape shape;
  bool with_naive;  // naive loops take minutes on the big prefill shapes
};

const Case kCases[] = {
    // (1, 8, S, S, 64) for S = 256 .. 8192: the sequence-length sweep of the plot.
    {{1, 8, 8, 256, 256, 64}, true},
    {{1, 8, 8, 512, 512, 64}, true},
    {{1, 8, 8, 1024, 1024, 64}, false},
    {{1, 8, 8, 2048, 2048, 64}, false},
    {{4, 12, 12, 256, 256, 64}, true},
    {{1, 16, 16, 1024, 1024, 128}, false},
    {{1, 8, 8, 8192, 8192, 64}, false},  // long: a tile's scores outgrow L2
    {{1, 32, 32, 1, 4096, 128}, true},   // decode: one query against a 4096-entry KV cache
    {{8, 32, 32, 1, 2048, 128}, false},
    {{1, 1, 1, 1, 65536, 128}, false},  // one head: only split-KV fills the cores
    // Masked: the unmasked twins above (and the window's at 4096) time what masking saves.
    {{1, 8, 8, 2048, 2048, 64, Mask::kCausal}, false},
    {{8, 8, 8, 512, 512, 64}, false},
    {{8, 8, 8, 512, 512, 64, Mask::kPadded}, false},
    {{1, 8, 8, 4096, 4096, 64}, false},
    {{1, 8, 8, 4096, 4096, 64, Mask::kWindow256}, false},
};

constexpr int64_t kWindow = 256;

const int kSgemmSizes[] = {1024, 2048};

// Bytes each memcpy of the copy probe moves, and the least K+V a decode shape rotates through.
constexpr int64_t kCopyProbeBytes = int64_t(256) << 20;
constexpr double kDecodeRotationBytes = double(int64_t(256) << 20);

constexpr float kMaxAbsDiff = 1e-4f;
constexpr unsigned kSeed = 20240611;

[[noreturn]] void fail(const std::string& message) { bench::fail("sdpa_bench", message); }

int bench_threads() { return bench::threads(); }

std::string shape_name(const Shape& s) {
  std::string name = std::to_string(s.b) + "x" + std::to_string(s.h) + "x" + std::to_string(s.sq) +
                     "x" + std::to_string(s.sk) + "x" + std::to_string(s.d);
  if (s.hkv != s.h) name += "_kv" + std::to_string(s.hkv);
  switch (s.mask) {
    case Mask::kNone:
      return name;
    case Mask::kCausal:
      return name + "_causal";
    case Mask::kPadded:
      return name + "_padded";
    case Mask::kWindow256:
      return name + "_window" + std::to_string(kWindow);
  }
  return name;
}

int64_t q_size(const Shape& s) { return s.b * s.h * s.sq * s.d; }
int64_t kv_size(const Shape& s) { return s.b * s.hkv * s.sk * s.d; }
double attention_flops(const Shape& s) { return 4.0 * s.b * s.h * s.sq * s.sk * s.d; }
double kv_bytes(const Shape& s) { return 2.0 * kv_size(s) * sizeof(float); }
// Copies of K and V a shape's benchmark cycles through: decode reads each KV cache once per call.
int kv_copies(const Shape& s) {
  return s.sq == 1 ? std::max(2, static_cast<int>(std::ceil(kDecodeRotationBytes / kv_bytes(s))))
                   : 1;
}

// The KV copy each call of a timed loop reads: 0, 1, ..., kv_copies - 1, 0, ...
class KvRotation {
 public:
  explicit KvRotation(const Shape& s) : copies_(kv_copies(s)) {}
  int next() {
    const int copy = copy_;
    copy_ = (copy_ + 1) % copies_;
    return copy;
  }

 private:
  int copies_;
  int copy_ = 0;
};

std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> data(n);
  for (float& x : data) x = dist(rng);
  return data;
}

// Inputs of one shape, shared by every implementation so each can be checked against the same
// reference; made once (fixed seed) and kept for the whole run, outside every timed loop.
struct Problem {
  Shape shape;
  std::vector<float> q;
  std::vector<float> k, v;       // kv_copies(shape) identical copies, one after the other
  std::vector<float> reference;  // the OpenBLAS math path's output, computed on first use
  std::vector<int32_t> lengths;  // kPadded: valid keys and queries per batch
  // The explicit mask of the math path: 0 or -inf per (query, key), one [Sq, Sk] plane per batch
  // (a single shared plane unless the mask depends on the batch). Empty without a mask.
  std::vector<float> additive;
  int64_t mask_planes = 0;
  double visible_pairs = 0;  // (query, key) pairs the mask lets through, summed over batches
};

bool visible(const Problem& p, int64_t b, int64_t i, int64_t j) {
  switch (p.shape.mask) {
    case Mask::kNone:
      return true;
    case Mask::kCausal:
      return j <= i;
    case Mask::kPadded:
      return i < p.lengths[b] && j < p.lengths[b];
    case Mask::kWindow256:
      return j <= i && j >= i - kWindow;
  }
  return true;
}

void build_mask(Problem& p, std::mt19937& rng) {
  const Shape& s = p.shape;
  if (s.mask == Mask::kPadded) {
    std::uniform_int_distribution<int32_t> length(static_cast<int32_t>(s.sk / 4),
                                                  static_cast<int32_t>(s.sk));
    for (int64_t b = 0; b < s.b; ++b) p.lengths.push_back(length(rng));
  }
  p.mask_planes = s.mask == Mask::kNone ? 0 : s.mask == Mask::kPadded ? s.b : 1;
  p.additive.resize(p.mask_planes * s.sq * s.sk);
  for (int64_t b = 0; b < s.b; ++b) {
    for (int64_t i = 0; i < s.sq; ++i) {
      for (int64_t j = 0; j < s.sk; ++j) {
        const bool seen = visible(p, b, i, j);
        p.visible_pairs += seen;
        if (b < p.mask_planes) p.additive[(b * s.sq + i) * s.sk + j] = seen ? 0.f : -INFINITY;
      }
    }
  }
}

Problem& problem_for(const Shape& s) {
  static std::map<std::string, Problem> problems;
  auto it = problems.find(shape_name(s));
  if (it == problems.end()) {
    std::mt19937 rng(kSeed);
    Problem p;
    p.shape = s;
    p.q = random_floats(q_size(s), rng);
    p.k = random_floats(kv_size(s), rng);
    p.v = random_floats(kv_size(s), rng);
    const int copies = kv_copies(s);
    for (std::vector<float>* kv : {&p.k, &p.v}) {
      kv->reserve(kv->size() * copies);
      for (int copy = 1; copy < copies; ++copy)
        kv->insert(kv->end(), kv->begin(), kv->begin() + kv_size(s));
    }
    build_mask(p, rng);
    it = problems.emplace(shape_name(s), std::move(p)).first;
  }
  return it->second;
}

// ---------------------------------------------------------------------------------------------
// The math path's softmax. Frameworks use a vectorized exp (PyTorch: Sleef); glibc's expf is only
// vectorized under -ffast-math, which would also drop the NaN checks below, so the exp is a plain
// polynomial gcc vectorizes by itself (with -fno-trapping-math, see CMakeLists.txt).

// Cephes' expf: e^x = 2^n · e^r with n = round(x·log2 e), |r| <= ln2/2; ~1 ulp for x in [-87, 0].
inline float exp_poly(float x) {
  x = std::max(x, -87.f);  // inputs are <= 0 after the max-subtract; below -87 2^n would underflow
  const float n = std::floor(x * 1.44269504f + 0.5f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;  // ln2 split in two for exactness
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const int32_t two_n_bits = (static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &two_n_bits, sizeof two_n);
  return p * two_n;
}

// Folds a row with 16 partial lanes: without -ffast-math gcc may not reorder a float sum or max.
template <typename Op>
float reduce_row(const float* row, int64_t n, float init, Op op) {
  constexpr int kLanes = 16;
  float lane[kLanes];
  std::fill(lane, lane + kLanes, init);
  const int64_t body = n - n % kLanes;
  for (int64_t j = 0; j < body; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = op(lane[l], row[j + l]);
  for (int64_t j = body; j < n; ++j) lane[j - body] = op(lane[j - body], row[j]);
  float total = init;
  for (int l = 0; l < kLanes; ++l) total = op(total, lane[l]);
  return total;
}

// mask: an additive [rows, cols] plane or null. A row the mask hides entirely becomes zeros.
void softmax_rows(float* scores, int64_t rows, int64_t cols, const float* mask) {
  for (int64_t i = 0; i < rows; ++i) {
    float* row = scores + i * cols;
    if (mask != nullptr) {
      const float* mask_row = mask + i * cols;
      for (int64_t j = 0; j < cols; ++j) row[j] += mask_row[j];
    }
    const float max =
        reduce_row(row, cols, -INFINITY, [](float a, float b) { return std::max(a, b); });
    if (max == -INFINITY) {
      std::fill(row, row + cols, 0.f);
      continue;
    }
    for (int64_t j = 0; j < cols; ++j) row[j] = exp_poly(row[j] - max);
    const float inv_sum = 1.f / reduce_row(row, cols, 0.f, [](float a, float b) { return a + b; });
    for (int64_t j = 0; j < cols; ++j) row[j] *= inv_sum;
  }
}

// ---------------------------------------------------------------------------------------------
// The implementations. Each computes out [B, H, Sq, D] from the problem's q and copy `copy` of
// its k and v.

float default_scale(const Shape& s) { return 1.f / std::sqrt(static_cast<float>(s.d)); }

// Pointers to the [S, D] matrices of query head h of batch b (k and v: its kv head).
struct HeadSlices {
  const float *q, *k, *v;
  float* out;
};

HeadSlices head_slices(const Problem& p, float* out, int64_t b, int64_t h, int copy) {
  const Shape& s = p.shape;
  const int64_t kv_offset = copy * kv_size(s) + (b * s.hkv + h / (s.h / s.hkv)) * s.sk * s.d;
  const int64_t q_offset = (b * s.h + h) * s.sq * s.d;
  return {p.q.data() + q_offset, p.k.data() + kv_offset, p.v.data() + kv_offset, out + q_offset};
}

// Heads run in parallel, one OpenBLAS call per head on its own thread (as a framework's batched
// matmul does for many heads): measured here this beats OpenBLAS's own threading inside each call,
// whose idle workers also keep spinning while a serial softmax runs. scores: one Sq×Sk workspace
// per thread, reused across heads like a framework's scratch buffer.
void openblas_math(const Problem& p, float* out, std::vector<std::vector<float>>& scores,
                   int copy) {
  const Shape& s = p.shape;
  const int sq = static_cast<int>(s.sq), sk = static_cast<int>(s.sk), d = static_cast<int>(s.d);
  const int64_t heads = s.b * s.h;
#pragma omp parallel for schedule(dynamic) num_threads(static_cast <int>(scores.size()))
  for (int64_t bh = 0; bh < heads; ++bh) {
    float* workspace = scores[omp_get_thread_num()].data();
    const HeadSlices m = head_slices(p, out, bh / s.h, bh % s.h, copy);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, sq, sk, d, default_scale(s), m.q, d, m.k,
                d, 0.f, workspace, sk);
    const int64_t b = bh / s.h;
    const float* mask =
        p.mask_planes == 0 ? nullptr : p.additive.data() + (b % p.mask_planes) * s.sq * s.sk;
    softmax_rows(workspace, sq, sk, mask);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, sq, d, sk, 1.f, workspace, sk, m.v, d,
                0.f, m.out, d);
  }
}

std::vector<std::vector<float>> math_workspaces(const Shape& s, int threads) {
  return std::vector<std::vector<float>>(threads, std::vector<float>(s.sq * s.sk));
}

// Textbook loops, single-threaded: the floor every other figure is compared with.
// row: an Sk workspace for one query row's weights.
void naive_attention(const Problem& p, float* out, float* row, int copy) {
  const Shape& s = p.shape;
  const float scale = default_scale(s);
  for (int64_t b = 0; b < s.b; ++b) {
    for (int64_t h = 0; h < s.h; ++h) {
      const HeadSlices m = head_slices(p, out, b, h, copy);
      for (int64_t i = 0; i < s.sq; ++i) {
        float max = -INFINITY;
        for (int64_t j = 0; j < s.sk; ++j) {
          float dot = 0.f;
          for (int64_t t = 0; t < s.d; ++t) dot += m.q[i * s.d + t] * m.k[j * s.d + t];
          row[j] = scale * dot;
          max = std::max(max, row[j]);
        }
        float sum = 0.f;
        for (int64_t j = 0; j < s.sk; ++j) {
          row[j] = std::exp(row[j] - max);
          sum += row[j];
        }
        for (int64_t t = 0; t < s.d; ++t) {
          float acc = 0.f;
          for (int64_t j = 0; j < s.sk; ++j) acc += row[j] * m.v[j * s.d + t];
          m.out[i * s.d + t] = acc / sum;
        }
      }
    }
  }
}

attention::Status ours(const Problem& p, float* out, int copy) {
  const Shape& s = p.shape;
  attention::SdpaOptions options;
  attention::MaskOptions& m = options.mask;
  switch (s.mask) {
    case Mask::kNone:
      break;
    case Mask::kCausal:
      m.causal = attention::Causal::TopLeft;
      break;
    case Mask::kPadded:
      m.key_lengths = attention::TensorView::contiguous(const_cast<int32_t*>(p.lengths.data()),
                                                        attention::DType::Int32, {s.b});
      m.query_lengths = m.key_lengths;
      break;
    case Mask::kWindow256:
      m.causal = attention::Causal::TopLeft;
      m.window = kWindow;
      break;
  }
  // The library takes mutable views; it only reads q, k and v.
  auto view = [](const float* data, int64_t b, int64_t h, int64_t seq, int64_t d) {
    return attention::TensorView::contiguous(const_cast<float*>(data), {b, h, seq, d});
  };
  const int64_t kv_offset = copy * kv_size(s);
  return attention::scaled_dot_product_attention(
      view(p.q.data(), s.b, s.h, s.sq, s.d), view(p.k.data() + kv_offset, s.b, s.hkv, s.sk, s.d),
      view(p.v.data() + kv_offset, s.b, s.hkv, s.sk, s.d),
      attention::TensorView::contiguous(out, {s.b, s.h, s.sq, s.d}), options);
}

// ---------------------------------------------------------------------------------------------
// Checking and reporting.

const std::vector<float>& reference_of(Problem& p) {
  if (p.reference.empty()) {
    p.reference.resize(q_size(p.shape));
    std::vector<std::vector<float>> scores = math_workspaces(p.shape, bench_threads());
    openblas_set_num_threads(1);
    openblas_math(p, p.reference.data(), scores, 0);
    // Idle OpenBLAS and OpenMP workers spin for a while (~0.1 s) before sleeping: let them, so they
    // do not take the cores from the benchmark that asked for this reference.
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return p.reference;
}

// Aborts unless out matches the math path: a wrong answer's speed is never reported. Runs once per
// (implementation, shape); Google Benchmark calls a benchmark function several times.
void check_once(const char* impl, Problem& p, const std::vector<float>& out) {
  static std::set<std::string> checked;
  const std::string key = std::string(impl) + "/" + shape_name(p.shape);
  if (!checked.insert(key).second) return;
  const std::vector<float>& ref = reference_of(p);
  float max_diff = 0.f;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float diff = std::fabs(out[i] - ref[i]);
    if (!(diff <= max_diff)) max_diff = diff;  // written so a NaN sticks
  }
  if (!(max_diff <= kMaxAbsDiff))
    fail(key + ": max abs diff vs the OpenBLAS math path is " + std::to_string(max_diff) + " (> " +
         std::to_string(kMaxAbsDiff) + ")");
}

benchmark::Counter per_second(double amount_per_iteration) {
  return benchmark::Counter(amount_per_iteration, benchmark::Counter::kIsIterationInvariantRate,
                            benchmark::Counter::kIs1000);
}

// GFLOP/s counts every (query, key) pair, masked or not, so a masked shape's figure over its
// unmasked twin's is the speed-up; "visible GFLOP/s" counts only the pairs the mask lets through.
void report(benchmark::State& state, const Problem& p, const char* impl) {
  const Shape& s = p.shape;
  state.SetLabel(impl);
  state.counters["GFLOP/s"] = per_second(attention_flops(s) * 1e-9);
  if (s.mask != Mask::kNone) {
    state.counters["visible GFLOP/s"] = per_second(4.0 * s.h * p.visible_pairs * s.d * 1e-9);
  }
  if (s.sq == 1)
    state.counters["GB/s"] = per_second(kv_bytes(s) * 1e-9);  // decode reads all of K, V
  state.counters["B"] = s.b;
  state.counters["H"] = s.h;
  state.counters["Hkv"] = s.hkv;
  state.counters["Sq"] = s.sq;
  state.counters["Sk"] = s.sk;
  state.counters["D"] = s.d;
}

// ---------------------------------------------------------------------------------------------
// Benchmarks.

void BM_Ours(benchmark::State& state, Shape shape) {
  Problem& p = problem_for(shape);
  std::vector<float> out(q_size(shape), NAN);
  attention::Status status = ours(p, out.data(), 0);
  if (!status) fail("ours/" + shape_name(shape) + ": " + status.message());
  check_once("ours", p, out);
  bool all_ok = true;
  KvRotation rotation(shape);
  for (auto _ : state) {
    all_ok &= ours(p, out.data(), rotation.next()).ok();
    benchmark::ClobberMemory();
  }
  if (!all_ok) state.SkipWithError("scaled_dot_product_attention returned an error");
  report(state, p, "ours");
}

void BM_OpenBlasMath(benchmark::State& state, Shape shape) {
  Problem& p = problem_for(shape);
  std::vector<float> out(q_size(shape), NAN);
  std::vector<std::vector<float>> scores = math_workspaces(shape, bench_threads());
  openblas_set_num_threads(1);  // parallel over heads instead (see openblas_math)
  KvRotation rotation(shape);
  for (auto _ : state) {
    openblas_math(p, out.data(), scores, rotation.next());
    benchmark::ClobberMemory();
  }
  report(state, p, "openblas_math");
}

void BM_Naive(benchmark::State& state, Shape shape) {
  Problem& p = problem_for(shape);
  std::vector<float> out(q_size(shape), NAN);
  std::vector<float> row(shape.sk);
  naive_attention(p, out.data(), row.data(), 0);
  check_once("naive", p, out);
  KvRotation rotation(shape);
  for (auto _ : state) {
    naive_attention(p, out.data(), row.data(), rotation.next());
    benchmark::ClobberMemory();
  }
  report(state, p, "naive");
}

void BM_SgemmProbe(benchmark::State& state, int n) {
  std::mt19937 rng(kSeed);
  const std::vector<float> a = random_floats(int64_t{n} * n, rng),
                           b = random_floats(int64_t{n} * n, rng);
  std::vector<float> c(int64_t{n} * n);
  openblas_set_num_threads(bench_threads());
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n,
                0.f, c.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetLabel("sgemm");
  state.counters["GFLOP/s"] = per_second(2.0 * n * n * n * 1e-9);
  state.counters["M"] = state.counters["N"] = state.counters["K"] = n;
}

// Memory bandwidth: a large memcpy split across the benchmark's threads. GB/s counts the bytes
// read plus the bytes written (STREAM's convention for copy).
void BM_CopyProbe(benchmark::State& state, int64_t bytes) {
  const std::vector<char> from(bytes, 1);
  std::vector<char> to(bytes, 0);
  const int threads = bench_threads();
  const int64_t chunk = (bytes + threads - 1) / threads;
  for (auto _ : state) {
#pragma omp parallel for num_threads(threads)
    for (int t = 0; t < threads; ++t) {
      const int64_t begin = std::min(bytes, t * chunk), end = std::min(bytes, begin + chunk);
      std::memcpy(to.data() + begin, from.data() + begin, end - begin);
    }
    benchmark::ClobberMemory();
  }
  state.SetLabel("copy");
  state.counters["GB/s"] = per_second(2.0 * bytes * 1e-9);
  state.counters["bytes"] = static_cast<double>(bytes);
}

template <typename Fn, typename Arg>
void add(const std::string& name, Fn fn, Arg arg) {
  // Warm-up: thread pools start, caches and scratch allocations settle, clocks ramp up; without it
  // the first benchmark of a run read up to 30% low.
  benchmark::RegisterBenchmark(name.c_str(), fn, arg)
      ->UseRealTime()
      ->MinWarmUpTime(0.3)
      ->Unit(benchmark::kMillisecond);
}

struct Impl {
  const char* name;
  void (*run)(benchmark::State&, Shape);
  bool every_shape;  // else only the cases marked with_naive
};

// Grouped by implementation, ours first: OpenBLAS's workers keep spinning for a while after each
// call, which would slow our multi-threaded kernels if they ran right after an OpenBLAS benchmark.
// ---------------------------------------------------------------------------------------------
// Multi-head attention with projections (self-attention, packed in_proj_weight, biases): ours vs
// the OpenBLAS composition a framework runs: one sgemm for the packed Q/K/V projection, the math
// path per head reading the heads in place (lda = 3E) and writing the concatenation (ldc = E),
// one sgemm for the output projection.

struct MhaShape {
  int64_t b, s, e, h;
};

const MhaShape kMhaShapes[] = {{1, 512, 512, 8}, {4, 256, 768, 12}, {1, 2048, 1024, 16}};

std::string mha_name(const MhaShape& m) {
  return std::to_string(m.b) + "x" + std::to_string(m.s) + "_E" + std::to_string(m.e) + "_H" +
         std::to_string(m.h);
}

struct MhaProblem {
  std::vector<float> x, in_proj, in_bias, out_proj, out_bias;
};

MhaProblem make_mha_problem(const MhaShape& m) {
  std::mt19937 rng(5);
  const float r = 1.0f / std::sqrt(float(m.e));
  auto random = [&](int64_t n, float range) {
    std::uniform_real_distribution<float> dist(-range, range);
    std::vector<float> t(static_cast<size_t>(n));
    for (float& x : t) x = dist(rng);
    return t;
  };
  return {random(m.b * m.s * m.e, 1.0f), random(3 * m.e * m.e, r), random(3 * m.e, r),
          random(m.e * m.e, r), random(m.e, r)};
}

// C [rows, n] = A [rows, k] · Wᵀ + bias (W [n, k]) with OpenBLAS's threads.
void sgemm_linear(const float* a, int64_t rows, int64_t k, const float* w, const float* bias,
                  int64_t n, float* c) {
  for (int64_t r = 0; r < rows; ++r) std::copy(bias, bias + n, c + r * n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(n),
              static_cast<int>(k), 1.f, a, static_cast<int>(k), w, static_cast<int>(k), 1.f, c,
              static_cast<int>(n));
}

void openblas_mha(const MhaShape& m, const MhaProblem& p, std::vector<float>& qkv,
                  std::vector<float>& concat, std::vector<std::vector<float>>& scores, float* out) {
  const int64_t rows = m.b * m.s, e = m.e, d = m.e / m.h;
  openblas_set_num_threads(bench_threads());
  sgemm_linear(p.x.data(), rows, e, p.in_proj.data(), p.in_bias.data(), 3 * e, qkv.data());
  openblas_set_num_threads(1);  // parallel over heads, as the math path does
  const int s = static_cast<int>(m.s), di = static_cast<int>(d), ld = static_cast<int>(3 * e);
  const float scale = 1.0f / std::sqrt(float(d));
#pragma omp parallel for schedule(dynamic) num_threads(static_cast <int>(scores.size()))
  for (int64_t bh = 0; bh < m.b * m.h; ++bh) {
    float* workspace = scores[omp_get_thread_num()].data();
    const int64_t b = bh / m.h, h = bh % m.h;
    const float* q = qkv.data() + b * m.s * 3 * e + h * d;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s, s, di, scale, q, ld, q + e, ld, 0.f,
                workspace, s);
    softmax_rows(workspace, s, s, nullptr);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, di, s, 1.f, workspace, s, q + 2 * e,
                ld, 0.f, concat.data() + b * m.s * e + h * d, static_cast<int>(e));
  }
  openblas_set_num_threads(bench_threads());
  sgemm_linear(concat.data(), rows, e, p.out_proj.data(), p.out_bias.data(), e, out);
}

attention::Status ours_mha(const MhaShape& m, MhaProblem& p, float* out) {
  using attention::TensorView;
  attention::MhaWeights w;
  w.in_proj_weight = TensorView::contiguous(p.in_proj.data(), {3 * m.e, m.e});
  w.in_proj_bias = TensorView::contiguous(p.in_bias.data(), {3 * m.e});
  w.out_proj_weight = TensorView::contiguous(p.out_proj.data(), {m.e, m.e});
  w.out_proj_bias = TensorView::contiguous(p.out_bias.data(), {m.e});
  attention::MhaOptions options;
  options.num_heads = m.h;
  const TensorView x = TensorView::contiguous(p.x.data(), {m.b, m.s, m.e});
  return attention::multi_head_attention(x, x, w, TensorView::contiguous(out, {m.b, m.s, m.e}),
                                         options);
}

void report_mha(benchmark::State& state, const MhaShape& m, const char* impl) {
  const double projections = 2.0 * m.b * m.s * m.e * 4 * m.e;
  const double attention = 4.0 * m.b * m.s * m.s * m.e;
  state.SetLabel(impl);
  state.counters["GFLOP/s"] = benchmark::Counter((projections + attention) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void BM_MhaOurs(benchmark::State& state, MhaShape m) {
  MhaProblem p = make_mha_problem(m);
  std::vector<float> out(m.b * m.s * m.e, NAN), expected(out.size());
  std::vector<float> qkv(m.b * m.s * 3 * m.e), concat(m.b * m.s * m.e);
  std::vector<std::vector<float>> scores(bench_threads(), std::vector<float>(m.s * m.s));
  openblas_mha(m, p, qkv, concat, scores, expected.data());
  const attention::Status status = ours_mha(m, p, out.data());
  if (!status) fail("mha/ours/" + mha_name(m) + ": " + status.message());
  double max_diff = 0;
  for (size_t n = 0; n < out.size(); ++n)
    max_diff = std::max<double>(max_diff, std::abs(out[n] - expected[n]));
  if (!(max_diff <= 1e-4)) {
    fail("mha/ours/" + mha_name(m) + ": max abs diff vs OpenBLAS is " + std::to_string(max_diff));
  }
  for (auto _ : state) {
    ours_mha(m, p, out.data());
    benchmark::ClobberMemory();
  }
  report_mha(state, m, "ours");
}

void BM_MhaOpenBlas(benchmark::State& state, MhaShape m) {
  MhaProblem p = make_mha_problem(m);
  std::vector<float> out(m.b * m.s * m.e, NAN);
  std::vector<float> qkv(m.b * m.s * 3 * m.e), concat(m.b * m.s * m.e);
  std::vector<std::vector<float>> scores(bench_threads(), std::vector<float>(m.s * m.s));
  for (auto _ : state) {
    openblas_mha(m, p, qkv, concat, scores, out.data());
    benchmark::ClobberMemory();
  }
  report_mha(state, m, "openblas");
}

void register_benchmarks() {
  const Impl impls[] = {{"ours", BM_Ours, true},
                        {"openblas_math", BM_OpenBlasMath, true},
                        {"naive", BM_Naive, false}};
  for (const Impl& impl : impls)
    for (const Case& c : kCases)
      if (impl.every_shape || c.with_naive)
        add(std::string("sdpa/") + impl.name + "/" + shape_name(c.shape), impl.run, c.shape);
  for (const MhaShape& m : kMhaShapes) {
    add("mha/ours/" + mha_name(m), BM_MhaOurs, m);
    add("mha/openblas/" + mha_name(m), BM_MhaOpenBlas, m);
  }
  for (int n : kSgemmSizes) add("sgemm/" + std::to_string(n), BM_SgemmProbe, n);
  add("copy/" + std::to_string(kCopyProbeBytes >> 20) + "MiB", BM_CopyProbe, kCopyProbeBytes);
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::initialize(&argc, argv)) return 1;
  benchmark::AddCustomContext(
      "openblas", std::string(openblas_get_config()) + " core=" + openblas_get_corename());

  register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
