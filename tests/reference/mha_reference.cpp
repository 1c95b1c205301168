#include "reference/mha_reference.h"

#include "reference/sdpa_reference.h"

namespace {

double at(const attention::TensorView& t, int64_t i) {
  return static_cast<const float*>(t.data)[i * t.strides[0]];
}
double at(const attention::TensorView& t, int64_t i, int64_t j) {
  return static_cast<const float*>(t.data)[i * t.strides[0] + j * t.strides[1]];
}
double at(const attention::TensorView& t, int64_t b, int64_t s, int64_t e) {
  return static_cast<const float*>(t.data)[b * t.strides[0] + s * t.strides[1] + e * t.strides[2]];
}

// y [B, S, N] = x·Wᵀ + b in double, x a float view or (x_double) a dense double tensor.
std::vector<double> project(const attention::TensorView* x, const std::vector<double>* x_double,
                            int64_t B, int64_t S, int64_t K, const attention::TensorView& w,
                            const attention::TensorView& bias) {
  const int64_t N = w.shape[0];
  std::vector<double> y(static_cast<size_t>(B * S * N));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t n = 0; n < N; ++n) {
        double acc = bias.data != nullptr ? at(bias, n) : 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const double xv = x != nullptr ? at(*x, b, s, k) : (*x_double)[(b * S + s) * K + k];
          acc += xv * at(w, n, k);
        }
        y[(b * S + s) * N + n] = acc;
      }
  return y;
}

}  // namespace

void reference_mha(const attention::TensorView& x_q, const attention::TensorView& x_kv,
                   const ReferenceMhaWeights& w, int64_t H, int64_t Hkv, double scale,
                   const attention::MaskOptions* mask, std::vector<double>* out,
                   std::vector<double>* weights) {
  const int64_t B = x_q.shape[0], Sq = x_q.shape[1], E = x_q.shape[2];
  const int64_t Sk = x_kv.shape[1], Ekv = x_kv.shape[2], D = E / H, kv_width = Hkv * D;
  const std::vector<double> q = project(&x_q, nullptr, B, Sq, E, w.wq, w.bq);
  const std::vector<double> k = project(&x_kv, nullptr, B, Sk, Ekv, w.wk, w.bk);
  const std::vector<double> v = project(&x_kv, nullptr, B, Sk, Ekv, w.wv, w.bv);
  const int64_t group = H / Hkv;
  const PairScore score = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    double s = 0.0;
    for (int64_t d = 0; d < D; ++d) {
      s += q[(b * Sq + i) * E + h * D + d] * k[(b * Sk + j) * kv_width + (h / group) * D + d];
    }
    return scale * s;
  };
  const ValueAt value = [&](int64_t b, int64_t kv_head, int64_t j, int64_t c) {
    return v[(b * Sk + j) * kv_width + kv_head * D + c];
  };
  std::vector<double> heads_out;  // [B, H, Sq, D]
  reference_attention(score, H, Sq, value, {B, Hkv, Sk, D}, &heads_out, nullptr, mask, weights);
  std::vector<double> concat(static_cast<size_t>(B * Sq * E));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Sq; ++i)
        for (int64_t d = 0; d < D; ++d)
          concat[(b * Sq + i) * E + h * D + d] = heads_out[((b * H + h) * Sq + i) * D + d];
  *out = project(nullptr, &concat, B, Sq, E, w.wo, w.bo);
}
