// MaskOptions: validation and kernel arguments (see mask_args.h).
#include "call/mask_args.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "call/tensor_util.h"

namespace attention::detail {
namespace {

// ALiBi's default slopes (Press et al.): 2^(-8(h+1)/n) for n a power of two; otherwise those of
// the largest power of two below H, then every other slope of twice that count.
HeadSlopes default_alibi_slopes(int64_t H) {
  const auto geometric = [](int64_t h, int64_t n) {
    return static_cast<float>(std::exp2(-8.0 * (h + 1) / n));
  };
  int64_t n = 1;
  while (n * 2 <= H) n *= 2;
  HeadSlopes slopes;
  for (int64_t h = 0; h < n; ++h) slopes.push_back(geometric(h, n));
  for (int64_t h = 0; slopes.size() < static_cast<size_t>(H); h += 2)
    slopes.push_back(geometric(h, 2 * n));
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

// Rows [row, row + rows) of a kernel mask view (all of them for rows < 0).
TensorView rows_of(const TensorView& mask, int64_t row, int64_t rows) {
  return rows < 0 ? mask : slice(mask, 2, row, rows);
}

// The masked kernels compute diagonal offsets and band ends in int32.
constexpr int64_t kMaxMaskedSeq = int64_t(1) << 29;

Status check_lengths(const TensorView& lengths, const char* name, int64_t B, const char* bound,
                     int64_t limit) {
  if (lengths.data == nullptr) return Status::ok_status();
  ATTENTION_RETURN_IF_ERROR(check_view(lengths, name, 1, "[B]", DType::Int32));
  ATTENTION_RETURN_IF_ERROR(check_shape(lengths, name, {{"B", B}}));
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
                         int64_t Sq, int64_t Sk, Device device) {
  if (t.data == nullptr && t.rank == 0) return Status::ok_status();
  ATTENTION_RETURN_IF_ERROR(
      check_view(t, name, 4, "[B|1, H|1, Sq, Sk]", dtype, /*any_strides=*/true, device));
  const bool ok = (t.shape[0] == B || t.shape[0] == 1) && (t.shape[1] == H || t.shape[1] == 1) &&
                  t.shape[2] == Sq && t.shape[3] == Sk;
  if (ok) return Status::ok_status();
  return Status::invalid(std::string(name) + ": expected shape [B|1, H|1, Sq, Sk] = [" +
                         std::to_string(B) + "|1, " + std::to_string(H) + "|1, " +
                         std::to_string(Sq) + ", " + std::to_string(Sk) + "], got " +
                         shape_string(t));
}

}  // namespace

Status check_mask(const MaskOptions& m, int64_t B, int64_t H, int64_t Sq, int64_t Sk, Device device,
                  bool half_additive) {
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
      check_mask_tensor(m.bool_mask, "mask.bool_mask", DType::Bool, B, H, Sq, Sk, device));
  const DType additive = m.additive_mask.dtype;
  const bool half_ok = half_additive && is_half(additive);
  ATTENTION_RETURN_IF_ERROR(check_mask_tensor(m.additive_mask, "mask.additive_mask",
                                              half_ok ? additive : DType::Float32, B, H, Sq, Sk,
                                              device));
  if (given(m.alibi_slopes)) {
    if (!m.alibi) return Status::invalid("mask.alibi_slopes: given but mask.alibi is false");
    ATTENTION_RETURN_IF_ERROR(check_view(m.alibi_slopes, "mask.alibi_slopes", 1, "[H]"));
    ATTENTION_RETURN_IF_ERROR(check_shape(m.alibi_slopes, "mask.alibi_slopes", {{"H", H}}));
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

MaskOptions without_inert_pieces(const MaskOptions& m, int64_t B, int64_t Sq, int64_t Sk) {
  MaskOptions e = m;
  const int64_t first_diag = m.causal == Causal::TopLeft ? 0 : Sk - Sq;  // row 0's diagonal
  if (m.window >= 0 && m.window >= first_diag + Sq - 1) e.window = -1;
  // Without causal, ALiBi measures from the bottom-right diagonal.
  const bool alibi_alike = !m.alibi || first_diag == Sk - Sq;
  if (m.causal != Causal::None && e.window < 0 && m.window_forward >= Sk - 1 - first_diag &&
      alibi_alike) {
    e.causal = Causal::None;
    e.window_forward = 0;
  }
  const auto all_equal = [B](const TensorView& lengths, int64_t full) {
    if (lengths.data == nullptr) return false;
    const BatchLengths values = lengths_or(lengths, B, full);
    return std::all_of(values.begin(), values.end(), [full](int32_t n) { return n == full; });
  };
  if (all_equal(m.key_lengths, Sk)) e.key_lengths = TensorView();
  if (all_equal(m.query_lengths, Sq)) e.query_lengths = TensorView();
  return e;
}

MaskOptions mask_over_keys(const MaskOptions& m, int64_t B, int64_t Sk, int64_t begin, int64_t end,
                           BatchLengths& lengths) {
  MaskOptions cut = m;
  if (m.key_lengths.data != nullptr) {
    lengths.clear();
    for (const int64_t length : lengths_or(m.key_lengths, B, Sk))
      lengths.push_back(static_cast<int32_t>(std::clamp(length - begin, int64_t{0}, end - begin)));
    cut.key_lengths = TensorView::contiguous(lengths.data(), DType::Int32, {B});
  }
  for (TensorView* t : {&cut.bool_mask, &cut.additive_mask})
    if (t->data != nullptr) *t = slice(*t, 3, begin, end - begin);
  return cut;
}

void append_mask_views(const MaskOptions& m, NamedViews& views) {
  views.insert(views.end(), {{&m.key_lengths, "mask.key_lengths"},
                             {&m.query_lengths, "mask.query_lengths"},
                             {&m.bool_mask, "mask.bool_mask"},
                             {&m.additive_mask, "mask.additive_mask"},
                             {&m.alibi_slopes, "mask.alibi_slopes"}});
}

BatchLengths lengths_or(const TensorView& lengths, int64_t B, int64_t full) {
  BatchLengths out(static_cast<size_t>(B), static_cast<int32_t>(full));
  if (lengths.data == nullptr) return out;
  for (int64_t b = 0; b < B; ++b) {
    out[b] = static_cast<const int32_t*>(lengths.data)[b * lengths.strides[0]];
  }
  return out;
}

HeadSlopes slopes_for(const MaskOptions& m, int64_t H) {
  if (!m.alibi) return HeadSlopes(static_cast<size_t>(H), 0.0f);
  if (m.alibi_slopes.data == nullptr) return default_alibi_slopes(H);
  HeadSlopes slopes(static_cast<size_t>(H), 0.0f);
  for (int64_t h = 0; h < H; ++h) {
    slopes[h] = static_cast<const float*>(m.alibi_slopes.data)[h * m.alibi_slopes.strides[0]];
  }
  return slopes;
}

namespace {

const uint8_t kAllowed = 1;
const float kNoBias = 0.0f;

}  // namespace

// "Unbounded" band ends: any distance beyond Sq + Sk reaches every key. ALiBi without causal
// measures from the bottom-right diagonal, like the band would. A window of rows moves the
// diagonal and the query lengths by its first row, and reads its rows of the mask tensors.
Status refuse_mask_tensors(const MaskOptions& m, const char* reason) {
  for (const auto& [view, name] : {std::pair{&m.bool_mask, "mask.bool_mask"},
                                   std::pair{&m.additive_mask, "mask.additive_mask"}}) {
    if (given(*view))
      return Status::error(StatusCode::Unsupported, std::string(name) + ": " + reason);
  }
  return Status::ok_status();
}

MaskArgs::MaskArgs(const MaskOptions& m, int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t row,
                   int64_t rows)
    : diag_offset(static_cast<int32_t>((m.causal == Causal::TopLeft ? 0 : Sk - Sq) + row)),
      band_back(static_cast<int32_t>(m.window >= 0 ? std::min(m.window, Sq + Sk) : Sq + Sk)),
      band_forward(static_cast<int32_t>(
          m.causal != Causal::None ? std::min(m.window_forward, Sq + Sk) : Sq + Sk)),
      has_bias(m.bool_mask.data != nullptr || m.additive_mask.data != nullptr || m.alibi ||
               m.softcap > 0.0f),
      softcap(m.softcap),
      key_lengths_(lengths_or(m.key_lengths, B, Sk)),
      query_lengths_(lengths_or(m.query_lengths, B, Sq)),
      slopes_(slopes_for(m, H)),
      key_lengths_view_(TensorView::contiguous(key_lengths_.data(), DType::Int32, {B})),
      query_lengths_view_(TensorView::contiguous(query_lengths_.data(), DType::Int32, {B})),
      bool_mask_view_(
          rows_of(kernel_mask_view(m.bool_mask, &kAllowed, DType::Bool, B, H, Sq, Sk), row, rows)),
      additive_mask_view_(rows_of(
          kernel_mask_view(m.additive_mask, &kNoBias, DType::Float32, B, H, Sq, Sk), row, rows)),
      slopes_view_(TensorView::contiguous(slopes_.data(), {H})) {
  if (rows < 0) return;
  for (int32_t& length : query_lengths_) {
    length = static_cast<int32_t>(std::clamp<int64_t>(length - row, 0, rows));
  }
}

}  // namespace attention::detail
