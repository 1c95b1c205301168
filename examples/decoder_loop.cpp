// An autoregressive decoder loop with a KV cache. A toy one-block decoder generates tokens
// greedily; each step
//   1. embeds the newest token and adds its sinusoidal position,
//   2. projects it to q, k, v (plain loops) and appends k and v to the cache,
//   3. self-attention: attention::scaled_dot_product_attention of the one new query (Sq = 1)
//      against the t cached keys (Sk = t), Causal::BottomRight: the decode path. The query is the
//      last position, so it sees every cached key and no future one exists to hide,
//   4. cross-attention of the result to a fixed encoder output (the memory, whose keys and values
//      are projected once, before the loop),
//   5. takes the argmax of a toy output projection as the next token and feeds it back.
// Prints the tokens and tokens/s. Then it checks the cache: the whole sequence's self-attention at
// once (Sq = Sk = steps, bottom-right causal) through the library and with naive double loops
// must agree with what each step computed incrementally, the last step in particular.
//
//   decoder_loop [steps]     (default 64, at most 4096)
//
// Prints PASS or FAIL; exit status 1 on FAIL or on an error from the library.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.h"

namespace {

constexpr int64_t kVocab = 256, kModel = 128, kHeads = 4, kHeadDim = kModel / kHeads;
constexpr int64_t kMemory = 24;  // positions of the encoder output
constexpr int kStartToken = 1;

using attention::TensorView;

// Weights as nn.Linear stores them, W [out, in] with y = W·x; no biases, no norms: the toy keeps
// only what the attention calls need around them.
struct DecoderWeights {
  std::vector<float> embedding;                             // [kVocab, kModel]
  std::vector<float> self_q, self_k, self_v, self_out;      // [kModel, kModel] each
  std::vector<float> cross_q, cross_k, cross_v, cross_out;  // [kModel, kModel] each
  std::vector<float> output;                                // [kVocab, kModel]
};

std::vector<float> random_vector(std::mt19937& rng, int64_t n, float bound) {
  std::uniform_real_distribution<float> uniform(-bound, bound);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = uniform(rng);
  return v;
}

DecoderWeights random_weights(std::mt19937& rng) {
  const float bound = 1.0f / std::sqrt(float(kModel));  // nn.Linear's initialization
  DecoderWeights w;
  w.embedding = random_vector(rng, kVocab * kModel, 1.0f);
  for (std::vector<float>* m : {&w.self_q, &w.self_k, &w.self_v, &w.self_out, &w.cross_q,
                                &w.cross_k, &w.cross_v, &w.cross_out}) {
    *m = random_vector(rng, kModel * kModel, bound);
  }
  w.output = random_vector(rng, kVocab * kModel, bound);
  return w;
}

// PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).
double positional_encoding(int64_t pos, int64_t feature, int64_t width) {
  const double angle = pos / std::pow(10000.0, double(feature - feature % 2) / width);
  return feature % 2 == 0 ? std::sin(angle) : std::cos(angle);
}

// y [rows] = W [rows, kModel] · x [kModel].
std::vector<float> project(const std::vector<float>& weight, const float* x) {
  const int64_t rows = static_cast<int64_t>(weight.size()) / kModel;
  std::vector<float> y(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0.0f;
    for (int64_t e = 0; e < kModel; ++e) sum += weight[r * kModel + e] * x[e];
    y[r] = sum;
  }
  return y;
}

// x += W · heads: the attention block's output projection and its residual connection.
void add_projected(const std::vector<float>& weight, const std::vector<float>& heads,
                   std::vector<float>& x) {
  const std::vector<float> y = project(weight, heads.data());
  for (int64_t e = 0; e < kModel; ++e) x[e] += y[e];
}

// Per-head rows [1, kHeads, capacity, kHeadDim] with room for every step: the view of the first t
// rows is a strided view of the whole buffer, so appending never moves what is cached.
struct HeadRows {
  int64_t capacity;
  std::vector<float> data;

  explicit HeadRows(int64_t rows) : capacity(rows), data(kHeads * rows * kHeadDim) {}
  // Stores one position's [kModel] vector (heads side by side) as row t of every head.
  void set_row(int64_t t, const std::vector<float>& x) {
    for (int64_t h = 0; h < kHeads; ++h) {
      std::copy_n(&x[h * kHeadDim], kHeadDim, &data[(h * capacity + t) * kHeadDim]);
    }
  }
  const float* row(int64_t h, int64_t t) const {
    return data.data() + (h * capacity + t) * kHeadDim;
  }
  TensorView first(int64_t rows) {
    return TensorView::strided(data.data(), {1, kHeads, rows, kHeadDim},
                               {kHeads * capacity * kHeadDim, capacity * kHeadDim, kHeadDim, 1});
  }
};

bool attend(const char* what, const TensorView& q, const TensorView& k, const TensorView& v,
            const TensorView& out, attention::Causal causal) {
  attention::SdpaOptions options;
  options.mask.causal = causal;
  const attention::Status status = attention::scaled_dot_product_attention(q, k, v, out, options);
  if (!status.ok()) std::fprintf(stderr, "%s: %s\n", what, status.message().c_str());
  return status.ok();
}

// Naive causal attention in double, bottom-right aligned (query i sees keys j <= i + sk - sq):
// out [kHeads, sq, kHeadDim] from the first sq rows of q and the first sk of k and v.
std::vector<double> naive_causal_attention(const HeadRows& q, int64_t sq, const HeadRows& k,
                                           const HeadRows& v, int64_t sk) {
  const double scale = 1.0 / std::sqrt(double(kHeadDim));
  std::vector<double> out(kHeads * sq * kHeadDim), weights(sk);
  for (int64_t h = 0; h < kHeads; ++h) {
    for (int64_t i = 0; i < sq; ++i) {
      const int64_t visible = std::min(sk, i + sk - sq + 1);
      double row_max = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j < visible; ++j) {
        double score = 0.0;
        for (int64_t d = 0; d < kHeadDim; ++d) score += double(q.row(h, i)[d]) * k.row(h, j)[d];
        weights[j] = scale * score;
        row_max = std::max(row_max, weights[j]);
      }
      for (int64_t j = 0; j < visible; ++j) sum += (weights[j] = std::exp(weights[j] - row_max));
      for (int64_t d = 0; d < kHeadDim; ++d) {
        double acc = 0.0;
        for (int64_t j = 0; j < visible; ++j) acc += weights[j] * v.row(h, j)[d];
        out[(h * sq + i) * kHeadDim + d] = visible > 0 ? acc / sum : 0.0;
      }
    }
  }
  return out;
}

// The first `rows` rows of every head as doubles, [kHeads, rows, kHeadDim].
std::vector<double> as_double(const HeadRows& x, int64_t rows) {
  std::vector<double> out;
  for (int64_t h = 0; h < kHeads; ++h) out.insert(out.end(), x.row(h, 0), x.row(h, rows));
  return out;
}

// Max abs difference of rows [first, last) of a and b ([kHeads, rows, kHeadDim]); NaN counts as
// infinitely wrong.
double max_row_error(const std::vector<double>& a, const std::vector<double>& b, int64_t rows,
                     int64_t first, int64_t last) {
  double error = 0.0;
  for (int64_t h = 0; h < kHeads; ++h) {
    for (int64_t n = (h * rows + first) * kHeadDim; n < (h * rows + last) * kHeadDim; ++n) {
      const double e = std::abs(a[n] - b[n]);
      error = std::isnan(e) ? INFINITY : std::max(error, e);
    }
  }
  return error;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 64;
  if (argc > 1) {
    char* end = nullptr;
    steps = std::strtoll(argv[1], &end, 10);
    if (argc > 2 || *end != '\0' || steps < 1 || steps > 4096) {
      std::fprintf(stderr, "usage: %s [steps (1..4096)]\n", argv[0]);
      return 1;
    }
  }
  std::mt19937 rng(2024);
  const DecoderWeights w = random_weights(rng);

  // The memory stands in for an encoder's output; its keys and values are the same every step.
  const std::vector<float> memory = random_vector(rng, kMemory * kModel, 1.0f);
  HeadRows memory_keys(kMemory), memory_values(kMemory);
  for (int64_t m = 0; m < kMemory; ++m) {
    memory_keys.set_row(m, project(w.cross_k, &memory[m * kModel]));
    memory_values.set_row(m, project(w.cross_v, &memory[m * kModel]));
  }

  // The KV cache, plus every step's query and self-attention output, kept for the check only.
  HeadRows key_cache(steps), value_cache(steps), queries(steps), step_outputs(steps);
  std::vector<float> heads(kModel), cross_heads(kModel);  // [1, kHeads, 1, kHeadDim]
  std::vector<int> tokens = {kStartToken};
  std::vector<float> x(kModel);

  const auto start = std::chrono::steady_clock::now();
  for (int64_t t = 0; t < steps; ++t) {
    for (int64_t e = 0; e < kModel; ++e) {
      x[e] = float(w.embedding[tokens.back() * kModel + e] + positional_encoding(t, e, kModel));
    }
    std::vector<float> q = project(w.self_q, x.data());
    key_cache.set_row(t, project(w.self_k, x.data()));
    value_cache.set_row(t, project(w.self_v, x.data()));
    if (!attend("self-attention", TensorView::contiguous(q.data(), {1, kHeads, 1, kHeadDim}),
                key_cache.first(t + 1), value_cache.first(t + 1),
                TensorView::contiguous(heads.data(), {1, kHeads, 1, kHeadDim}),
                attention::Causal::BottomRight)) {
      return 1;
    }
    queries.set_row(t, q);
    step_outputs.set_row(t, heads);
    add_projected(w.self_out, heads, x);

    std::vector<float> cross_q = project(w.cross_q, x.data());
    if (!attend("cross-attention", TensorView::contiguous(cross_q.data(), {1, kHeads, 1, kHeadDim}),
                memory_keys.first(kMemory), memory_values.first(kMemory),
                TensorView::contiguous(cross_heads.data(), {1, kHeads, 1, kHeadDim}),
                attention::Causal::None)) {
      return 1;
    }
    add_projected(w.cross_out, cross_heads, x);

    const std::vector<float> logits = project(w.output, x.data());
    tokens.push_back(int(std::max_element(logits.begin(), logits.end()) - logits.begin()));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::printf("greedy decoding, %lld steps (model %lld, %lld heads, vocab %lld, memory %lld):\n",
              (long long)steps, (long long)kModel, (long long)kHeads, (long long)kVocab,
              (long long)kMemory);
  for (size_t n = 1; n < tokens.size(); ++n) {
    std::printf("%d%s", tokens[n], n % 16 == 0 || n + 1 == tokens.size() ? "\n" : " ");
  }
  std::printf("%.1f tokens/s (%.3f ms per step, %d threads, kernels for %s)\n", steps / seconds,
              seconds * 1e3 / steps, attention::num_threads(),
              attention::cpu_kernel_target().c_str());

  // The whole sequence at once: row t of the causal attention is what step t computed.
  HeadRows all_at_once(steps);
  if (!attend("self-attention of the whole sequence", queries.first(steps), key_cache.first(steps),
              value_cache.first(steps), all_at_once.first(steps), attention::Causal::BottomRight)) {
    return 1;
  }
  const std::vector<double> expected =
      naive_causal_attention(queries, steps, key_cache, value_cache, steps);
  double max_ref = 0.0;
  for (double e : expected) max_ref = std::max(max_ref, std::abs(e));
  const double tolerance = 2e-5 * std::max(1.0, max_ref);  // fp32 attention vs double loops

  const std::vector<double> incremental = as_double(step_outputs, steps);
  const std::vector<double> at_once = as_double(all_at_once, steps);
  const int64_t last = steps - 1;
  const struct {
    const char* what;
    double error;
  } checks[] = {
      {"last step vs naive double (last row)",
       max_row_error(incremental, expected, steps, last, steps)},
      {"last step vs library all at once (last row)",
       max_row_error(incremental, at_once, steps, last, steps)},
      {"every step vs naive double (its row)",
       max_row_error(incremental, expected, steps, 0, steps)},
      {"library all at once vs naive double (all rows)",
       max_row_error(at_once, expected, steps, 0, steps)},
  };
  bool pass = true;
  for (const auto& check : checks) {
    std::printf("%-46s max abs error %.2e\n", check.what, check.error);
    pass = pass && check.error <= tolerance;
  }
  std::printf("tolerance %.1e: %s\n", tolerance, pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
