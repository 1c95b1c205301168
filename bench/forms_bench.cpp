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

// Any shape with b, sq and sk: the counter is (query, key) pairs per second.
template <typename Shape>
void report(benchmark::State& state, const Shape& s, const char* impl) {
  state.SetLabel(impl);
  state.counters["Mpairs/s"] = benchmark::Counter(double(s.b) * s.sq * s.sk * 1e-6,
                                                  benchmark::Counter::kIsIterationInvariantRate);
}

// Runs `ours` once and checks it against the loops' output `expected` (a benchmark of wrong answers
// is worthless; the tests hold the exact rule), then times it. False (and the benchmark skipped)
// on an error or a disagreement beyond `tolerance` · (1 + |expected|).
template <typename Run>
void time_if_agreeing(benchmark::State& state, Run ours, const std::vector<float>& out,
                      const std::vector<float>& expected, float tolerance) {
  const attention::Status status = ours();
  if (!status.ok()) {
    state.SkipWithError(status.message().c_str());
    return;
  }
  for (size_t n = 0; n < out.size(); ++n) {
    if (!(std::abs(out[n] - expected[n]) <= tolerance * (1.0f + std::abs(expected[n])))) {
      state.SkipWithError(("differs from the loops at " + std::to_string(n)).c_str());
      return;
    }
  }
  for (auto _ : state) {
    ours();
    benchmark::ClobberMemory();
  }
}

// ---- Luong / Bahdanau score forms: dot, bilinear (q·W·k), additive (w_a · tanh(W_q q + W_k k)).

enum class Form { Dot, Bilinear, Additive };

struct FormShape {
  Form form;
  int64_t b, sq, sk, d, dv, a;  // d: Dq = Dk; a: the additive attention dim
};

std::string form_shape_name(const FormShape& s) {
  const char* form = s.form == Form::Dot        ? "dot"
                     : s.form == Form::Bilinear ? "bilinear"
                                                : "additive";
  std::string name = std::string(form) + "/" + std::to_string(s.b) + "x" + std::to_string(s.sq) +
                     "x" + std::to_string(s.sk) + "x" + std::to_string(s.d) + "x" +
                     std::to_string(s.dv);
  return s.form == Form::Additive ? name + "_A" + std::to_string(s.a) : name;
}

// Encoder-decoder sizes (Bahdanau's A = 2 × hidden), a long prefill, a decoder step (Sq = 1).
const FormShape kFormShapes[] = {
    {Form::Dot, 4, 512, 512, 64, 64, 0},
    {Form::Bilinear, 4, 256, 256, 128, 128, 0},
    {Form::Additive, 8, 64, 64, 256, 256, 128},
    {Form::Additive, 32, 1, 512, 256, 256, 128},
};

struct FormProblem {
  std::vector<float> q, k, v, w, wq, wk, wa, out;
};

FormProblem make_problem(const FormShape& s) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  FormProblem p;
  auto random = [&](size_t n, float scale) {
    std::vector<float> t(n);
    for (float& x : t) x = scale * dist(rng);
    return t;
  };
  const float inv_sqrt_d = 1.0f / std::sqrt(float(s.d));
  p.q = random(s.b * s.sq * s.d, 1.0f);
  p.k = random(s.b * s.sk * s.d, 1.0f);
  p.v = random(s.b * s.sk * s.dv, 1.0f);
  p.w = random(s.d * s.d, inv_sqrt_d);
  p.wq = random(s.a * s.d, inv_sqrt_d);
  p.wk = random(s.a * s.d, inv_sqrt_d);
  p.wa = random(s.a, 1.0f);
  p.out.assign(s.b * s.sq * s.dv, NAN);
  return p;
}

// The loops a user writes: projections once (bilinear: q·W; additive: W_q q and W_k k), then per
// query row the scores, a max-shifted softmax and the weighted sum of v.
void naive(const FormShape& s, FormProblem& p, std::vector<float>& scratch) {
  const int64_t width = s.form == Form::Additive ? s.a : s.d;
  std::vector<float> qp = p.q, kp;
  if (s.form != Form::Dot) {
    qp.assign(s.b * s.sq * width, 0.0f);
    for (int64_t r = 0; r < s.b * s.sq; ++r) {
      for (int64_t e = 0; e < width; ++e) {
        float acc = 0.0f;
        for (int64_t d = 0; d < s.d; ++d) {
          const float x = p.q[r * s.d + d];
          acc += s.form == Form::Bilinear ? x * p.w[d * s.d + e] : x * p.wq[e * s.d + d];
        }
        qp[r * width + e] = acc;
      }
    }
  }
  const float* keys = p.k.data();
  if (s.form == Form::Additive) {
    kp.resize(s.b * s.sk * s.a);
    for (int64_t r = 0; r < s.b * s.sk; ++r)
      for (int64_t a = 0; a < s.a; ++a) {
        float acc = 0.0f;
        for (int64_t d = 0; d < s.d; ++d) acc += p.k[r * s.d + d] * p.wk[a * s.d + d];
        kp[r * s.a + a] = acc;
      }
    keys = kp.data();
  }
  for (int64_t b = 0; b < s.b; ++b) {
    for (int64_t i = 0; i < s.sq; ++i) {
      const float* q = &qp[(b * s.sq + i) * width];
      float row_max = -INFINITY;
      for (int64_t j = 0; j < s.sk; ++j) {
        const float* k = &keys[(b * s.sk + j) * width];
        float score = 0.0f;
        for (int64_t e = 0; e < width; ++e) {
          score += s.form == Form::Additive ? p.wa[e] * std::tanh(q[e] + k[e]) : q[e] * k[e];
        }
        scratch[j] = score;
        row_max = std::max(row_max, score);
      }
      float total = 0.0f;
      for (int64_t j = 0; j < s.sk; ++j) total += scratch[j] = std::exp(scratch[j] - row_max);
      float* out = &p.out[(b * s.sq + i) * s.dv];
      for (int64_t c = 0; c < s.dv; ++c) out[c] = 0.0f;
      for (int64_t j = 0; j < s.sk; ++j) {
        const float* v = &p.v[(b * s.sk + j) * s.dv];
        for (int64_t c = 0; c < s.dv; ++c) out[c] += scratch[j] * v[c];
      }
      for (int64_t c = 0; c < s.dv; ++c) out[c] /= total;
    }
  }
}

attention::Status ours(const FormShape& s, FormProblem& p) {
  using attention::TensorView;
  const TensorView q = TensorView::contiguous(p.q.data(), {s.b, s.sq, s.d});
  const TensorView k = TensorView::contiguous(p.k.data(), {s.b, s.sk, s.d});
  const TensorView v = TensorView::contiguous(p.v.data(), {s.b, s.sk, s.dv});
  const TensorView out = TensorView::contiguous(p.out.data(), {s.b, s.sq, s.dv});
  switch (s.form) {
    case Form::Dot:
      return attention::dot_product_attention(q, k, v, out);
    case Form::Bilinear:
      return attention::bilinear_attention(q, k, v, TensorView::contiguous(p.w.data(), {s.d, s.d}),
                                           out);
    case Form::Additive: {
      attention::AdditiveWeights w;
      w.query_weight = TensorView::contiguous(p.wq.data(), {s.a, s.d});
      w.key_weight = TensorView::contiguous(p.wk.data(), {s.a, s.d});
      w.score_weight = TensorView::contiguous(p.wa.data(), {s.a});
      return attention::additive_attention(q, k, v, w, out);
    }
  }
  return attention::Status::invalid("unknown form");
}

// ---- Static attention: softmax(W)·X and softmax(W₁·W₂)·X.

struct StaticShape {
  int64_t b, sq, sk, d, r;  // r: the factorised rank, 0 for the plain form
};

std::string static_shape_name(const StaticShape& s) {
  std::string name = std::string(s.r ? "factorized" : "static") + "/" + std::to_string(s.b) + "x" +
                     std::to_string(s.sq) + "x" + std::to_string(s.sk) + "x" + std::to_string(s.d);
  return s.r ? name + "_R" + std::to_string(s.r) : name;
}

const StaticShape kStaticShapes[] = {{8, 256, 256, 64, 0}, {4, 1024, 1024, 64, 32}};

struct StaticProblem {
  std::vector<float> w, w1, w2, x, out;
};

StaticProblem make_problem(const StaticShape& s) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto random = [&](size_t n) {
    std::vector<float> t(n);
    for (float& e : t) e = dist(rng);
    return t;
  };
  StaticProblem p;
  p.w = random(s.sq * s.sk);
  p.w1 = random(s.sq * std::max<int64_t>(s.r, 1));
  p.w2 = random(std::max<int64_t>(s.r, 1) * s.sk);
  p.x = random(s.b * s.sk * s.d);
  p.out.assign(s.b * s.sq * s.d, NAN);
  return p;
}

// The loops a user writes: W (or W₁·W₂) once, its row softmax once, then P·X per batch.
void naive(const StaticShape& s, StaticProblem& p, std::vector<float>& probs) {
  for (int64_t i = 0; i < s.sq; ++i) {
    float* row = &probs[i * s.sk];
    for (int64_t j = 0; j < s.sk; ++j) {
      float w = s.r ? 0.0f : p.w[i * s.sk + j];
      for (int64_t r = 0; r < s.r; ++r) w += p.w1[i * s.r + r] * p.w2[r * s.sk + j];
      row[j] = w;
    }
    const float row_max = *std::max_element(row, row + s.sk);
    float total = 0.0f;
    for (int64_t j = 0; j < s.sk; ++j) total += row[j] = std::exp(row[j] - row_max);
    for (int64_t j = 0; j < s.sk; ++j) row[j] /= total;
  }
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t i = 0; i < s.sq; ++i) {
      float* out = &p.out[(b * s.sq + i) * s.d];
      for (int64_t c = 0; c < s.d; ++c) out[c] = 0.0f;
      for (int64_t j = 0; j < s.sk; ++j) {
        const float* x = &p.x[(b * s.sk + j) * s.d];
        for (int64_t c = 0; c < s.d; ++c) out[c] += probs[i * s.sk + j] * x[c];
      }
    }
}

attention::Status ours(const StaticShape& s, StaticProblem& p) {
  using attention::TensorView;
  const TensorView x = TensorView::contiguous(p.x.data(), {s.b, s.sk, s.d});
  const TensorView out = TensorView::contiguous(p.out.data(), {s.b, s.sq, s.d});
  if (s.r == 0) {
    return attention::static_attention(TensorView::contiguous(p.w.data(), {s.sq, s.sk}), x, out);
  }
  return attention::factorized_static_attention(TensorView::contiguous(p.w1.data(), {s.sq, s.r}),
                                                TensorView::contiguous(p.w2.data(), {s.r, s.sk}), x,
                                                out);
}

// What the loops need besides the problem (one row's weights; static: the whole softmax), and how
// closely ours must agree with them.
std::vector<float> scratch_for(const RegressionShape& s) { return std::vector<float>(s.sk); }
std::vector<float> scratch_for(const FormShape& s) { return std::vector<float>(s.sk); }
std::vector<float> scratch_for(const StaticShape& s) { return std::vector<float>(s.sq * s.sk); }
// Loose for kernel regression: a boxcar key at the edge may fall either side under another
// rounding.
float tolerance(const RegressionShape&) { return 1e-2f; }
float tolerance(const FormShape&) { return 1e-3f; }
float tolerance(const StaticShape&) { return 1e-3f; }

template <typename Shape>
void BM_Ours(benchmark::State& state, Shape s) {
  auto p = make_problem(s), check = p;
  std::vector<float> scratch = scratch_for(s);
  naive(s, check, scratch);
  time_if_agreeing(
      state, [&] { return ours(s, p); }, p.out, check.out, tolerance(s));
  report(state, s, "ours");
}

template <typename Shape>
void BM_Naive(benchmark::State& state, Shape s) {
  auto p = make_problem(s);
  std::vector<float> scratch = scratch_for(s);
  for (auto _ : state) {
    naive(s, p, scratch);
    benchmark::ClobberMemory();
  }
  report(state, s, "naive");
}

// "group/ours/name" and "group/naive/name", timed alike.
template <typename Shape>
void register_pair(const std::string& group, const std::string& name,
                   void (*ours)(benchmark::State&, Shape), void (*naive)(benchmark::State&, Shape),
                   const Shape& shape) {
  for (auto [impl, fn] : {std::pair{"ours", ours}, std::pair{"naive", naive}}) {
    benchmark::RegisterBenchmark((group + "/" + impl + "/" + name).c_str(), fn, shape)
        ->UseRealTime()
        ->MinWarmUpTime(0.2)
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (!bench::initialize(&argc, argv)) return 1;
  for (const RegressionShape& s : kShapes) {
    register_pair("nadaraya_watson", shape_name(s), BM_Ours<RegressionShape>,
                  BM_Naive<RegressionShape>, s);
  }
  for (const FormShape& s : kFormShapes) {
    register_pair("forms", form_shape_name(s), BM_Ours<FormShape>, BM_Naive<FormShape>, s);
  }
  for (const StaticShape& s : kStaticShapes) {
    register_pair("forms", static_shape_name(s), BM_Ours<StaticShape>, BM_Naive<StaticShape>, s);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
