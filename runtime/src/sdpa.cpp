// scaled_dot_product_attention: argument checks, then dispatch to a generated kernel.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attention/attention.h"
#include "halide_view.h"
#include "kernel_choice.h"
#include "sdpa_f32_decode.h"
#include "sdpa_f32_masked_decode.h"
#include "sdpa_f32_masked_prefill.h"
#include "sdpa_f32_prefill.h"
#include "tensor_util.h"
#include "validate.h"

namespace attention {
namespace {

using detail::ExpectedDim;

// The masked kernels compute diagonal offsets and band ends in int32.
constexpr int64_t kMaxMaskedSeq = int64_t(1) << 29;

Status check_lengths(const TensorView& lengths, const char* name, int64_t B, const char* bound,
                     int64_t limit) {
  if (lengths.data == nullptr) return Status::ok_status();
  ATTENTION_RETURN_IF_ERROR(detail::check_view(lengths, name, 1, "[B]", DType::Int32));
  ATTENTION_RETURN_IF_ERROR(detail::check_shape(lengths, name, {{"B", B}}));
  const auto* values = static_cast<const int32_t*>(lengths.data);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = values[b * lengths.strides[0]];
    if (n < 0 || n > limit) {
      return Status::invalid(std::string(name) + "[" + std::to_string(b) +
                             "] = " + std::to_string(n) + " is outside [0, " + bound + "=" +
                             std::to_string(limit) + "]");
    }
  }
  return Status::ok_status();
}

// A [B|1, H|1, Sq, Sk] mask tensor of `dtype`, any strides.
Status check_mask_tensor(const TensorView& t, const char* name, DType dtype, int64_t B, int64_t H,
                         int64_t Sq, int64_t Sk) {
  if (t.data == nullptr && t.rank == 0) return Status::ok_status();
  ATTENTION_RETURN_IF_ERROR(
      detail::check_view(t, name, 4, "[B|1, H|1, Sq, Sk]", dtype, /*any_strides=*/true));
  const bool ok = (t.shape[0] == B || t.shape[0] == 1) && (t.shape[1] == H || t.shape[1] == 1) &&
                  t.shape[2] == Sq && t.shape[3] == Sk;
  if (ok) return Status::ok_status();
  return Status::invalid(std::string(name) + ": expected shape [B|1, H|1, Sq, Sk] = [" +
                         std::to_string(B) + "|1, " + std::to_string(H) + "|1, " +
                         std::to_string(Sq) + ", " + std::to_string(Sk) + "], got " +
                         detail::shape_string(t));
}

Status check_mask(const MaskOptions& m, int64_t B, int64_t H, int64_t Sq, int64_t Sk) {
  if (m.causal != Causal::None && m.causal != Causal::TopLeft && m.causal != Causal::BottomRight) {
    return Status::invalid("mask.causal: not a Causal value (None, TopLeft or BottomRight)");
  }
  if (m.window < -1) {
    return Status::invalid(
        "mask.window: must be >= 0 (keys back from the diagonal) or -1 (no "
        "window), got " +
        std::to_string(m.window));
  }
  if (m.window_forward < 0) {
    return Status::invalid("mask.window_forward: must be >= 0, got " +
                           std::to_string(m.window_forward));
  }
  if ((m.window >= 0 || m.window_forward > 0) && m.causal == Causal::None) {
    return Status::invalid(std::string(m.window >= 0 ? "mask.window" : "mask.window_forward") +
                           ": a sliding window needs mask.causal = TopLeft or BottomRight to name "
                           "its diagonal");
  }
  if (!m.empty() && (Sq >= kMaxMaskedSeq || Sk >= kMaxMaskedSeq)) {
    return Status::invalid("mask: masked attention supports Sq and Sk below 2^29, got Sq=" +
                           std::to_string(Sq) + ", Sk=" + std::to_string(Sk));
  }
  ATTENTION_RETURN_IF_ERROR(check_lengths(m.key_lengths, "mask.key_lengths", B, "Sk", Sk));
  ATTENTION_RETURN_IF_ERROR(check_lengths(m.query_lengths, "mask.query_lengths", B, "Sq", Sq));
  ATTENTION_RETURN_IF_ERROR(
      check_mask_tensor(m.bool_mask, "mask.bool_mask", DType::Bool, B, H, Sq, Sk));
  ATTENTION_RETURN_IF_ERROR(
      check_mask_tensor(m.additive_mask, "mask.additive_mask", DType::Float32, B, H, Sq, Sk));
  if (m.alibi_slopes.data != nullptr || m.alibi_slopes.rank != 0) {
    if (!m.alibi) return Status::invalid("mask.alibi_slopes: given but mask.alibi is false");
    ATTENTION_RETURN_IF_ERROR(detail::check_view(m.alibi_slopes, "mask.alibi_slopes", 1, "[H]"));
    ATTENTION_RETURN_IF_ERROR(detail::check_shape(m.alibi_slopes, "mask.alibi_slopes", {{"H", H}}));
    const auto* slopes = static_cast<const float*>(m.alibi_slopes.data);
    for (int64_t h = 0; h < H; ++h) {
      if (!std::isfinite(slopes[h * m.alibi_slopes.strides[0]])) {
        return Status::invalid("mask.alibi_slopes[" + std::to_string(h) + "]: must be finite");
      }
    }
  }
  if (!(m.softcap >= 0.0f) || !std::isfinite(m.softcap)) {
    return Status::invalid("mask.softcap: must be 0 (off) or a finite value > 0, got " +
                           std::to_string(m.softcap));
  }
  return Status::ok_status();
}

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
  const MaskOptions& m = options.mask;
  ATTENTION_RETURN_IF_ERROR(check_mask(m, B, H, Sq, Sk));
  // Every input an output must not overlap (absent mask views are empty and never overlap).
  std::vector<detail::NamedView> inputs = {{&q, "q"},
                                           {&k, "k"},
                                           {&v, "v"},
                                           {&m.key_lengths, "mask.key_lengths"},
                                           {&m.query_lengths, "mask.query_lengths"},
                                           {&m.bool_mask, "mask.bool_mask"},
                                           {&m.additive_mask, "mask.additive_mask"},
                                           {&m.alibi_slopes, "mask.alibi_slopes"}};
  ATTENTION_RETURN_IF_ERROR(detail::check_output_memory(out, "out", inputs));
  const TensorView& lse = options.logsumexp;
  if (lse.data != nullptr) {
    ATTENTION_RETURN_IF_ERROR(detail::check_view(lse, "logsumexp", 3, "[B, H, Sq]"));
    ATTENTION_RETURN_IF_ERROR(
        detail::check_shape(lse, "logsumexp", {{"B", B}, {"H", H}, {"Sq", Sq}}));
    inputs.insert(inputs.begin(), {&out, "out"});
    ATTENTION_RETURN_IF_ERROR(detail::check_output_memory(lse, "logsumexp", inputs));
  }
  return Status::ok_status();
}

// ALiBi's default slopes (Press et al.): 2^(-8(h+1)/n) for n a power of two; otherwise those of
// the largest power of two below H, then every other slope of twice that count.
std::vector<float> default_alibi_slopes(int64_t H) {
  auto geometric = [](int64_t n) {
    std::vector<float> s(static_cast<size_t>(n));
    for (int64_t h = 0; h < n; ++h) s[h] = static_cast<float>(std::exp2(-8.0 * (h + 1) / n));
    return s;
  };
  int64_t n = 1;
  while (n * 2 <= H) n *= 2;
  std::vector<float> slopes = geometric(n);
  const std::vector<float> finer = geometric(2 * n);
  for (int64_t h = 0; slopes.size() < static_cast<size_t>(H); h += 2) slopes.push_back(finer[h]);
  return slopes;
}

// A mask tensor as the kernel reads it: [B, H, Sq, Sk] with stride 0 on broadcast dims, or, when
// absent, one neutral element repeated everywhere.
TensorView kernel_mask_view(const TensorView& t, const void* neutral, DType dtype, int64_t B,
                            int64_t H, int64_t Sq, int64_t Sk) {
  TensorView view = t;
  if (t.data == nullptr) {
    view = TensorView{};
    view.data = const_cast<void*>(neutral);
    view.dtype = dtype;
    view.rank = 4;
  }
  view.shape = {B, H, Sq, Sk};
  for (int d = 0; d < 2; ++d) {
    if (t.data == nullptr || t.shape[d] == 1) view.strides[d] = 0;
  }
  return view;
}

std::vector<int32_t> lengths_or(const TensorView& lengths, int64_t B, int64_t full) {
  std::vector<int32_t> out(static_cast<size_t>(B), static_cast<int32_t>(full));
  if (lengths.data == nullptr) return out;
  for (int64_t b = 0; b < B; ++b) {
    out[b] = static_cast<const int32_t*>(lengths.data)[b * lengths.strides[0]];
  }
  return out;
}

Status run_masked(const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out, const TensorView& lse, float scale, const MaskOptions& m) {
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2], Sk = k.shape[2];
  std::vector<int32_t> key_lengths = lengths_or(m.key_lengths, B, Sk);
  std::vector<int32_t> query_lengths = lengths_or(m.query_lengths, B, Sq);
  // "Unbounded" band ends: any distance beyond Sq + Sk reaches every key.
  const int64_t unbounded = Sq + Sk;
  // ALiBi without causal measures from the bottom-right diagonal, like the band would.
  const int32_t diag_offset = m.causal == Causal::TopLeft ? 0 : static_cast<int32_t>(Sk - Sq);
  const auto band_back =
      static_cast<int32_t>(m.window >= 0 ? std::min(m.window, unbounded) : unbounded);
  const auto band_forward = static_cast<int32_t>(
      m.causal != Causal::None ? std::min(m.window_forward, unbounded) : unbounded);
  std::vector<float> slopes(static_cast<size_t>(H), 0.0f);
  if (m.alibi && m.alibi_slopes.data != nullptr) {
    for (int64_t h = 0; h < H; ++h) {
      slopes[h] = static_cast<const float*>(m.alibi_slopes.data)[h * m.alibi_slopes.strides[0]];
    }
  } else if (m.alibi) {
    slopes = default_alibi_slopes(H);
  }
  const bool has_bias =
      m.bool_mask.data != nullptr || m.additive_mask.data != nullptr || m.alibi || m.softcap > 0.0f;
  static const uint8_t kAllowed = 1;
  static const float kNoBias = 0.0f;
  detail::HalideView hq(q), hk(k), hv(v), hout(out), hlse(lse);
  detail::HalideView hkl(TensorView::contiguous(key_lengths.data(), DType::Int32, {B}));
  detail::HalideView hql(TensorView::contiguous(query_lengths.data(), DType::Int32, {B}));
  detail::HalideView hslopes(TensorView::contiguous(slopes.data(), {H}));
  detail::HalideView hbool(kernel_mask_view(m.bool_mask, &kAllowed, DType::Bool, B, H, Sq, Sk));
  detail::HalideView hadd(
      kernel_mask_view(m.additive_mask, &kNoBias, DType::Float32, B, H, Sq, Sk));
  if (Sq > detail::kDecodeMaxQueries) {
    // A non-finite v at a hidden key would reach rows through 0 · NaN; the kernel's plain P·V is
    // only safe without them (decode always takes the safe form).
    const bool values_finite = detail::all_finite(v);
    return detail::run_kernel("sdpa_f32_masked_prefill", sdpa_f32_masked_prefill, hq.get(),
                              hk.get(), hv.get(), scale, hkl.get(), hql.get(), diag_offset,
                              band_back, band_forward, has_bias, hbool.get(), hadd.get(),
                              hslopes.get(), m.softcap, values_finite,
                              detail::prefill_key_split(Sk), hout.get(), hlse.get());
  }
  return detail::run_kernel(
      "sdpa_f32_masked_decode", sdpa_f32_masked_decode, hq.get(), hk.get(), hv.get(), scale,
      hkl.get(), hql.get(), diag_offset, band_back, band_forward, has_bias, hbool.get(), hadd.get(),
      hslopes.get(), m.softcap, false, detail::decode_key_split(B, H, Sk), hout.get(), hlse.get());
}

}  // namespace

Status scaled_dot_product_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const TensorView& out, const SdpaOptions& options) {
  ATTENTION_RETURN_IF_ERROR(check_sdpa_args(q, k, v, out, options));
  if (out.numel() == 0) return Status::ok_status();  // B, H or Sq is 0
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2], D = q.shape[3];
  if (k.shape[2] == 0) {  // no keys: every row is fully masked
    detail::write_rows_without_keys(out, options.logsumexp);
    return Status::ok_status();
  }
  std::vector<float> lse_scratch;
  const TensorView lse = detail::stats_or_scratch(options.logsumexp, {B, H, Sq}, lse_scratch);
  const float scale = options.scale.value_or(1.0f / std::sqrt(static_cast<float>(D)));
  if (!options.mask.empty()) return run_masked(q, k, v, out, lse, scale, options.mask);
  detail::HalideView hq(q), hk(k), hv(v), hout(out), hlse(lse);
  if (Sq > detail::kDecodeMaxQueries) {
    return detail::run_kernel("sdpa_f32_prefill", sdpa_f32_prefill, hq.get(), hk.get(), hv.get(),
                              scale, detail::prefill_key_split(k.shape[2]), hout.get(), hlse.get());
  }
  return detail::run_kernel("sdpa_f32_decode", sdpa_f32_decode, hq.get(), hk.get(), hv.get(), scale,
                            detail::decode_key_split(B, H, k.shape[2]), hout.get(), hlse.get());
}

}  // namespace attention
