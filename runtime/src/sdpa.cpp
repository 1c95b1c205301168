// scaled_dot_product_attention: argument checks, then dispatch to a generated kernel.
#include <cmath>
#include <limits>
#include <vector>

#include "attention/attention.h"
#include "halide_view.h"
#include "sdpa_f32_decode.h"
#include "sdpa_f32_prefill.h"
#include "validate.h"

namespace attention {
namespace {

using detail::ExpectedDim;

// Up to this many query rows the decode kernel (dot products along d, no query reuse) beats the
// prefill kernel (register blocks of 16-48 queries); measured crossover on AVX2 at Sk = 4096,
// D = 128: Sq = 1: 7.5 vs 13.3 ms, Sq = 2: 10.0 vs 13.7, Sq = 3: 14.6 vs 12.6, Sq = 8: 17.7
// vs 14.0.
constexpr int64_t kDecodeMaxQueries = 2;

Status check_sdpa_args(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const SdpaOptions& options) {
  ATTENTION_RETURN_IF_ERROR(detail::check_view(q, "q", 4, "[B, H, Sq, D]"));
  ATTENTION_RETURN_IF_ERROR(detail::check_view(k, "k", 4, "[B, Hkv, Sk, D]"));
  ATTENTION_RETURN_IF_ERROR(detail::check_view(v, "v", 4, "[B, Hkv, Sk, Dv]"));
  ATTENTION_RETURN_IF_ERROR(detail::check_view(out, "out", 4, "[B, H, Sq, Dv]"));
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2], D = q.shape[3];
  const int64_t Hkv = k.shape[1], Sk = k.shape[2], Dv = v.shape[3];
  if (D == 0)
    return Status::invalid("q: head dim D must be >= 1, got shape " + detail::shape_string(q));
  ATTENTION_RETURN_IF_ERROR(
      detail::check_shape(k, "k", {{"B", B}, {"Hkv", -1}, {"Sk", -1}, {"D", D}}));
  ATTENTION_RETURN_IF_ERROR(
      detail::check_shape(v, "v", {{"B", B}, {"Hkv", Hkv}, {"Sk", Sk}, {"Dv", -1}}));
  if (Dv == 0)
    return Status::invalid("v: head dim Dv must be >= 1, got shape " + detail::shape_string(v));
  if (Hkv == 0 ? H != 0 : H % Hkv != 0) {
    return Status::invalid("k: kv heads Hkv=" + std::to_string(Hkv) +
                           " must divide the query heads H=" + std::to_string(H) +
                           " (grouped-query attention)");
  }
  ATTENTION_RETURN_IF_ERROR(
      detail::check_shape(out, "out", {{"B", B}, {"H", H}, {"Sq", Sq}, {"Dv", Dv}}));
  if (options.scale && !std::isfinite(*options.scale)) {
    return Status::invalid("scale: must be finite, got " + std::to_string(*options.scale));
  }
  ATTENTION_RETURN_IF_ERROR(
      detail::check_output_memory(out, "out", {{&q, "q"}, {&k, "k"}, {&v, "v"}}));
  const TensorView& lse = options.logsumexp;
  if (lse.data != nullptr) {
    ATTENTION_RETURN_IF_ERROR(detail::check_view(lse, "logsumexp", 3, "[B, H, Sq]"));
    ATTENTION_RETURN_IF_ERROR(
        detail::check_shape(lse, "logsumexp", {{"B", B}, {"H", H}, {"Sq", Sq}}));
    ATTENTION_RETURN_IF_ERROR(detail::check_output_memory(
        lse, "logsumexp", {{&out, "out"}, {&q, "q"}, {&k, "k"}, {&v, "v"}}));
  }
  return Status::ok_status();
}

// Writes `value` to every element of a (validated, rank <= 4) view.
void fill(const TensorView& t, float value) {
  std::array<int64_t, kMaxRank> shape{1, 1, 1, 1}, strides{0, 0, 0, 0};
  const int pad = kMaxRank - t.rank;
  for (int d = 0; d < t.rank; ++d) {
    shape[pad + d] = t.shape[d];
    strides[pad + d] = t.strides[d];
  }
  auto* base = static_cast<float*>(t.data);
  for (int64_t a = 0; a < shape[0]; ++a)
    for (int64_t b = 0; b < shape[1]; ++b)
      for (int64_t c = 0; c < shape[2]; ++c)
        for (int64_t d = 0; d < shape[3]; ++d)
          base[a * strides[0] + b * strides[1] + c * strides[2] + d * strides[3]] = value;
}

}  // namespace

Status scaled_dot_product_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const TensorView& out, const SdpaOptions& options) {
  ATTENTION_RETURN_IF_ERROR(check_sdpa_args(q, k, v, out, options));
  const bool want_lse = options.logsumexp.data != nullptr;
  if (out.numel() == 0) return Status::ok_status();  // B, H or Sq is 0
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2], D = q.shape[3];
  if (k.shape[2] == 0) {  // no keys: every row is fully masked
    fill(out, 0.0f);
    if (want_lse) fill(options.logsumexp, -std::numeric_limits<float>::infinity());
    return Status::ok_status();
  }

  // The kernel always produces logsumexp; without a caller buffer it goes to scratch.
  std::vector<float> lse_scratch;
  TensorView lse = options.logsumexp;
  if (!want_lse) {
    lse_scratch.resize(static_cast<size_t>(B * H * Sq));
    lse = TensorView::contiguous(lse_scratch.data(), {B, H, Sq});
  }
  const float scale = options.scale.value_or(1.0f / std::sqrt(static_cast<float>(D)));
  detail::HalideView hq(q), hk(k), hv(v), hout(out), hlse(lse);
  if (Sq > kDecodeMaxQueries) {
    return detail::run_kernel("sdpa_f32_prefill", sdpa_f32_prefill, hq.get(), hk.get(), hv.get(),
                              scale, hout.get(), hlse.get());
  }
  return detail::run_kernel("sdpa_f32_decode", sdpa_f32_decode, hq.get(), hk.get(), hv.get(), scale,
                            hout.get(), hlse.get());
}

}  // namespace attention
