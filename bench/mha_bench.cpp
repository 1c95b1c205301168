// Multi-head attention with projections (self-attention, packed in_proj_weight, biases): ours
// against the compositions a framework runs, in sdpa_bench's run:
//   - OpenBLAS: one sgemm for the packed Q/K/V projection, the math path per head reading the
//     heads in place (lda = 3E) and writing the concatenation (ldc = E), one sgemm for the output
//     projection;
//   - oneDNN: the same with matmul primitives and the oneDNN math path (onednn_math.h).
#include <attention/attention.h>
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "math_path.h"
#include "onednn_math.h"

namespace {

[[noreturn]] void fail(const std::string& message) { bench::fail("sdpa_bench", message); }

int bench_threads() { return bench::threads(); }

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
    bench::softmax_rows(workspace, s, s, nullptr);
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
  state.counters["GFLOP/s"] = bench::per_second((projections + attention) * 1e-9);
}

// The oneDNN composition: matmul primitives for the projections (bias fused), the oneDNN math path
// (onednn_math.h) over the heads read in place from the packed projection and written into the
// concatenation.
struct OneDnnMha {
  explicit OneDnnMha(const MhaShape& m)
      : in_proj(m.b * m.s, m.e, 3 * m.e),
        attention(layout(m), 1.0f / std::sqrt(float(m.e / m.h)), nullptr),
        out_proj(m.b * m.s, m.e, m.e),
        qkv(m.b * m.s * 3 * m.e),
        concat(m.b * m.s * m.e) {}

  static bench::OneDnnLayout layout(const MhaShape& m) {
    const int64_t d = m.e / m.h;
    const bench::Strides5 packed = {m.s * 3 * m.e, d, d, 3 * m.e, 1},
                          joined = {m.s * m.e, d, d, m.e, 1};
    return {m.b, m.h, 1, m.s, m.s, d, packed, packed, packed, joined};
  }

  void run(const MhaShape& m, const MhaProblem& p, float* out) {
    const int threads = bench_threads();
    in_proj.run(p.x.data(), p.in_proj.data(), p.in_bias.data(), qkv.data(), threads);
    attention.run(qkv.data(), qkv.data() + m.e, qkv.data() + 2 * m.e, concat.data(), threads);
    out_proj.run(concat.data(), p.out_proj.data(), p.out_bias.data(), out, threads);
  }

  bench::OneDnnLinear in_proj;
  bench::OneDnnAttention attention;
  bench::OneDnnLinear out_proj;
  std::vector<float> qkv, concat;
};

// Aborts unless out matches the OpenBLAS composition: a wrong answer's speed is never reported.
void check_mha(const char* impl, const MhaShape& m, const MhaProblem& p,
               const std::vector<float>& out) {
  std::vector<float> expected(out.size());
  std::vector<float> qkv(m.b * m.s * 3 * m.e), concat(m.b * m.s * m.e);
  std::vector<std::vector<float>> scores(bench_threads(), std::vector<float>(m.s * m.s));
  openblas_mha(m, p, qkv, concat, scores, expected.data());
  double max_diff = 0;
  for (size_t n = 0; n < out.size(); ++n) {
    const double diff = std::abs(out[n] - expected[n]);
    if (!(diff <= max_diff)) max_diff = diff;  // written so a NaN sticks
  }
  if (!(max_diff <= 1e-4)) {
    fail(std::string("mha/") + impl + "/" + mha_name(m) + ": max abs diff vs OpenBLAS is " +
         std::to_string(max_diff));
  }
}

void BM_MhaOurs(benchmark::State& state, MhaShape m) {
  MhaProblem p = make_mha_problem(m);
  std::vector<float> out(m.b * m.s * m.e, NAN);
  const attention::Status status = ours_mha(m, p, out.data());
  if (!status) fail("mha/ours/" + mha_name(m) + ": " + status.message());
  check_mha("ours", m, p, out);
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

void BM_MhaOneDnn(benchmark::State& state, MhaShape m) {
  MhaProblem p = make_mha_problem(m);
  std::vector<float> out(m.b * m.s * m.e, NAN);
  OneDnnMha onednn(m);
  onednn.run(m, p, out.data());
  check_mha("onednn", m, p, out);
  for (auto _ : state) {
    onednn.run(m, p, out.data());
    benchmark::ClobberMemory();
  }
  report_mha(state, m, "onednn");
}

}  // namespace

namespace bench {

void register_mha_benchmarks() {
  for (const MhaShape& m : kMhaShapes) {
    register_timed("mha/ours/" + mha_name(m), BM_MhaOurs, m);
    register_timed("mha/openblas/" + mha_name(m), BM_MhaOpenBlas, m);
    register_timed("mha/onednn/" + mha_name(m), BM_MhaOneDnn, m);
  }
}

}  // namespace bench
