// Benchmarks attention::scaled_dot_product_attention (CPU; fp32, and as ours_f16 / ours_bf16 with
// q, k, v and out in Float16 / BFloat16) against, in the same run:
//   - the "math path" a framework takes on CPU, S = scale·Q·Kᵀ, row softmax, O = P·V, twice:
//     with oneDNN's matmul and softmax primitives (onednn_math.h; the strongest CPU peer; also in
//     bf16, onednn_math_bf16) and with per-(batch, head) OpenBLAS sgemm calls;
//   - naive loops (small shapes and decode only);
//   - an FMA probe: the arithmetic peak of the ISA variant our kernels run (the same multi-target
//     dispatch picks it), and a square sgemm probe, what OpenBLAS reaches on this machine;
//   - a copy probe: the memory bandwidth a large memcpy reaches, the ceiling of decode;
//   - multi-head attention with projections against the same two peers (mha_bench.cpp);
//   - the serving paths beside the calls they replace (serving_bench.cpp).
// Every implementation's output is checked once against the OpenBLAS math path before it is timed.
// Decode shapes rotate through several copies of K and V, 256 MiB or more in all, so no iteration
// finds its cache in L3. The run's context records the kernels' target, OpenBLAS's and oneDNN's
// ISA. Threads: ATTENTION_BENCH_THREADS, else all hardware threads, for our library and both peers.
// bench/table.py turns the JSON output into a markdown table (scripts/bench.sh does both).
#include <attention/attention.h>
#include <benchmark/benchmark.h>
#include <cblas.h>  // OpenBLAS's own (see bench/CMakeLists.txt): declares openblas_set_num_threads
#include <omp.h>
#include <unistd.h>  // sysconf: the reported last-level cache

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "HalideBuffer.h"
#include "HalideRuntime.h"
#include "attention_fma_peak.h"
#include "bench_common.h"
#include "kernel_contract.h"
#include "math_path.h"
#include "onednn_math.h"
#include "sdpa_f32_decode_autoscheduled.h"
#include "sdpa_f32_prefill_autoscheduled.h"

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
    // GQA decode: 32 query heads over 8 kv heads read the KV bytes of 8 over 8 (issue 21: within
    // 1.15x of it when each kv head is read once).
    {{1, 32, 8, 1, 4096, 128}, true},
    {{1, 8, 8, 1, 4096, 128}, false},
    {{1, 64, 8, 1, 4096, 128}, false},  // groups of 8 (a 70B-class model): two blocks of 4 rows
    {{1, 1, 1, 1, 65536, 128}, false},  // one head: only split-KV fills the cores
    // Masked: the unmasked twins above (and the window's at 4096) time what masking saves.
    {{1, 8, 8, 2048, 2048, 64, Mask::kCausal}, false},
    {{8, 8, 8, 512, 512, 64}, false},
    {{8, 8, 8, 512, 512, 64, Mask::kPadded}, false},
    {{1, 8, 8, 4096, 4096, 64}, false},
    {{1, 8, 8, 4096, 4096, 64, Mask::kWindow256}, false},
    // The head-dim sweep (with 1x8x1024^2x64 and 1x16x1024^2x128, 1x32(8)x1x4096x128 above):
    // dims other than 64 and 128 take the general blocking.
    {{1, 8, 8, 1024, 1024, 32}, false},
    {{1, 8, 8, 1024, 1024, 80}, false},
    {{1, 8, 8, 1024, 1024, 96}, false},
    {{1, 8, 8, 1024, 1024, 128}, false},
    {{1, 8, 8, 1024, 1024, 256}, false},
    {{1, 32, 8, 1, 4096, 64}, false},
    {{1, 32, 8, 1, 4096, 80}, false},
    {{1, 32, 8, 1, 4096, 96}, false},
    {{1, 32, 8, 1, 4096, 256}, false},
};

constexpr int64_t kWindow = 256;

const int kSgemmSizes[] = {1024, 2048};

// Steps of the FMA probe per call and thread: 16 zmm chains take ~2 ms at 230 GFLOP/s a core.
constexpr int kFmaProbeSteps = 1 << 20;

// Bytes each memcpy of the copy probe moves, and the least K+V a decode shape rotates through:
// 256 MiB, or twice the last-level cache the machine reports (some VMs report 320-480 MiB of L3).
constexpr int64_t kCopyProbeBytes = int64_t(256) << 20;
double decode_rotation_bytes() {
  static const double bytes = [] {
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return std::max(double(int64_t(256) << 20), l3 > 0 ? 2.0 * static_cast<double>(l3) : 0.0);
  }();
  return bytes;
}

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
// K and V's bytes at `element_bytes` each (4: fp32, 2: the half types).
double kv_bytes(const Shape& s, int element_bytes = 4) { return 2.0 * kv_size(s) * element_bytes; }
// Copies of K and V a shape's benchmark cycles through: decode reads each KV cache once per call.
int kv_copies(const Shape& s) {
  return s.sq == 1 ? std::max(2, static_cast<int>(std::ceil(decode_rotation_bytes() / kv_bytes(s))))
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
  // q, k and v (every copy) in Float16 and BFloat16, converted on first use.
  std::map<attention::DType, std::vector<uint16_t>> half_q, half_k, half_v;
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
    bench::softmax_rows(workspace, sq, sk, mask);
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

// `p`'s q, k and v in `dtype` (the library's own conversion, once per problem and type).
void make_half_inputs(Problem& p, attention::DType dtype) {
  if (dtype == attention::DType::Float32 || p.half_q.count(dtype)) return;
  for (auto [from, to] :
       {std::pair{&p.q, &p.half_q[dtype]}, {&p.k, &p.half_k[dtype]}, {&p.v, &p.half_v[dtype]}}) {
    to->resize(from->size());
    const auto n = static_cast<int64_t>(from->size());
    const attention::Status status =
        attention::convert_dtype(attention::TensorView::contiguous(from->data(), {n}),
                                 attention::TensorView::contiguous(to->data(), dtype, {n}));
    if (!status) fail("convert_dtype: " + status.message());
  }
}

// q, k, v and out in `dtype` (Float32, or a half type after make_half_inputs); out points at
// elements of that type.
attention::Status ours(Problem& p, void* out, int copy, attention::DType dtype) {
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
  const bool fp32 = dtype == attention::DType::Float32;
  const auto base = [&](std::vector<float>& f32,
                        std::map<attention::DType, std::vector<uint16_t>>& half,
                        int64_t offset) -> void* {
    return fp32 ? static_cast<void*>(f32.data() + offset) : half[dtype].data() + offset;
  };
  auto view = [&](void* data, int64_t b, int64_t h, int64_t seq) {
    return attention::TensorView::contiguous(data, dtype, {b, h, seq, s.d});
  };
  const int64_t kv_offset = copy * kv_size(s);
  return attention::scaled_dot_product_attention(
      view(base(p.q, p.half_q, 0), s.b, s.h, s.sq),
      view(base(p.k, p.half_k, kv_offset), s.b, s.hkv, s.sk),
      view(base(p.v, p.half_v, kv_offset), s.b, s.hkv, s.sk), view(out, s.b, s.h, s.sq), options);
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
void check_once(const char* impl, Problem& p, const std::vector<float>& out,
                float tolerance = kMaxAbsDiff) {
  static std::set<std::string> checked;
  const std::string key = std::string(impl) + "/" + shape_name(p.shape);
  if (!checked.insert(key).second) return;
  const std::vector<float>& ref = reference_of(p);
  float max_diff = 0.f;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float diff = std::fabs(out[i] - ref[i]);
    if (!(diff <= max_diff)) max_diff = diff;  // written so a NaN sticks
  }
  if (!(max_diff <= tolerance))
    fail(key + ": max abs diff vs the OpenBLAS math path is " + std::to_string(max_diff) + " (> " +
         std::to_string(tolerance) + ")");
}

using bench::per_second;

// GFLOP/s counts every (query, key) pair, masked or not, so a masked shape's figure over its
// unmasked twin's is the speed-up; "visible GFLOP/s" counts only the pairs the mask lets through.
void report(benchmark::State& state, const Problem& p, const char* impl, int element_bytes = 4) {
  const Shape& s = p.shape;
  state.SetLabel(impl);
  state.counters["GFLOP/s"] = per_second(attention_flops(s) * 1e-9);
  if (s.mask != Mask::kNone) {
    state.counters["visible GFLOP/s"] = per_second(4.0 * s.h * p.visible_pairs * s.d * 1e-9);
  }
  if (s.sq == 1)
    state.counters["GB/s"] = per_second(kv_bytes(s, element_bytes) * 1e-9);  // all of K and V
  state.counters["B"] = s.b;
  state.counters["H"] = s.h;
  state.counters["Hkv"] = s.hkv;
  state.counters["Sq"] = s.sq;
  state.counters["Sk"] = s.sk;
  state.counters["D"] = s.d;
}

// ---------------------------------------------------------------------------------------------
// Benchmarks.

// `tuned`: the library as shipped, tuned kernels on (attention::set_tuned_kernels); otherwise the
// default tilings alone, the "default" column beside it.
void run_ours(benchmark::State& state, Shape shape, bool tuned) {
  attention::set_tuned_kernels(tuned);
  Problem& p = problem_for(shape);
  std::vector<float> out(q_size(shape), NAN);
  attention::Status status = ours(p, out.data(), 0, attention::DType::Float32);
  if (!status) fail("ours/" + shape_name(shape) + ": " + status.message());
  check_once("ours", p, out);
  bool all_ok = true;
  KvRotation rotation(shape);
  for (auto _ : state) {
    all_ok &= ours(p, out.data(), rotation.next(), attention::DType::Float32).ok();
    benchmark::ClobberMemory();
  }
  attention::set_tuned_kernels(true);
  if (!all_ok) state.SkipWithError("scaled_dot_product_attention returned an error");
  report(state, p, tuned ? "ours" : "ours_default");
}

void BM_Ours(benchmark::State& state, Shape shape) { run_ours(state, shape, true); }
void BM_OursDefault(benchmark::State& state, Shape shape) { run_ours(state, shape, false); }

// q, k, v and out in a half type. Checked against the fp32 math path on the unrounded inputs, so
// the tolerance covers the inputs' rounding (bf16 keeps 8 significant bits, f16 11).
void run_ours_half(benchmark::State& state, Shape shape, attention::DType dtype) {
  const bool bf16 = dtype == attention::DType::BFloat16;
  const char* impl = bf16 ? "ours_bf16" : "ours_f16";
  Problem& p = problem_for(shape);
  make_half_inputs(p, dtype);
  std::vector<uint16_t> out(q_size(shape), 0xffff);
  attention::Status status = ours(p, out.data(), 0, dtype);
  if (!status) fail(std::string(impl) + "/" + shape_name(shape) + ": " + status.message());
  std::vector<float> widened(out.size());
  const auto n = static_cast<int64_t>(out.size());
  status = attention::convert_dtype(attention::TensorView::contiguous(out.data(), dtype, {n}),
                                    attention::TensorView::contiguous(widened.data(), {n}));
  if (!status) fail(std::string("convert_dtype: ") + status.message());
  check_once(impl, p, widened, bf16 ? 3e-2f : 4e-3f);
  bool all_ok = true;
  KvRotation rotation(shape);
  for (auto _ : state) {
    all_ok &= ours(p, out.data(), rotation.next(), dtype).ok();
    benchmark::ClobberMemory();
  }
  if (!all_ok) state.SkipWithError("scaled_dot_product_attention returned an error");
  report(state, p, impl, 2);
}

void BM_OursF16(benchmark::State& state, Shape shape) {
  run_ours_half(state, shape, attention::DType::Float16);
}
void BM_OursBf16(benchmark::State& state, Shape shape) {
  run_ours_half(state, shape, attention::DType::BFloat16);
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

// The oneDNN math path over all heads (onednn_math.h), on oneDNN's own OpenMP threads; with
// `bf16`, q, k, v and out in BFloat16 (the peer of ours_bf16).
void run_onednn(benchmark::State& state, Shape shape, bool bf16) {
  Problem& p = problem_for(shape);
  const Shape& s = p.shape;
  const int64_t group = s.h / s.hkv;
  const bench::OneDnnLayout layout = {s.b,
                                      s.hkv,
                                      group,
                                      s.sq,
                                      s.sk,
                                      s.d,
                                      bench::contiguous_bhsd(s.h, group, s.sq, s.d),
                                      bench::contiguous_bhsd(s.hkv, 1, s.sk, s.d),
                                      bench::contiguous_bhsd(s.hkv, 1, s.sk, s.d),
                                      bench::contiguous_bhsd(s.h, group, s.sq, s.d),
                                      p.mask_planes};
  const attention::DType bf = attention::DType::BFloat16;
  if (bf16) make_half_inputs(p, bf);
  std::optional<bench::OneDnnAttention> made;
  try {
    made.emplace(layout, default_scale(s), p.additive.data(), bf16);
  } catch (const dnnl::error& e) {
    // oneDNN 2.6 has bf16 matmuls only from avx512_core up: an AVX2-only CPU gets none.
    state.SkipWithError(
        (std::string("oneDNN cannot build this primitive here: ") + e.what()).c_str());
    return;
  }
  bench::OneDnnAttention& onednn = *made;
  std::vector<float> out(q_size(s), NAN);
  std::vector<uint16_t> out16(bf16 ? q_size(s) : 0, 0xffff);
  auto run = [&](int copy) {
    const int64_t kv_offset = copy * kv_size(s);
    if (bf16) {
      onednn.run(p.half_q[bf].data(), p.half_k[bf].data() + kv_offset,
                 p.half_v[bf].data() + kv_offset, out16.data(), bench_threads());
    } else {
      onednn.run(p.q.data(), p.k.data() + kv_offset, p.v.data() + kv_offset, out.data(),
                 bench_threads());
    }
  };
  run(0);
  const char* impl = bf16 ? "onednn_math_bf16" : "onednn_math";
  if (bf16) {
    const auto n = static_cast<int64_t>(out.size());
    const attention::Status status =
        attention::convert_dtype(attention::TensorView::contiguous(out16.data(), bf, {n}),
                                 attention::TensorView::contiguous(out.data(), {n}));
    if (!status) fail(std::string("convert_dtype: ") + status.message());
  }
  // bf16 keeps 8 significant bits, and oneDNN rounds P to bf16 too.
  check_once(impl, p, out, bf16 ? 3e-2f : kMaxAbsDiff);
  KvRotation rotation(shape);
  for (auto _ : state) {
    run(rotation.next());
    benchmark::ClobberMemory();
  }
  report(state, p, impl, bf16 ? 2 : 4);
}

void BM_OneDnnMath(benchmark::State& state, Shape shape) { run_onednn(state, shape, false); }
void BM_OneDnnMathBf16(benchmark::State& state, Shape shape) { run_onednn(state, shape, true); }

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

// Arithmetic limit: the FMA loop generated for our kernels' targets
// (generators/probe_generator.cpp), so the variant that runs is the one our kernels run; one work
// item per benchmark thread.
void BM_FmaPeakProbe(benchmark::State& state, int steps) {
  const int threads = bench_threads();
  Halide::Runtime::Buffer<float> checksum(threads);
  auto flops_per_step = Halide::Runtime::Buffer<int32_t>::make_scalar();
  auto run = [&] {
    return attention_fma_peak(nullptr, steps, 0.999f, 1e-3f, checksum.raw_buffer(),
                              flops_per_step.raw_buffer());
  };
  if (run() != 0) fail("fma_peak: the probe kernel failed");
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(checksum.data());
  }
  state.SetLabel("fma_peak");
  state.counters["GFLOP/s"] = per_second(double(flops_per_step()) * steps * threads * 1e-9);
  state.counters["flops/step"] = flops_per_step();
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

// Halide's best autoscheduler on our generator (bench/CMakeLists.txt), unmasked shapes only: the
// kernel called directly with the library's key split. Its errors (Li2018's and Adams2019's decode
// schedules tile the heads and reject H = 1) skip the benchmark with Halide's message.
void BM_Autoscheduled(benchmark::State& state, Shape shape) {
  Problem& p = problem_for(shape);
  const Shape& s = p.shape;
  const bool prefill = attention_contract::use_prefill(s.sq);
  // The library's default key split (split_keys and score_keys are the same on every ISA's
  // defaults that matter here: any split is correct, this one is what the library would use).
  const attention_contract::CpuTiling tiling = attention_contract::cpu_tiling(16, 32, prefill);
  const int32_t key_split = prefill
                                ? attention_contract::prefill_key_split(s.sk, tiling)
                                : attention_contract::decode_key_split(s.b, s.hkv, s.sk, tiling);
  std::vector<float> out(q_size(s), NAN), lse(s.b * s.h * s.sq);
  const auto kernel = prefill ? sdpa_f32_prefill_autoscheduled : sdpa_f32_decode_autoscheduled;
  std::string error;
  auto call = [&](int copy) {
    float* k = p.k.data() + copy * kv_size(s);
    float* v = p.v.data() + copy * kv_size(s);
    Halide::Runtime::Buffer<float> hq(p.q.data(), {int(s.d), int(s.sq), int(s.h), int(s.b)}),
        hk(k, {int(s.d), int(s.sk), int(s.hkv), int(s.b)}),
        hv(v, {int(s.d), int(s.sk), int(s.hkv), int(s.b)}),
        hout(out.data(), {int(s.d), int(s.sq), int(s.h), int(s.b)}),
        hlse(lse.data(), {{0, int(s.d), 0},
                          {0, int(s.sq), 1},
                          {0, int(s.h), int(s.sq)},
                          {0, int(s.b), int(s.sq * s.h)}});  // a stride-0 feature dimension
    return kernel(nullptr, hq.raw_buffer(), hk.raw_buffer(), hv.raw_buffer(),
                  1.0f / std::sqrt(float(s.d)), key_split, hout.raw_buffer(), hlse.raw_buffer());
  };
  if (call(0) != 0) {
    state.SkipWithError("the autoscheduled kernel failed (Halide's message on stderr)");
    return;
  }
  check_once("autoscheduled", p, out);
  KvRotation rotation(shape);
  for (auto _ : state) {
    call(rotation.next());
    benchmark::ClobberMemory();
  }
  report(state, p, "autoscheduled");
}

struct Impl {
  const char* name;
  void (*run)(benchmark::State&, Shape);
  bool every_shape;  // else only the cases marked with_naive
};

// Grouped by implementation, ours first: OpenBLAS's workers keep spinning for a while after each
// call, which would slow our multi-threaded kernels if they ran right after an OpenBLAS benchmark.
void register_benchmarks() {
  const Impl impls[] = {{"ours", BM_Ours, true},
                        {"ours_f16", BM_OursF16, true},
                        {"ours_bf16", BM_OursBf16, true},
                        {"ours_default", BM_OursDefault, true},
                        {"onednn_math", BM_OneDnnMath, true},
                        {"onednn_math_bf16", BM_OneDnnMathBf16, true},
                        {"openblas_math", BM_OpenBlasMath, true},
                        {"naive", BM_Naive, false}};
  for (const Impl& impl : impls)
    for (const Case& c : kCases)
      if (impl.every_shape || c.with_naive)
        bench::register_timed(std::string("sdpa/") + impl.name + "/" + shape_name(c.shape),
                              impl.run, c.shape);
  // Not the 137-GFLOP 8192² shape: at the autoscheduler's ~20 GFLOP/s one call takes ~7 s.
  for (const Case& c : kCases)
    if (c.shape.mask == Mask::kNone && c.shape.hkv == c.shape.h && attention_flops(c.shape) < 5e10)
      bench::register_timed("sdpa/autoscheduled/" + shape_name(c.shape), BM_Autoscheduled, c.shape);
  bench::register_mha_benchmarks();
  bench::register_serving_benchmarks();
#if ATTENTION_BENCH_MODS
  bench::register_mod_benchmarks();
#endif
  for (int n : kSgemmSizes) bench::register_timed("sgemm/" + std::to_string(n), BM_SgemmProbe, n);
  bench::register_timed("fma_peak/" + std::to_string(kFmaProbeSteps), BM_FmaPeakProbe,
                        kFmaProbeSteps);
  bench::register_timed("copy/" + std::to_string(kCopyProbeBytes >> 20) + "MiB", BM_CopyProbe,
                        kCopyProbeBytes);
}

// ATTENTION_BENCH_ISA=avx2 or sse41 caps the x86 variant our kernels and the FMA probe run (through
// Halide's dispatch hook, before any kernel's first call), so one AVX-512 machine can also time the
// variant AVX2-only machines run. Unset: the best variant this CPU has.
template <halide_target_feature_t forbidden>
int refuse_variants_with(int count, const uint64_t* features) {
  const int word = forbidden / 64;
  if (word < count && ((features[word] >> (forbidden % 64)) & 1)) return 0;
  return halide_default_can_use_target_features(count, features);
}

void cap_isa_variant() {
  const char* isa = std::getenv("ATTENTION_BENCH_ISA");
  if (isa == nullptr || *isa == '\0') return;
  const std::string name = isa;
  if (name == "avx2") {
    halide_set_custom_can_use_target_features(refuse_variants_with<halide_target_feature_avx512>);
  } else if (name == "sse41") {
    halide_set_custom_can_use_target_features(refuse_variants_with<halide_target_feature_avx>);
  } else {
    fail("ATTENTION_BENCH_ISA=" + name + ": expected avx2 or sse41 (or unset for the best)");
  }
}

}  // namespace

int main(int argc, char** argv) {
  cap_isa_variant();
  if (!bench::initialize(&argc, argv)) return 1;
  benchmark::AddCustomContext(
      "openblas", std::string(openblas_get_config()) + " core=" + openblas_get_corename());
  benchmark::AddCustomContext("onednn", bench::onednn_description());
  // The variant of our kernels (and of the FMA probe, built for the same targets) that ran.
  benchmark::AddCustomContext("cpu_kernel_target", attention::cpu_kernel_target());

  register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
