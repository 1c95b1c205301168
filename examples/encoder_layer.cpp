// A transformer encoder layer (post-norm, as in "Attention Is All You Need") on a toy batch of two
// token sequences of different lengths: token embeddings + sinusoidal positions, multi-head
// self-attention through attention::multi_head_attention (the padding keys of the shorter sequence
// hidden by key_lengths), residual + layer norm, a GELU feed-forward network, residual + layer
// norm. Everything but the attention is plain loops: the library's job is attention. The whole
// layer is then recomputed in double precision with this file's own attention loops, and the two
// outputs are compared.
//
//   encoder_layer [seed]
//
// Without a seed, tokens and weights are fresh random each run; the seed is printed so that a run
// can be repeated. Prints the max abs error against the double layer and PASS or FAIL; exit status
// 1 on FAIL or on an error from the library.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.h"

namespace {

constexpr int64_t kBatch = 2, kSeq = 12, kVocab = 50;
constexpr int64_t kModel = 64, kHeads = 4, kHeadDim = kModel / kHeads, kHidden = 256;
constexpr int32_t kLengths[kBatch] = {12, 7};  // the second sequence is padded up to kSeq
constexpr int kPadToken = 0;
constexpr double kNormEpsilon = 1e-5;

// PyTorch's layouts: W [out, in] with y = x·Wᵀ + b; in_proj_weight stacks W_q, W_k, W_v.
struct EncoderWeights {
  std::vector<float> embedding;                       // [kVocab, kModel]
  std::vector<float> in_proj_weight, in_proj_bias;    // [3·kModel, kModel], [3·kModel]
  std::vector<float> out_proj_weight, out_proj_bias;  // [kModel, kModel], [kModel]
  std::vector<float> norm1_gain, norm1_bias;          // [kModel]
  std::vector<float> ffn1_weight, ffn1_bias;          // [kHidden, kModel], [kHidden]
  std::vector<float> ffn2_weight, ffn2_bias;          // [kModel, kHidden], [kModel]
  std::vector<float> norm2_gain, norm2_bias;          // [kModel]
};

std::vector<float> uniform_vector(std::mt19937& rng, int64_t n, float bound, float offset = 0.0f) {
  std::uniform_real_distribution<float> uniform(offset - bound, offset + bound);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = uniform(rng);
  return v;
}

// nn.Linear's initialization (uniform in ±1/sqrt(fan_in)); gains near 1 so the norms do something.
EncoderWeights random_weights(std::mt19937& rng) {
  const float model_bound = 1.0f / std::sqrt(float(kModel));
  const float hidden_bound = 1.0f / std::sqrt(float(kHidden));
  EncoderWeights w;
  std::normal_distribution<float> normal;
  w.embedding.resize(kVocab * kModel);
  for (float& x : w.embedding) x = normal(rng);
  w.in_proj_weight = uniform_vector(rng, 3 * kModel * kModel, model_bound);
  w.in_proj_bias = uniform_vector(rng, 3 * kModel, model_bound);
  w.out_proj_weight = uniform_vector(rng, kModel * kModel, model_bound);
  w.out_proj_bias = uniform_vector(rng, kModel, model_bound);
  w.norm1_gain = uniform_vector(rng, kModel, 0.1f, 1.0f);
  w.norm1_bias = uniform_vector(rng, kModel, 0.1f);
  w.ffn1_weight = uniform_vector(rng, kHidden * kModel, model_bound);
  w.ffn1_bias = uniform_vector(rng, kHidden, model_bound);
  w.ffn2_weight = uniform_vector(rng, kModel * kHidden, hidden_bound);
  w.ffn2_bias = uniform_vector(rng, kModel, hidden_bound);
  w.norm2_gain = uniform_vector(rng, kModel, 0.1f, 1.0f);
  w.norm2_bias = uniform_vector(rng, kModel, 0.1f);
  return w;
}

// PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).
double positional_encoding(int64_t pos, int64_t feature, int64_t width) {
  const double angle = pos / std::pow(10000.0, double(feature - feature % 2) / width);
  return feature % 2 == 0 ? std::sin(angle) : std::cos(angle);
}

// y [rows, out] = x [rows, in] · Wᵀ + b (nn.Linear), accumulated in T.
template <typename T>
std::vector<T> linear(const std::vector<T>& x, const std::vector<float>& weight,
                      const std::vector<float>& bias, int64_t in, int64_t out) {
  const int64_t rows = static_cast<int64_t>(x.size()) / in;
  std::vector<T> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      T sum = bias[o];
      for (int64_t i = 0; i < in; ++i) sum += x[r * in + i] * T(weight[o * in + i]);
      y[r * out + o] = sum;
    }
  }
  return y;
}

// LayerNorm(x + sublayer) per row: the residual connection and its normalization.
template <typename T>
std::vector<T> add_and_norm(const std::vector<T>& x, const std::vector<T>& sublayer,
                            const std::vector<float>& gain, const std::vector<float>& bias) {
  std::vector<T> y(x.size());
  for (size_t row = 0; row < x.size(); row += kModel) {
    T mean = 0, variance = 0;
    for (int64_t e = 0; e < kModel; ++e) mean += (y[row + e] = x[row + e] + sublayer[row + e]);
    mean /= kModel;
    for (int64_t e = 0; e < kModel; ++e) variance += (y[row + e] - mean) * (y[row + e] - mean);
    const T inv_std = T(1) / std::sqrt(variance / kModel + T(kNormEpsilon));
    for (int64_t e = 0; e < kModel; ++e) {
      y[row + e] = (y[row + e] - mean) * inv_std * gain[e] + bias[e];
    }
  }
  return y;
}

// The exact GELU, 0.5·x·(1 + erf(x/√2)) (PyTorch's default).
template <typename T>
T gelu(T x) {
  return T(0.5) * x * (T(1) + std::erf(x / std::sqrt(T(2))));
}

template <typename T>
std::vector<T> feed_forward(const std::vector<T>& x, const EncoderWeights& w) {
  std::vector<T> hidden = linear(x, w.ffn1_weight, w.ffn1_bias, kModel, kHidden);
  for (T& h : hidden) h = gelu(h);
  return linear(hidden, w.ffn2_weight, w.ffn2_bias, kHidden, kModel);
}

// The layer after its attention: h = LN(x + attended), out = LN(h + FFN(h)).
template <typename T>
std::vector<T> finish_layer(const std::vector<T>& x, const std::vector<T>& attended,
                            const EncoderWeights& w) {
  const std::vector<T> h = add_and_norm(x, attended, w.norm1_gain, w.norm1_bias);
  return add_and_norm(h, feed_forward(h, w), w.norm2_gain, w.norm2_bias);
}

// The library reads its inputs only, but views hold non-const pointers.
attention::TensorView view(const std::vector<float>& t, std::initializer_list<int64_t> shape) {
  return attention::TensorView::contiguous(const_cast<float*>(t.data()), shape);
}

// The layer in fp32, its attention block (projections included) in one library call.
bool library_layer(const std::vector<float>& x, const EncoderWeights& w, std::vector<float>* out) {
  attention::MhaWeights mha;
  mha.in_proj_weight = view(w.in_proj_weight, {3 * kModel, kModel});
  mha.in_proj_bias = view(w.in_proj_bias, {3 * kModel});
  mha.out_proj_weight = view(w.out_proj_weight, {kModel, kModel});
  mha.out_proj_bias = view(w.out_proj_bias, {kModel});
  std::vector<int32_t> lengths(kLengths, kLengths + kBatch);
  attention::MhaOptions options;
  options.num_heads = kHeads;
  options.mask.key_lengths =
      attention::TensorView::contiguous(lengths.data(), attention::DType::Int32, {kBatch});

  std::vector<float> attended(x.size(), NAN);
  const attention::TensorView xv = view(x, {kBatch, kSeq, kModel});
  const attention::Status status =
      attention::multi_head_attention(xv, xv, mha, view(attended, {kBatch, kSeq, kModel}), options);
  if (!status.ok()) {
    std::fprintf(stderr, "multi_head_attention: %s\n", status.message().c_str());
    return false;
  }
  *out = finish_layer(x, attended, w);
  return true;
}

// The reference attention block in double, independent of the library: the same projections, then
// softmax(Q·Kᵀ/√D)·V per head over the keys before the sequence's length, then W_o.
std::vector<double> reference_self_attention(const std::vector<double>& x,
                                             const EncoderWeights& w) {
  // Each row of qkv is [q | k | v] of one position (in_proj_weight stacks W_q, W_k, W_v).
  const std::vector<double> qkv = linear(x, w.in_proj_weight, w.in_proj_bias, kModel, 3 * kModel);
  auto at = [&](int64_t b, int64_t s, int64_t part, int64_t h) {
    return &qkv[static_cast<size_t>((b * kSeq + s) * 3 * kModel + part * kModel + h * kHeadDim)];
  };
  const double scale = 1.0 / std::sqrt(double(kHeadDim));
  std::vector<double> heads(x.size()), weights(kSeq);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t h = 0; h < kHeads; ++h) {
      for (int64_t i = 0; i < kSeq; ++i) {
        double row_max = -INFINITY, sum = 0;
        for (int64_t j = 0; j < kLengths[b]; ++j) {
          double score = 0;
          for (int64_t d = 0; d < kHeadDim; ++d) score += at(b, i, 0, h)[d] * at(b, j, 1, h)[d];
          weights[j] = scale * score;
          row_max = std::max(row_max, weights[j]);
        }
        for (int64_t j = 0; j < kLengths[b]; ++j) {
          sum += (weights[j] = std::exp(weights[j] - row_max));
        }
        for (int64_t d = 0; d < kHeadDim; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < kLengths[b]; ++j) acc += weights[j] * at(b, j, 2, h)[d];
          heads[(b * kSeq + i) * kModel + h * kHeadDim + d] = acc / sum;
        }
      }
    }
  }
  return linear(heads, w.out_proj_weight, w.out_proj_bias, kModel, kModel);
}

}  // namespace

int main(int argc, char** argv) {
  unsigned seed = std::random_device{}();
  if (argc > 1) {
    char* end = nullptr;
    seed = static_cast<unsigned>(std::strtoul(argv[1], &end, 10));
    if (argc > 2 || *end != '\0') {
      std::fprintf(stderr, "usage: %s [seed]\n", argv[0]);
      return 1;
    }
  }
  std::printf(
      "encoder layer: batch %lld (lengths %d, %d of %lld), model %lld, %lld heads, "
      "FFN %lld, seed %u\n",
      (long long)kBatch, kLengths[0], kLengths[1], (long long)kSeq, (long long)kModel,
      (long long)kHeads, (long long)kHidden, seed);
  std::mt19937 rng(seed);
  const EncoderWeights w = random_weights(rng);

  // Input: embedding of each token + its position; the padding of the shorter sequence included
  // (its rows are computed like any other, and its keys are hidden from every query).
  std::uniform_int_distribution<int> token_of(1, kVocab - 1);
  std::vector<float> x(kBatch * kSeq * kModel);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t s = 0; s < kSeq; ++s) {
      const int token = s < kLengths[b] ? token_of(rng) : kPadToken;
      for (int64_t e = 0; e < kModel; ++e) {
        x[(b * kSeq + s) * kModel + e] =
            float(w.embedding[token * kModel + e] + positional_encoding(s, e, kModel));
      }
    }
  }

  std::vector<float> out;
  if (!library_layer(x, w, &out)) return 1;
  const std::vector<double> x64(x.begin(), x.end());
  const std::vector<double> expected = finish_layer(x64, reference_self_attention(x64, w), w);

  double max_error = 0, max_ref = 0;
  for (size_t n = 0; n < out.size(); ++n) {
    const double error = std::abs(out[n] - expected[n]);
    max_error = std::isnan(error) ? INFINITY : std::max(max_error, error);
    max_ref = std::max(max_ref, std::abs(expected[n]));
  }
  // fp32 through two layer norms and the FFN: a few ulps per op, far below 1e-4 of the scale.
  const double tolerance = 1e-4 * std::max(1.0, max_ref);
  const bool pass = max_error <= tolerance;
  std::printf("output [%lld, %lld, %lld], max |out| %.3f\n", (long long)kBatch, (long long)kSeq,
              (long long)kModel, max_ref);
  std::printf("max abs error vs the double-precision layer: %.2e (tolerance %.1e)\n", max_error,
              tolerance);
  std::printf("%s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
