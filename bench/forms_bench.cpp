// Google Benchmark driver for the attention forms beyond SDPA (issue 7): our generated kernels
// against straightforward loops (the "naive" peer: what a user writes by hand, compiled -O3
// -march=native, one thread), measured in the same run. Counter "Mpairs/s": (query, key) pairs
// weighed per second. ATTENTION_BENCH_THREADS sets our thread count (default: all cores).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attention/attention.h"
#include "bench_common.h"

namespace {

struct RegressionShape {
  int64_t b, sq, sk, d, dv;
  attention::RegressionKernel kernel;
  float bandwidth;
};

const char* kernel_name(attention::RegressionKernel kernel) {
  switch (kernel) {
    case attention::RegressionKernel::Gaussian:
      return "gaussian";
    case attention::RegressionKernel::Boxcar:
      return "boxcar";
    case attention::RegressionKernel::Epanechnikov:
      return "epanechnikov";
  }
  return "?";
}

std::string shape_name(const RegressionShape& s) {
  return std::to_string(s.b) + "x" + std::to_string(s.sq) + "x" + std::to_string(s.sk) + "x" +
         std::to_string(s.d) + "x" + std::to_string(s.dv) + "_" + kernel_name(s.kernel);
}

// The 1-D demo at scale, a small vector-valued regression, and one query against many keys.
const RegressionShape kShapes[] = {
    {1, 4096, 4096, 1, 1, attention::RegressionKernel::Gaussian, 0.5f},
    {1, 4096, 4096, 1, 1, attention::RegressionKernel::Epanechnikov, 0.5f},
    {1, 2048, 2048, 8, 8, attention::RegressionKernel::Gaussian, 1.0f},
    {4, 1, 65536, 4, 4, attention::RegressionKernel::Boxcar, 1.0f},
};

struct Problem {
  std::vector<float> q, k, v, out;
};

Problem make_problem(const RegressionShape& s) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  Problem p;
  p.q.resize(s.b * s.sq * s.d);
  p.k.resize(s.b * s.sk * s.d);
  p.v.resize(s.b * s.sk * s.dv);
  p.out.assign(s.b * s.sq * s.dv, NAN);
  for (std::vector<float>* t : {&p.q, &p.k, &p.v})
    for (float& x : *t) x = dist(rng);
  return p;
}

// What a user writes: weights of one row into a buffer, their sum, then the weighted average.
void naive(const RegressionShape& s, Problem& p, std::vector<float>& w) {
  const float inv_h2 = 1.0f / (s.bandwidth * s.bandwidth);
  for (int64_t b = 0; b < s.b; ++b) {
    for (int64_t i = 0; i < s.sq; ++i) {
      const float* q = &p.q[(b * s.sq + i) * s.d];
      float total = 0.0f, nearest = INFINITY;
      for (int64_t j = 0; j < s.sk; ++j) {
        const float* k = &p.k[(b * s.sk + j) * s.d];
        float d2 = 0.0f;
        for (int64_t d = 0; d < s.d; ++d) d2 += (q[d] - k[d]) * (q[d] - k[d]);
        w[j] = d2 * inv_h2;
        nearest = std::min(nearest, w[j]);
      }
      for (int64_t j = 0; j < s.sk; ++j) {
        const float u2 = w[j];
        switch (s.kernel) {
          case attention::RegressionKernel::Gaussian:
            w[j] = std::exp(-0.5f * (u2 - nearest));
            break;
          case attention::RegressionKernel::Boxcar:
            w[j] = u2 <= 1.0f ? 1.0f : 0.0f;
            break;
          case attention::RegressionKernel::Epanechnikov:
            w[j] = std::max(0.0f, 1.0f - std::sqrt(u2));
            break;
        }
        total += w[j];
      }
      float* out = &p.out[(b * s.sq + i) * s.dv];
      for (int64_t c = 0; c < s.dv; ++c) out[c] = 0.0f;
      for (int64_t j = 0; j < s.sk; ++j) {
        if (w[j] == 0.0f) continue;
        const float* v = &p.v[(b * s.sk + j) * s.dv];
        for (int64_t c = 0; c < s.dv; ++c) out[c] += w[j] * v[c];
      }
      for (int64_t c = 0; c < s.dv; ++c) out[c] = total > 0.0f ? out[c] / total : 0.0f;
    }
  }
}

attention::Status ours(const RegressionShape& s, Problem& p) {
  attention::KernelRegressionOptions options;
  options.kernel = s.kernel;
  options.bandwidth = s.bandwidth;
  return attention::nadaraya_watson_attention(
      attention::TensorView::contiguous(p.q.data(), {s.b, s.sq, s.d}),
      attention::TensorView::contiguous(p.k.data(), {s.b, s.sk, s.d}),
      attention::TensorView::contiguous(p.v.data(), {s.b, s.sk, s.dv}),
      attention::TensorView::contiguous(p.out.data(), {s.b, s.sq, s.dv}), options);
}

void report(benchmark::State& state, const RegressionShape& s, const char* impl) {
  state.SetLabel(impl);
  state.counters["Mpairs/s"] = benchmark::Counter(double(s.b) * s.sq * s.sk * 1e-6,
                                                  benchmark::Counter::kIsIterationInvariantRate);
}

void BM_NadarayaWatsonOurs(benchmark::State& state, RegressionShape s) {
  Problem p = make_problem(s);
  Problem check = p;
  std::vector<float> w(s.sk);
  naive(s, check, w);
  if (!ours(s, p).ok()) state.SkipWithError("nadaraya_watson_attention failed");
  // Agreement with the loops (a benchmark of wrong answers is worthless; the tests hold the exact
  // rule): loose, since a boxcar key at the edge may fall either side under another rounding.
  for (size_t n = 0; n < p.out.size(); ++n) {
    if (!(std::abs(p.out[n] - check.out[n]) <= 1e-2f * (1.0f + std::abs(check.out[n])))) {
      state.SkipWithError(("differs from the loops at " + std::to_string(n)).c_str());
      return;
    }
  }
  for (auto _ : state) {
    ours(s, p);
    benchmark::ClobberMemory();
  }
  report(state, s, "ours");
}

void BM_NadarayaWatsonNaive(benchmark::State& state, RegressionShape s) {
  Problem p = make_problem(s);
  std::vector<float> w(s.sk);
  for (auto _ : state) {
    naive(s, p, w);
    benchmark::ClobberMemory();
  }
  report(state, s, "naive");
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::initialize(&argc, argv)) return 1;
  for (const RegressionShape& s : kShapes) {
    for (auto [impl, fn] :
         {std::pair{"ours", BM_NadarayaWatsonOurs}, std::pair{"naive", BM_NadarayaWatsonNaive}}) {
      benchmark::RegisterBenchmark(
          ("nadaraya_watson/" + std::string(impl) + "/" + shape_name(s)).c_str(), fn, s)
          ->UseRealTime()
          ->MinWarmUpTime(0.2)
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
