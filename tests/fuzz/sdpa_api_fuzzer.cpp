// libFuzzer target: arbitrary tensor descriptors (ranks, shapes, strides, null and overlapping data
// pointers, dtype and device codes, logsumexp, scale, masks) into scaled_dot_product_attention, and
// (a sixteenth of the inputs each) arbitrary paged caches and block tables into paged_attention
// and packed batches with arbitrary prefix sums into scaled_dot_product_attention_varlen. Every
// call must either fail cleanly, leaving all memory as it was, or succeed with a result that
// matches the naive reference and writes nothing outside its outputs. Built with ASan+UBSan, so an
// out-of-bounds access or undefined behaviour anywhere in the call aborts the run.
//
// All views point into one pool, so they overlap freely. A descriptor that looks valid but reaches
// outside the pool is skipped: the library cannot know where a caller's allocation ends. Views
// may be Float16 or BFloat16 (2-byte elements from the same pointer): the pool's pattern is made
// of floats whose two 16-bit halves are moderate values in both half formats too. One input in 8
// draws 128 features where others draw 8 to 11: the decode kernels' row block and the routes
// built on it (several query rows, sequence-major caches) take D = 128 only. Its other extents
// are drawn below 6 so that its views fit the pool (drawn below 12, none ever did; a larger pool
// made every call slower and fewer valid).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "kernel_contract.h"
#include "reference/half_reference.h"
#include "reference/sdpa_reference.h"

namespace {

// Whether a plan (explain_sdpa) runs a native bf16 prefill kernel (vdpbf16ps or AMX).
bool is_native_bf16_prefill(const std::string& plan) {
  return plan.find("kernel=sdpa_bf16_prefill") != std::string::npos ||
         plan.find("kernel=sdpa_bf16_amx_prefill") != std::string::npos;
}

constexpr int64_t kPool = int64_t{1} << 14;  // floats

// This input's views draw a last extent of 128 where they would draw 8 to 11 (draw_view).
bool wide_features = false;

using attention::TensorView;

// Consumes the fuzzer's bytes; reads past the end yield zeros.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  T take() {
    T value{};
    const size_t n = std::min(sizeof(T), size_ - std::min(used_, size_));
    std::memcpy(&value, data_ + used_, n);
    used_ += sizeof(T);
    return value;
  }

 private:
  const uint8_t* data_;
  size_t size_, used_ = 0;
};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "sdpa_api_fuzzer: %s\n", what);
  std::abort();
}

// Mostly plausible descriptors (small shapes, dense strides) so valid calls happen often, with
// arbitrary ranks, sizes, strides, pointers and codes mixed in.
TensorView draw_view(Bytes& in, float* pool) {
  TensorView t;
  const uint8_t mode = in.take<uint8_t>();
  t.rank = (mode & 7) < 6 ? ((mode & 7) < 4 ? 4 : 3) : int(in.take<int8_t>());
  if (t.rank > attention::kMaxRank) t.rank = 5;  // past the arrays: must be rejected unread
  const int last = std::min(t.rank, attention::kMaxRank) - 1;
  for (int d = 0; d <= last; ++d) {
    const uint8_t extent = in.take<uint8_t>();
    t.shape[d] =
        int64_t(wide_features && d < last ? extent % 6 : extent % 12) - ((mode & 8) ? 1 : 0);
    if (wide_features && d == last && t.shape[d] >= 8)
      t.shape[d] = attention_contract::kDecodeRowBlockDim;
  }
  int64_t stride = 1;
  for (int d = std::min(t.rank, attention::kMaxRank) - 1; d >= 0; --d) {
    t.strides[d] = (mode & 16) ? int64_t(in.take<int16_t>()) : stride;
    stride *= std::max<int64_t>(t.shape[d], 1) + ((mode & 32) ? 1 : 0);
  }
  const uint16_t offset = in.take<uint16_t>();
  t.data = (mode & 64) && offset % 17 == 0 ? nullptr : pool + offset % kPool;
  if (mode & 128) {
    t.dtype = static_cast<attention::DType>(in.take<uint8_t>() % 5);
    t.device = static_cast<attention::Device>(in.take<uint8_t>() % 3);
  }
  return t;
}

bool is_half(const TensorView& t) {
  return t.dtype == attention::DType::Float16 || t.dtype == attention::DType::BFloat16;
}

// Element offsets (in floats, from the pool's start; a half view's reach counted in floats too,
// which over-states it) a plausible view touches; false when the view is not plausible (the
// library must reject it) or empty.
bool span_in_pool(const TensorView& t, const float* pool, int64_t* lo, int64_t* hi) {
  if (t.data == nullptr || t.rank < 1 || t.rank > attention::kMaxRank) return false;
  *lo = *hi = static_cast<const float*>(t.data) - pool;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] <= 0) return false;
    const int64_t reach = t.strides[d] * (t.shape[d] - 1);
    (reach < 0 ? *lo : *hi) += reach;
  }
  return true;
}

bool inside_pool(const TensorView& t, const float* pool) {
  int64_t lo = 0, hi = 0;
  return !span_in_pool(t, pool, &lo, &hi) || (lo >= 0 && hi < kPool);
}

// Calls visit(offset) for every element of a rank <= 4 view, in row-major order.
template <typename Visit>
void for_each_offset(const TensorView& t, Visit&& visit) {
  std::array<int64_t, 4> shape{1, 1, 1, 1}, strides{0, 0, 0, 0};
  for (int d = 0; d < t.rank; ++d) {
    shape[4 - t.rank + d] = t.shape[d];
    strides[4 - t.rank + d] = t.strides[d];
  }
  for (int64_t a = 0; a < shape[0]; ++a)
    for (int64_t b = 0; b < shape[1]; ++b)
      for (int64_t c = 0; c < shape[2]; ++c)
        for (int64_t d = 0; d < shape[3]; ++d)
          visit(a * strides[0] + b * strides[1] + c * strides[2] + d * strides[3]);
}

// The view's values in row-major order (half elements widened).
std::vector<float> dense(const TensorView& t) {
  std::vector<float> values;
  const auto* base = static_cast<const char*>(t.data);
  for_each_offset(t, [&](int64_t offset) {
    if (is_half(t)) {
      uint16_t bits;
      std::memcpy(&bits, base + 2 * offset, sizeof bits);
      values.push_back(from_half_bits(bits, t.dtype));
    } else {
      float value;
      std::memcpy(&value, base + 4 * offset, sizeof value);
      values.push_back(value);
    }
  });
  return values;
}

// A dense fp32 copy of an input view (the reference reads it).
TensorView widened(const TensorView& t, std::vector<float>& storage) {
  storage = dense(t);
  TensorView view = t;
  view.dtype = attention::DType::Float32;
  view.data = storage.data();
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    view.strides[d] = stride;
    stride *= t.shape[d];
  }
  return view;
}

// `dense` (a dense fp32 view over `storage`) with every value made non-negative in place.
TensorView absolute(const TensorView& dense, std::vector<float>& storage) {
  for (float& x : storage) x = std::abs(x);
  return dense;
}

// Marks the bytes of the pool a view's elements cover.
void mark(const TensorView& t, const float* pool, std::vector<bool>& written) {
  if (t.data == nullptr) return;  // an empty view (null data is allowed there)
  const int64_t size = is_half(t) ? 2 : 4;
  const int64_t base = static_cast<const char*>(t.data) - reinterpret_cast<const char*>(pool);
  for_each_offset(t, [&](int64_t offset) {
    for (int64_t byte = 0; byte < size; ++byte) written[base + offset * size + byte] = true;
  });
}

// DESIGN.md's fp32 rule, or for an output stored in a half type `half` the half rule (2x the
// rounding error of the naive loops to that type, plus a floor; `naive`: their output where it is
// not `want`); NaN must match NaN (inputs are finite here, so none is expected). `magnitude`: the
// size of what each element sums, which the relative L2 error is measured against (default
// |want|). An output row averages v with weights that sum to 1, and the pool's values have both
// signs: a row whose terms cancel (Dv = 1, a mean of 8 values in ±[0.5, 1) at -7.5e-4) carries
// fp32's rounding of the terms (1.9e-8 there), which is 2.6e-5 of the tiny sum. The test suites
// avoid such rows with positive-mean values (test_util.h, fill_values); here the L2 error is
// taken against sum_j p_j·|v_j| (the reference on |v|), which is |want| where nothing cancels.
void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                  attention::DType half = attention::DType::Float32,
                  const std::vector<double>* naive = nullptr,
                  const std::vector<double>* magnitude = nullptr) {
  if (got.size() != want.size()) fail("result size differs from the reference");
  double max_ref = 0, max_err = 0, err2 = 0, ref2 = 0, max_rounding = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) || std::isinf(want[i])) {
      if (!(std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i]))
        fail("non-finite mismatch");
      continue;
    }
    if (!std::isfinite(got[i])) fail("non-finite output where the reference is finite");
    const double err = std::abs(got[i] - want[i]);
    max_ref = std::max(max_ref, std::abs(want[i]));
    max_err = std::max(max_err, err);
    const double naive_i = naive != nullptr ? (*naive)[i] : want[i];
    max_rounding =
        std::max(max_rounding, std::abs(double(round_to(half, float(naive_i))) - want[i]));
    err2 += err * err;
    const double size = magnitude != nullptr ? (*magnitude)[i] : want[i];
    ref2 += size * size;
  }
  if (half == attention::DType::Float32) {
    if (max_err > 2e-5 * std::max(1.0, max_ref)) fail("max abs error beyond tolerance");
    if (ref2 > 0 && std::sqrt(err2 / ref2) > 1e-5) fail("relative L2 error beyond tolerance");
  } else if (max_err > 2 * max_rounding + 1e-5 * std::max(1.0, max_ref)) {
    fail("max abs error beyond the half tolerance (2x the output's rounding + floor)");
  }
}

// A drawn MaskOptions and the host lengths it points to. Causal codes outside the enum, windows
// below -1 or up to INT64_MAX, lengths of every size: invalid pieces must be rejected, valid ones
// (pieces that hide nothing, windows that cut keys, reaches past the last key) must match the
// reference.
struct DrawnMask {
  attention::MaskOptions options;
  std::vector<int32_t> key_lengths, query_lengths;
};

// A softcap in [0.5, 32.4].
float draw_softcap(Bytes& in) { return 0.5f + float(in.take<uint8_t>()) / 8; }

void draw_mask(Bytes& in, const TensorView& q, const TensorView& k, DrawnMask& mask) {
  attention::MaskOptions& m = mask.options;
  const uint8_t mode = in.take<uint8_t>();
  const uint8_t causal = mode & 3;
  m.causal = causal < 3 ? static_cast<attention::Causal>(causal)
                        : static_cast<attention::Causal>(in.take<uint8_t>());
  switch ((mode >> 2) & 3) {
    case 0:
      break;
    case 1:
      m.window = in.take<int8_t>();
      break;
    case 2:
      m.window = in.take<uint8_t>() % 16;
      break;
    default:
      m.window = in.take<int64_t>();
  }
  const uint8_t reach = in.take<uint8_t>();
  if (reach & 1) m.window_forward = (reach & 2) ? in.take<int64_t>() : in.take<uint8_t>() % 16;
  const int64_t B = q.rank == 4 ? std::clamp<int64_t>(q.shape[0], 0, 16) : 1;
  const int64_t Sq = q.rank == 4 ? std::max<int64_t>(q.shape[2], 0) : 0;
  const int64_t Sk = k.rank == 4 ? std::max<int64_t>(k.shape[2], 0) : 0;
  // Lengths: absent, all full, drawn in [0, S + 1] (S + 1 must be rejected), or any int32.
  const auto lengths = [&](uint8_t how, int64_t full, std::vector<int32_t>& values,
                           TensorView& view) {
    if (how == 0) return;
    for (int64_t b = 0; b < B; ++b) {
      values.push_back(how == 1   ? static_cast<int32_t>(full)
                       : how == 2 ? static_cast<int32_t>(in.take<uint8_t>() % (full + 2))
                                  : in.take<int32_t>());
    }
    view = TensorView::contiguous(values.data(), attention::DType::Int32, {B});
  };
  lengths((mode >> 4) & 3, Sk, mask.key_lengths, m.key_lengths);
  lengths((mode >> 6) & 3, Sq, mask.query_lengths, m.query_lengths);
  m.alibi = reach & 4;
  if (reach & 8) m.softcap = draw_softcap(in);
}

// How the calls ended, printed at exit so a run shows that every path was exercised.
struct Outcomes {
  int64_t skipped = 0, rejected = 0, computed = 0, computed_half = 0, computed_wide = 0,
          computed_masked = 0, computed_varlen = 0;
  ~Outcomes() {
    std::fprintf(stderr,
                 "sdpa_api_fuzzer: %lld calls rejected cleanly, %lld computed and matched the "
                 "reference (%lld with a Float16/BFloat16 tensor, %lld with 128 features, %lld "
                 "with a mask, %lld packed batches), %lld inputs skipped (views outside the "
                 "pool)\n",
                 (long long)rejected, (long long)computed, (long long)computed_half,
                 (long long)computed_wide, (long long)computed_masked, (long long)computed_varlen,
                 (long long)skipped);
  }
} outcomes;

// A finished call checked: a rejection carries a message and left the pool as it was (counted;
// returns true), a success wrote nothing outside `outputs` (those with data).
bool rejected_cleanly(const attention::Status& status, const std::vector<float>& pool,
                      const std::vector<float>& pattern,
                      std::initializer_list<const TensorView*> outputs, const char* api) {
  const std::string name = api;
  if (!status.ok()) {
    if (status.message().empty()) fail((name + ": error without a message").c_str());
    if (pool != pattern) fail((name + ": a rejected call wrote memory").c_str());
    ++outcomes.rejected;
    return true;
  }
  std::vector<bool> written(kPool * sizeof(float), false);
  for (const TensorView* t : outputs) mark(*t, pool.data(), written);
  const auto* now = reinterpret_cast<const unsigned char*>(pool.data());
  const auto* before = reinterpret_cast<const unsigned char*>(pattern.data());
  for (size_t i = 0; i < written.size(); ++i) {
    if (!written[i] && now[i] != before[i])
      fail((name + ": a call wrote outside its outputs").c_str());
  }
  return false;
}

// A view of the pool as it was before the call (outputs never overlap inputs); an empty view may
// have null data.
TensorView before_call(const TensorView& t, const std::vector<float>& pool,
                       const std::vector<float>& pattern) {
  TensorView view = t;
  if (t.data != nullptr)
    view.data =
        const_cast<float*>(pattern.data()) + (static_cast<const float*>(t.data) - pool.data());
  return view;
}

}  // namespace

// paged_attention with a drawn cache: pool views as drawn, a block table and lengths of arbitrary
// values (ids out of range, negative or beyond the table included). Checked as above, against
// the reference on each sequence's keys gathered by the table here.
void fuzz_paged(Bytes& in, std::vector<float>& pool, const std::vector<float>& pattern) {
  const TensorView q = draw_view(in, pool.data()), out = draw_view(in, pool.data());
  attention::PagedKvCache cache;
  cache.k = draw_view(in, pool.data());
  cache.v = draw_view(in, pool.data());
  const uint8_t flags = in.take<uint8_t>();
  cache.layout = (flags & 1) ? attention::PagedKvLayout::BlocksHeadsSlots
                             : attention::PagedKvLayout::BlocksSlotsHeads;
  const int64_t B = q.rank == 4 ? std::clamp<int64_t>(q.shape[0], 0, 8) : 1;
  const int64_t width = in.take<uint8_t>() % 5;
  std::vector<int32_t> table(static_cast<size_t>(std::max<int64_t>(B * width, 1))), lengths(B);
  for (int32_t& id : table) id = (flags & 2) ? in.take<int32_t>() : in.take<uint8_t>() % 8;
  for (int32_t& n : lengths) n = (flags & 4) ? in.take<int32_t>() : in.take<uint8_t>() % 40;
  cache.block_table = TensorView::contiguous(table.data(), attention::DType::Int32, {B, width});
  cache.seq_lens = TensorView::contiguous(lengths.data(), attention::DType::Int32, {B});
  for (const TensorView* t : {&q, &out, static_cast<const TensorView*>(&cache.k),
                              static_cast<const TensorView*>(&cache.v)}) {
    if (!inside_pool(*t, pool.data())) return void(++outcomes.skipped);
  }
  // A mask (flags & 8): bottom-right causal or none, a window (small or any int64; it may leave
  // whole blocks behind), ALiBi, a softcap; each sequence's reference applies it over its keys.
  attention::SdpaOptions options;
  if (flags & 8) {
    attention::MaskOptions& m = options.mask;
    const uint8_t mode = in.take<uint8_t>();
    m.causal = (mode & 1) ? attention::Causal::BottomRight : attention::Causal::None;
    if (mode & 2) m.window = (mode & 4) ? in.take<int64_t>() : in.take<uint8_t>() % 24;
    m.alibi = mode & 8;
    if (mode & 16) m.softcap = draw_softcap(in);
  }
  const attention::Status status = attention::paged_attention(q, cache, out, options);
  if (rejected_cleanly(status, pool, pattern, {&out}, "paged")) return;
  if (out.numel() == 0) return void(++outcomes.computed);
  auto original = [&](const TensorView& t) { return dense(before_call(t, pool, pattern)); };
  const std::vector<float> qv = original(q), kv = original(cache.k), vv = original(cache.v);
  const bool heads_outer = cache.layout == attention::PagedKvLayout::BlocksHeadsSlots;
  const int64_t H = q.shape[1], Sq = q.shape[2], D = q.shape[3], Dv = cache.v.shape[3];
  const int64_t bs = cache.k.shape[heads_outer ? 2 : 1], Hkv = cache.k.shape[heads_outer ? 1 : 2];
  auto row = [&](int64_t block, int64_t slot, int64_t h, int64_t features) {
    return (heads_outer ? (block * Hkv + h) * bs + slot : (block * bs + slot) * Hkv + h) * features;
  };
  std::vector<double> want(static_cast<size_t>(B * H * Sq * Dv)), magnitude(want.size());
  for (int64_t b = 0; b < B; ++b) {
    const int64_t Sk = lengths[b];
    std::vector<float> kb(static_cast<size_t>(Hkv * Sk * D)),
        vb(static_cast<size_t>(Hkv * Sk * Dv));
    for (int64_t h = 0; h < Hkv; ++h)
      for (int64_t j = 0; j < Sk; ++j) {
        const int64_t block = table[b * width + j / bs];
        std::copy_n(&kv[row(block, j % bs, h, D)], D, &kb[(h * Sk + j) * D]);
        std::copy_n(&vv[row(block, j % bs, h, Dv)], Dv, &vb[(h * Sk + j) * Dv]);
      }
    std::vector<double> seq_out, seq_magnitude;
    const TensorView qb =
        TensorView::contiguous(const_cast<float*>(&qv[b * H * Sq * D]), {1, H, Sq, D});
    const TensorView kt = TensorView::contiguous(kb.data(), {1, Hkv, Sk, D});
    const TensorView vt = TensorView::contiguous(vb.data(), {1, Hkv, Sk, Dv});
    reference_sdpa(qb, kt, vt, 1.0 / std::sqrt(double(D)), &seq_out, nullptr, &options.mask);
    reference_sdpa(qb, kt, absolute(vt, vb), 1.0 / std::sqrt(double(D)), &seq_magnitude, nullptr,
                   &options.mask);
    std::copy(seq_out.begin(), seq_out.end(), want.begin() + b * H * Sq * Dv);
    std::copy(seq_magnitude.begin(), seq_magnitude.end(), magnitude.begin() + b * H * Sq * Dv);
  }
  expect_close(dense(out), want, out.dtype, nullptr, &magnitude);
  ++outcomes.computed;
  outcomes.computed_wide += q.shape[3] == attention_contract::kDecodeRowBlockDim;
  outcomes.computed_masked += !options.mask.empty();
}

// scaled_dot_product_attention_varlen with drawn packed views, prefix sums (from drawn lengths,
// the last sequence taking what is left, or any values) and a mask with per-sequence lengths.
// Checked as above, each sequence against the reference on its rows of the packed views.
void fuzz_varlen(Bytes& in, std::vector<float>& pool, const std::vector<float>& pattern) {
  const TensorView q = draw_view(in, pool.data()), k = draw_view(in, pool.data()),
                   v = draw_view(in, pool.data()), out = draw_view(in, pool.data());
  const uint8_t flags = in.take<uint8_t>();
  const int64_t B = in.take<uint8_t>() % 6;
  const int64_t Tq = q.rank == 3 ? q.shape[0] : 0, Tk = k.rank == 3 ? k.shape[0] : 0;
  std::vector<int32_t> cu_q(static_cast<size_t>(B + 1), 0), cu_k(cu_q.size(), 0);
  for (std::vector<int32_t>* cu : {&cu_q, &cu_k}) {
    const int64_t total = cu == &cu_q ? Tq : Tk;
    for (int64_t b = 0; b < B; ++b) {
      (*cu)[b + 1] =
          (flags & 1)
              ? in.take<int32_t>()
              : static_cast<int32_t>(std::min<int64_t>(total, (*cu)[b] + in.take<uint8_t>() % 6));
    }
    if (!(flags & 1) && !(flags & 2) && B > 0) cu->back() = static_cast<int32_t>(total);
  }
  attention::SdpaOptions options;
  std::vector<int32_t> key_lengths, query_lengths;
  if (flags & 4) {
    attention::MaskOptions& m = options.mask;
    const uint8_t mode = in.take<uint8_t>();
    m.causal = static_cast<attention::Causal>(mode % 3);
    if (mode & 4) m.window = (mode & 8) ? in.take<int64_t>() : in.take<uint8_t>() % 8;
    m.alibi = mode & 16;
    if (mode & 32) m.softcap = draw_softcap(in);
    // Per-sequence lengths in [0, S_b + 1] (S_b + 1 must be rejected).
    const auto lengths = [&](const std::vector<int32_t>& cu, std::vector<int32_t>& values,
                             TensorView& view) {
      for (int64_t b = 0; b < B; ++b) {
        const int64_t full = std::max<int64_t>(int64_t{cu[b + 1]} - cu[b], 0);
        values.push_back(static_cast<int32_t>(in.take<uint8_t>() % (full + 2)));
      }
      view = TensorView::contiguous(values.data(), attention::DType::Int32, {B});
    };
    if (mode & 64) lengths(cu_k, key_lengths, m.key_lengths);
    if (mode & 128) lengths(cu_q, query_lengths, m.query_lengths);
  }
  if (flags & 8) options.logsumexp = draw_view(in, pool.data());
  for (const TensorView* t :
       {&q, &k, &v, &out, static_cast<const TensorView*>(&options.logsumexp)}) {
    if (!inside_pool(*t, pool.data())) return void(++outcomes.skipped);
  }
  const TensorView cu_q_view =
      TensorView::contiguous(cu_q.data(), attention::DType::Int32, {B + 1});
  const TensorView cu_k_view =
      TensorView::contiguous(cu_k.data(), attention::DType::Int32, {B + 1});
  const attention::Status status =
      attention::scaled_dot_product_attention_varlen(q, k, v, out, cu_q_view, cu_k_view, options);
  if (rejected_cleanly(status, pool, pattern, {&out, &options.logsumexp}, "varlen")) return;
  if (out.numel() == 0) return void(++outcomes.computed);
  auto original = [&](const TensorView& t) { return dense(before_call(t, pool, pattern)); };
  const std::vector<float> qv = original(q), kv = original(k), vv = original(v);
  const int64_t H = q.shape[1], D = q.shape[2], Hkv = k.shape[1], Dv = v.shape[2];
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> want(static_cast<size_t>(Tq * H * Dv)), magnitude(want.size()),
      want_lse(static_cast<size_t>(H * Tq));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t Sq = cu_q[b + 1] - cu_q[b], Sk = cu_k[b + 1] - cu_k[b];
    if (Sq == 0) continue;
    // The sequence's rows as dense [1, heads, S, X] (packed rows are [T, heads, X]).
    const auto rows = [](const std::vector<float>& packed, int64_t first, int64_t S, int64_t heads,
                         int64_t X) {
      std::vector<float> values(static_cast<size_t>(heads * S * X));
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t s = 0; s < S; ++s)
          std::copy_n(&packed[((first + s) * heads + h) * X], X, &values[(h * S + s) * X]);
      return values;
    };
    std::vector<float> qb = rows(qv, cu_q[b], Sq, H, D), kb = rows(kv, cu_k[b], Sk, Hkv, D),
                       vb = rows(vv, cu_k[b], Sk, Hkv, Dv);
    attention::MaskOptions mask = options.mask;
    if (!key_lengths.empty())
      mask.key_lengths = TensorView::contiguous(&key_lengths[b], attention::DType::Int32, {1});
    if (!query_lengths.empty())
      mask.query_lengths = TensorView::contiguous(&query_lengths[b], attention::DType::Int32, {1});
    const TensorView qt = TensorView::contiguous(qb.data(), {1, H, Sq, D});
    const TensorView kt = TensorView::contiguous(kb.data(), {1, Hkv, Sk, D});
    const TensorView vt = TensorView::contiguous(vb.data(), {1, Hkv, Sk, Dv});
    std::vector<double> seq_out, seq_lse, seq_magnitude;
    reference_sdpa(qt, kt, vt, scale, &seq_out, &seq_lse, &mask);
    reference_sdpa(qt, kt, absolute(vt, vb), scale, &seq_magnitude, nullptr, &mask);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t t = cu_q[b] + i;
        want_lse[h * Tq + t] = seq_lse[h * Sq + i];
        for (int64_t d = 0; d < Dv; ++d) {
          want[(t * H + h) * Dv + d] = seq_out[(h * Sq + i) * Dv + d];
          magnitude[(t * H + h) * Dv + d] = seq_magnitude[(h * Sq + i) * Dv + d];
        }
      }
  }
  expect_close(dense(out), want, out.dtype, nullptr, &magnitude);
  if (options.logsumexp.data != nullptr) expect_close(dense(options.logsumexp), want_lse);
  ++outcomes.computed;
  outcomes.computed_masked += !options.mask.empty();
  outcomes.computed_varlen += 1;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::vector<float> pattern = [] {
    // Each float's upper half is 0x3f00-0x3f7f or its negative (fp32 ±[0.5, 1), f16 ±1.75-1.87,
    // bf16 ±[0.5, 1)); its lower half 0x3800-0x3bff or its negative (f16 ±[0.5, 1), bf16 ~3e-5).
    std::vector<float> values(kPool);
    for (int64_t i = 0; i < kPool; ++i) {
      const auto a = static_cast<uint32_t>((i * 7919) % 256),
                 b = static_cast<uint32_t>((i * 104729) % 2048);
      const uint32_t upper = (a & 0x80u) << 8 | 0x3f00u | (a & 0x7fu);
      const uint32_t lower = (b & 0x400u) << 5 | 0x3800u | (b & 0x3ffu);
      const uint32_t bits = upper << 16 | lower;
      std::memcpy(&values[i], &bits, sizeof bits);
    }
    return values;
  }();
  std::vector<float> pool = pattern;
  Bytes in(data, size);
  // The first byte picks the path, and is always consumed: changing it alone turns a valid call
  // into one with 128 features (equal extents stay equal), with the same bytes; path 7 takes one
  // byte more to pick the paged or the varlen API.
  const uint8_t path = in.take<uint8_t>() % 8;
  wide_features = path == 6;
  if (path == 7) {  // one input in 8 takes the paged or (every other one) the varlen API
    if (in.take<uint8_t>() & 1) {
      fuzz_varlen(in, pool, pattern);
    } else {
      fuzz_paged(in, pool, pattern);
    }
    return 0;
  }
  const TensorView q = draw_view(in, pool.data()), k = draw_view(in, pool.data()),
                   v = draw_view(in, pool.data()), out = draw_view(in, pool.data());
  attention::SdpaOptions options;
  const uint8_t flags = in.take<uint8_t>();
  if (flags & 1) options.logsumexp = draw_view(in, pool.data());
  if (flags & 2) {
    // Any bit pattern, but finite scales stay within ±4: larger ones make fp32 logits so big that
    // their rounding alone exceeds the tolerance against the double reference. Magnitudes below
    // 1e-30 become 0 for the same reason at the other end: they make the logits subnormal, where
    // fp32 keeps fewer bits than the relative tolerance (found: scale 3.6e-42, lse off by 2e-4).
    const float raw = (flags & 4) ? in.take<float>() : float(in.take<int8_t>()) / 16;
    const float folded = std::isfinite(raw) ? std::fmod(raw, 4.0f) : raw;
    options.scale = std::abs(folded) < 1e-30f ? 0.0f : folded;
  }
  DrawnMask mask;
  if (flags & 8) {
    draw_mask(in, q, k, mask);
    options.mask = mask.options;
  }
  for (const TensorView* t :
       {&q, &k, &v, &out, static_cast<const TensorView*>(&options.logsumexp)}) {
    if (!inside_pool(*t, pool.data())) return ++outcomes.skipped, 0;
  }

  const attention::Status status = attention::scaled_dot_product_attention(q, k, v, out, options);
  if (rejected_cleanly(status, pool, pattern, {&out, &options.logsumexp}, "sdpa")) return 0;
  // The reference reads the inputs as they were, as fp32 (half inputs widened).
  auto original = [&](const TensorView& t, std::vector<float>& storage) {
    return widened(before_call(t, pool, pattern), storage);
  };
  std::vector<float> q32, k32, v32;
  std::vector<double> want_out, want_lse;
  const double scale = options.scale ? double(*options.scale) : 1.0 / std::sqrt(double(q.shape[3]));
  reference_sdpa(original(q, q32), original(k, k32), original(v, v32), scale, &want_out, &want_lse,
                 &options.mask);
  std::vector<double> magnitude;
  reference_sdpa(original(q, q32), original(k, k32), absolute(original(v, v32), v32), scale,
                 &magnitude, nullptr, &options.mask);
  // The native bf16 prefill rounds its softmax weights to bfloat16 for P·V (FlashAttention's P):
  // its naive loops do too (reference_sdpa's weights_storage). A masked call may take it where its
  // pieces hide nothing (on all or some of the keys), so one is measured against both.
  const attention::DType bf16 = attention::DType::BFloat16;
  std::string plan;
  const bool native =
      q.dtype == bf16 && k.dtype == bf16 && v.dtype == bf16 && out.dtype == bf16 &&
      q.strides[3] == 1 && k.strides[3] == 1 && v.strides[3] == 1 &&
      (!options.mask.empty() || (attention::explain_sdpa(q, k, v, out, options, &plan).ok() &&
                                 is_native_bf16_prefill(plan)));
  std::vector<double> naive_out;
  if (native) {
    reference_sdpa(original(q, q32), original(k, k32), original(v, v32), scale, &naive_out, nullptr,
                   &options.mask, bf16);
  }
  expect_close(dense(out), want_out, out.dtype, native ? &naive_out : nullptr, &magnitude);
  if (options.logsumexp.data != nullptr) expect_close(dense(options.logsumexp), want_lse);
  ++outcomes.computed;
  outcomes.computed_half += is_half(q) || is_half(k) || is_half(v) || is_half(out);
  outcomes.computed_wide += q.shape[3] == attention_contract::kDecodeRowBlockDim;
  outcomes.computed_masked += !options.mask.empty();
  return 0;
}
