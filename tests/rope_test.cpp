// apply_rotary_embedding against rotations computed in double from the same fp32 angles (θ_i
// rounded to fp32, the angle the fp32 product p·θ_i, as the frameworks compute both), on every
// layout, both pairings, partial rotary dims, large positions and the half types; and attention
// calls with the rotation inside (SdpaOptions::rope: the fused prefill kernel, and the separate
// pass of decode, half-precision and varlen calls) against the double reference of attention over
// q and k rotated in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "reference/sdpa_reference.h"
#include "test_util.h"

namespace {

using attention::DType;
using attention::RopeStyle;
using attention::TensorView;
using attention_test::Layout;
using attention_test::Tensor;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A call refused as InvalidArgument with a message containing `needle`, and its NaN-poisoned
// output left untouched.
void expect_refused_untouched(const attention::Status& status, const std::string& needle,
                              const std::vector<float>& out) {
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), attention::StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find(needle), std::string::npos) << status.message();
  for (float x : out) ASSERT_TRUE(std::isnan(x)) << "out was written";
}

// The rotation in double of a view x [B, H, S, D] (any strides), dense [B, H, S, D] out.
std::vector<double> reference_rope(const TensorView& x, const std::vector<int32_t>& offsets,
                                   RopeStyle style, float base, int64_t R) {
  const int64_t B = x.shape[0], H = x.shape[1], S = x.shape[2], D = x.shape[3];
  std::vector<float> inv_freq(static_cast<size_t>(R / 2));
  for (int64_t i = 0; i < R / 2; ++i)
    inv_freq[i] = static_cast<float>(std::pow(double(base), -2.0 * double(i) / double(R)));
  auto at = [&](int64_t b, int64_t h, int64_t s, int64_t d) -> double {
    return static_cast<const float*>(
        x.data)[b * x.strides[0] + h * x.strides[1] + s * x.strides[2] + d * x.strides[3]];
  };
  std::vector<double> out(static_cast<size_t>(B * H * S * D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t d = 0; d < D; ++d) {
          double value = at(b, h, s, d);
          if (d < R) {
            const bool split = style == RopeStyle::HalfSplit;
            const int64_t i = split ? d % (R / 2) : d / 2;
            const int64_t partner = split ? (d < R / 2 ? d + R / 2 : d - R / 2) : d ^ 1;
            const bool first = split ? d < R / 2 : d % 2 == 0;
            const float angle = static_cast<float>(offsets[b] + s) * inv_freq[i];
            value = value * std::cos(double(angle)) +
                    (first ? -1.0 : 1.0) * at(b, h, s, partner) * std::sin(double(angle));
          }
          out[((b * H + h) * S + s) * D + d] = value;
        }
  return out;
}

struct RopeCase {
  int64_t B, H, S, D, R;
  RopeStyle style;
  Layout layout;
  int32_t max_offset;
};

void expect_rope_matches_reference(const RopeCase& c, DType dtype = DType::Float32,
                                   const attention::DeviceOptions& device = {}) {
  const uint64_t seed = attention_test::seed_for_current_test();
  SCOPED_TRACE("B=" + std::to_string(c.B) + " H=" + std::to_string(c.H) + " S=" +
               std::to_string(c.S) + " D=" + std::to_string(c.D) + " R=" + std::to_string(c.R) +
               (c.style == RopeStyle::HalfSplit ? " half-split " : " interleaved ") +
               attention_test::layout_name(c.layout) + ", " + attention_test::seed_note(seed));
  std::mt19937_64 rng(seed);
  Tensor x({c.B, c.H, c.S, c.D}, c.layout), out({c.B, c.H, c.S, c.D}, c.layout);
  x.fill_uniform(rng, -2.0f, 2.0f);
  out.poison();
  std::vector<int32_t> offsets;
  for (int64_t b = 0; b < c.B; ++b)
    offsets.push_back(std::uniform_int_distribution<int32_t>(0, c.max_offset)(rng));
  attention::RopeOptions options;
  options.style = c.style;
  options.rotary_dim = c.R == c.D ? 0 : c.R;
  options.position_offsets = TensorView::contiguous(offsets.data(), DType::Int32, {c.B});
  if (dtype == DType::Float32) {
    const attention::Status status =
        attention::apply_rotary_embedding(x.view(), out.view(), options, device);
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_TRUE(attention_test::matches_reference(
        out.to_dense(), reference_rope(x.view(), offsets, c.style, options.base, c.R),
        {c.B, c.H, c.S, c.D}));
  } else {
    attention_test::HalfCopy hx(x.view(), dtype), hout(out.view(), dtype);
    const attention::Status status =
        attention::apply_rotary_embedding(hx.view(), hout.view(), options, device);
    ASSERT_TRUE(status.ok()) << status.message();
    hout.write_back();
    EXPECT_TRUE(attention_test::matches_half_reference(
        out.to_dense(), reference_rope(hx.rounded(), offsets, c.style, options.base, c.R),
        {c.B, c.H, c.S, c.D}, dtype));
  }
  EXPECT_TRUE(out.outside_view_holds(kNaN)) << "written outside out's view";
}

TEST(RotaryEmbedding, MatchesReference) {
  for (RopeStyle style : {RopeStyle::HalfSplit, RopeStyle::Interleaved}) {
    for (Layout layout : attention_test::kAllLayouts) {
      expect_rope_matches_reference({2, 3, 37, 64, 64, style, layout, 300}, DType::Float32);
      expect_rope_matches_reference({1, 2, 5, 128, 128, style, layout, 5000}, DType::Float32);
    }
    // Partial rotary dims (GPT-J, NeoX's rotary_pct), odd D, decode rows, one pair.
    expect_rope_matches_reference({3, 2, 1, 80, 32, style, Layout::kDense, 40000});
    expect_rope_matches_reference({1, 1, 9, 9, 8, style, Layout::kPadded, 10});
    expect_rope_matches_reference({2, 4, 3, 2, 2, style, Layout::kBSHD, 7});
  }
}

// Long contexts: positions up to 2^24 (the angle in fp32 is coarse there, but its cosine and sine
// must still be those of that fp32 angle).
TEST(RotaryEmbedding, LargePositions) {
  expect_rope_matches_reference({2, 2, 4, 64, 64, RopeStyle::HalfSplit, Layout::kDense, 16000000});
  expect_rope_matches_reference({2, 2, 4, 64, 64, RopeStyle::Interleaved, Layout::kDense, 131072});
}

TEST(RotaryEmbedding, HalfTypes) {
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    expect_rope_matches_reference({2, 3, 17, 64, 64, RopeStyle::HalfSplit, Layout::kBSHD, 2048},
                                  dtype);
    expect_rope_matches_reference({1, 2, 3, 96, 64, RopeStyle::Interleaved, Layout::kDense, 9},
                                  dtype);
  }
}

// The GPU kernels (rope_f32_opencl on PoCL in CI, rope_f32_cuda with a GPU) on host tensors:
// both pairings, every layout, partial rotary dims, large positions and the half types.
TEST(RotaryEmbedding, GpuBackendsMatchReference) {
  bool ran = false;
  for (attention::Backend backend : {attention::Backend::OpenCL, attention::Backend::CUDA}) {
    if (!attention::backend_available(backend).ok()) continue;
    ran = true;
    SCOPED_TRACE(backend == attention::Backend::CUDA ? "CUDA" : "OpenCL");
    attention::DeviceOptions device;
    device.backend = backend;
    for (RopeStyle style : {RopeStyle::HalfSplit, RopeStyle::Interleaved}) {
      for (Layout layout : attention_test::kAllLayouts) {
        expect_rope_matches_reference({2, 3, 37, 64, 64, style, layout, 300}, DType::Float32,
                                      device);
      }
      expect_rope_matches_reference({3, 2, 1, 80, 32, style, Layout::kDense, 40000}, DType::Float32,
                                    device);
      expect_rope_matches_reference({1, 1, 9, 9, 8, style, Layout::kPadded, 10}, DType::Float32,
                                    device);
      expect_rope_matches_reference({2, 2, 4, 64, 64, style, Layout::kDense, 16000000},
                                    DType::Float32, device);
      for (DType dtype : {DType::Float16, DType::BFloat16}) {
        expect_rope_matches_reference({2, 3, 17, 64, 64, style, Layout::kBSHD, 2048}, dtype,
                                      device);
      }
    }
  }
  if (!ran) GTEST_SKIP() << "no GPU backend here";
}

TEST(RotaryEmbedding, BadArguments) {
  std::vector<float> x(2 * 2 * 3 * 8, 1.0f), out(x.size(), kNaN);
  const TensorView xv = TensorView::contiguous(x.data(), {2, 2, 3, 8});
  const TensorView ov = TensorView::contiguous(out.data(), {2, 2, 3, 8});
  auto expect_error = [&](const TensorView& in, const TensorView& o,
                          const attention::RopeOptions& options, const std::string& needle) {
    expect_refused_untouched(attention::apply_rotary_embedding(in, o, options), needle, out);
  };
  attention::RopeOptions options;
  options.rotary_dim = 7;
  expect_error(xv, ov, options, "rotary_dim: must be even and in [2, D=8]");
  options.rotary_dim = 10;
  expect_error(xv, ov, options, "rotary_dim");
  options = {};
  options.base = -1.0f;
  expect_error(xv, ov, options, "base: must be finite and > 0");
  options = {};
  std::vector<int32_t> offsets = {0, -3};
  options.position_offsets = TensorView::contiguous(offsets.data(), DType::Int32, {2});
  expect_error(xv, ov, options, "position_offsets[1] = -3");
  std::vector<int32_t> three = {0, 0, 0};
  options.position_offsets = TensorView::contiguous(three.data(), DType::Int32, {3});
  expect_error(xv, ov, options, "position_offsets: expected shape [B=2]");
  options = {};
  expect_error(xv, TensorView::contiguous(out.data(), {2, 2, 3, 4}), options,
               "out: expected shape");
  expect_error(xv, xv, options, "out");  // in place: out overlaps x
  // Where it runs: a stream for a CPU call, tensors on two devices.
  int stream = 0;
  attention::DeviceOptions device;
  device.gpu.cuda_stream = &stream;
  expect_refused_untouched(attention::apply_rotary_embedding(xv, ov, options, device),
                           "device.gpu.cuda_stream: set, but the call runs on the CPU backend",
                           out);
  TensorView x_cuda = xv;
  x_cuda.device = attention::Device::CUDA;
  expect_error(x_cuda, ov, options, "every tensor of a call must be on the same device");
}

// ---- SdpaOptions::rope: attention over q and k rotated inside the call.

struct SdpaRopeCase {
  int64_t B, H, Hkv, Sq, Sk, D, R;
  RopeStyle style;
  attention::Causal causal = attention::Causal::None;
  int64_t window = -1;       // mask.window when >= 0
  bool key_lengths = false;  // random mask.key_lengths
  Layout layout = Layout::kDense;
};

std::string describe(const SdpaRopeCase& c) {
  return "B=" + std::to_string(c.B) + " H=" + std::to_string(c.H) + "(" + std::to_string(c.Hkv) +
         ") Sq=" + std::to_string(c.Sq) + " Sk=" + std::to_string(c.Sk) +
         " D=" + std::to_string(c.D) + " R=" + std::to_string(c.R) +
         (c.style == RopeStyle::HalfSplit ? " half-split" : " interleaved") +
         (c.causal == attention::Causal::BottomRight ? " causal" : "") +
         (c.window >= 0 ? " window=" + std::to_string(c.window) : "") +
         (c.key_lengths ? " key_lengths" : "") + " " + attention_test::layout_name(c.layout);
}

// The call on `dtype` copies of q, k, v and out (Float32: the tensors themselves) against the
// reference: q and k rotated in double at their positions (keys from offset_b, the queries the
// last Sq of the Sk positions), then attention in double over those rotations.
void expect_sdpa_rope_matches_reference(const SdpaRopeCase& c, DType dtype = DType::Float32) {
  const uint64_t seed = attention_test::seed_for_current_test();
  const char* type = dtype == DType::Float32 ? "f32" : dtype == DType::Float16 ? "f16" : "bf16";
  SCOPED_TRACE(describe(c) + " " + type + ", " + attention_test::seed_note(seed));
  std::mt19937_64 rng(seed);
  Tensor q({c.B, c.H, c.Sq, c.D}, c.layout), k({c.B, c.Hkv, c.Sk, c.D}, c.layout),
      v({c.B, c.Hkv, c.Sk, c.D}, c.layout), out({c.B, c.H, c.Sq, c.D}, c.layout),
      lse({c.B, c.H, c.Sq});
  q.fill_uniform(rng, -1.0f, 1.0f);
  k.fill_uniform(rng, -1.0f, 1.0f);
  v.fill_values(rng);
  out.poison();
  lse.poison();
  std::vector<int32_t> offsets, query_offsets, lengths;
  for (int64_t b = 0; b < c.B; ++b) {
    offsets.push_back(std::uniform_int_distribution<int32_t>(0, 3000)(rng));
    query_offsets.push_back(offsets.back() + static_cast<int32_t>(c.Sk - c.Sq));
    lengths.push_back(std::uniform_int_distribution<int32_t>(1, static_cast<int32_t>(c.Sk))(rng));
  }
  attention::SdpaOptions options;
  attention::RopeOptions rope;
  rope.style = c.style;
  rope.rotary_dim = c.R == c.D ? 0 : c.R;
  rope.position_offsets = TensorView::contiguous(offsets.data(), DType::Int32, {c.B});
  options.rope = rope;
  options.logsumexp = lse.view();
  options.mask.causal = c.causal;
  if (c.window >= 0) options.mask.window = c.window;
  if (c.key_lengths)
    options.mask.key_lengths = TensorView::contiguous(lengths.data(), DType::Int32, {c.B});

  TensorView qv = q.view(), kv = k.view(), vv = v.view();
  // Half types: the call on half copies; the reference reads their rounded values.
  std::optional<attention_test::HalfCopy> hq, hk, hv;
  if (dtype == DType::Float32) {
    const attention::Status status =
        attention::scaled_dot_product_attention(qv, kv, vv, out.view(), options);
    ASSERT_TRUE(status.ok()) << status.message();
  } else {
    hq.emplace(qv, dtype);
    hk.emplace(kv, dtype);
    hv.emplace(vv, dtype);
    attention_test::HalfCopy hout(out.view(), dtype);
    const attention::Status status = attention::scaled_dot_product_attention(
        hq->view(), hk->view(), hv->view(), hout.view(), options);
    ASSERT_TRUE(status.ok()) << status.message();
    hout.write_back();
    qv = hq->rounded();
    kv = hk->rounded();
    vv = hv->rounded();
  }
  const std::vector<double> q_rot = reference_rope(qv, query_offsets, c.style, rope.base, c.R);
  const std::vector<double> k_rot = reference_rope(kv, offsets, c.style, rope.base, c.R);
  const double scale = 1.0 / std::sqrt(double(c.D));
  const int64_t group = c.H / c.Hkv;
  const auto score = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    const double* qr = &q_rot[((b * c.H + h) * c.Sq + i) * c.D];
    const double* kr = &k_rot[((b * c.Hkv + h / group) * c.Sk + j) * c.D];
    double dot = 0.0;
    for (int64_t d = 0; d < c.D; ++d) dot += qr[d] * kr[d];
    return scale * dot;
  };
  std::vector<double> expected, expected_lse;
  reference_attention(score, c.H, c.Sq, vv, &expected, &expected_lse, &options.mask);
  if (dtype == DType::Float32) {
    EXPECT_TRUE(attention_test::matches_reference(out.to_dense(), expected, {c.B, c.H, c.Sq, c.D}));
  } else {
    EXPECT_TRUE(attention_test::matches_half_reference(out.to_dense(), expected,
                                                       {c.B, c.H, c.Sq, c.D}, dtype));
  }
  EXPECT_TRUE(attention_test::matches_reference(lse.to_dense(), expected_lse, {c.B, c.H, c.Sq},
                                                attention_test::Domain::Log));
  EXPECT_TRUE(out.outside_view_holds(kNaN)) << "written outside out's view";
}

using attention::Causal;

// Two calls' outputs agree element by element within `tolerance` · max(1, |expected|).
void expect_close(const Tensor& actual, const Tensor& expected, float tolerance) {
  const std::vector<float> a = actual.to_dense(), b = expected.to_dense();
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], tolerance * std::max(1.0f, std::abs(b[i]))) << "element " << i;
  }
}

// fp32 prefill: the fused kernel (both pairings, partial rotary dims, GQA, chunked prefill against
// a longer cache, the masks, strided layouts).
TEST(SdpaRope, FusedPrefillMatchesReference) {
  for (RopeStyle style : {RopeStyle::HalfSplit, RopeStyle::Interleaved}) {
    expect_sdpa_rope_matches_reference({2, 4, 2, 70, 70, 64, 64, style});
    expect_sdpa_rope_matches_reference({1, 2, 2, 100, 100, 64, 64, style, Causal::BottomRight});
    expect_sdpa_rope_matches_reference(
        {2, 4, 1, 37, 150, 128, 64, style, Causal::BottomRight, -1, true, Layout::kBSHD});
    expect_sdpa_rope_matches_reference(
        {1, 3, 3, 60, 90, 80, 32, style, Causal::BottomRight, 20, false, Layout::kPadded});
    // Odd D: the last feature passes unrotated, and no pair reads past it.
    expect_sdpa_rope_matches_reference({1, 2, 1, 40, 40, 9, 8, style, Causal::BottomRight});
  }
}

// Decode rows rotate q and k in a separate pass, then attend.
TEST(SdpaRope, DecodeMatchesReference) {
  for (RopeStyle style : {RopeStyle::HalfSplit, RopeStyle::Interleaved}) {
    expect_sdpa_rope_matches_reference({2, 8, 2, 1, 300, 64, 64, style});
    expect_sdpa_rope_matches_reference(
        {1, 4, 4, 1, 77, 128, 96, style, Causal::BottomRight, -1, true});
  }
}

TEST(SdpaRope, HalfTypesMatchReference) {
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    expect_sdpa_rope_matches_reference(
        {1, 4, 2, 50, 50, 64, 64, RopeStyle::HalfSplit, Causal::BottomRight}, dtype);
    expect_sdpa_rope_matches_reference({1, 2, 2, 1, 40, 64, 64, RopeStyle::Interleaved}, dtype);
  }
}

// The fused kernel and the separate pass (apply_rotary_embedding on q and k, then the call without
// rope) rotate alike: the same fp32 angles and rotation, so the outputs agree to rounding.
TEST(SdpaRope, FusedMatchesSeparatePass) {
  std::mt19937_64 rng(attention_test::seed_for_current_test());
  const int64_t B = 1, H = 4, S = 200, D = 64;
  Tensor q({B, H, S, D}), k({B, H, S, D}), v({B, H, S, D}), fused({B, H, S, D}),
      q_rot({B, H, S, D}), k_rot({B, H, S, D}), separate({B, H, S, D});
  q.fill_uniform(rng, -1.0f, 1.0f);
  k.fill_uniform(rng, -1.0f, 1.0f);
  v.fill_values(rng);
  fused.poison();
  separate.poison();
  std::vector<int32_t> offsets = {1234};
  attention::RopeOptions rope;
  rope.position_offsets = TensorView::contiguous(offsets.data(), DType::Int32, {B});
  attention::SdpaOptions options;
  options.mask.causal = Causal::BottomRight;
  ASSERT_TRUE(attention::apply_rotary_embedding(q.view(), q_rot.view(), rope).ok());
  ASSERT_TRUE(attention::apply_rotary_embedding(k.view(), k_rot.view(), rope).ok());
  ASSERT_TRUE(attention::scaled_dot_product_attention(q_rot.view(), k_rot.view(), v.view(),
                                                      separate.view(), options)
                  .ok());
  options.rope = rope;
  ASSERT_TRUE(
      attention::scaled_dot_product_attention(q.view(), k.view(), v.view(), fused.view(), options)
          .ok());
  expect_close(fused, separate, 1e-5f);
}

// A GPU backend on host tensors rotates q and k on the host first, then attends on the device:
// the same result as the fused CPU kernel (OpenCL runs on PoCL in CI; skipped without a device).
// (Device::CUDA tensors rotate on the GPU: CudaDevicePointers.RopeMatchesCpu.)
TEST(SdpaRope, GpuBackendOnHostTensorsMatchesCpu) {
  std::mt19937_64 rng(attention_test::seed_for_current_test());
  const int64_t B = 2, H = 4, Hkv = 2, Sq = 33, Sk = 80, D = 64;
  Tensor q({B, H, Sq, D}), k({B, Hkv, Sk, D}), v({B, Hkv, Sk, D}), cpu({B, H, Sq, D}),
      gpu({B, H, Sq, D});
  q.fill_uniform(rng, -1.0f, 1.0f);
  k.fill_uniform(rng, -1.0f, 1.0f);
  v.fill_values(rng);
  cpu.poison();
  gpu.poison();
  std::vector<int32_t> offsets = {3, 900};
  attention::SdpaOptions options;
  options.mask.causal = Causal::BottomRight;
  attention::RopeOptions rope;
  rope.style = RopeStyle::Interleaved;
  rope.position_offsets = TensorView::contiguous(offsets.data(), DType::Int32, {B});
  options.rope = rope;
  ASSERT_TRUE(
      attention::scaled_dot_product_attention(q.view(), k.view(), v.view(), cpu.view(), options)
          .ok());
  const attention::Status available = attention::backend_available(attention::Backend::OpenCL);
  if (!available.ok()) GTEST_SKIP() << available.message();
  options.backend = attention::Backend::OpenCL;
  const attention::Status status =
      attention::scaled_dot_product_attention(q.view(), k.view(), v.view(), gpu.view(), options);
  ASSERT_TRUE(status.ok()) << status.message();
  expect_close(gpu, cpu, 2e-5f);
}

// A packed batch: each sequence rotated from its own offset, its queries its last positions.
TEST(SdpaRope, VarlenMatchesPerSequenceCalls) {
  std::mt19937_64 rng(attention_test::seed_for_current_test());
  const int64_t H = 4, D = 64;
  const std::vector<int32_t> cu_q = {0, 40, 41, 141}, cu_k = {0, 90, 131, 231};
  const int64_t Tq = cu_q.back(), Tk = cu_k.back();
  Tensor q({Tq, H, D}), k({Tk, H, D}), v({Tk, H, D}), out({Tq, H, D}), one({Tq, H, D});
  q.fill_uniform(rng, -1.0f, 1.0f);
  k.fill_uniform(rng, -1.0f, 1.0f);
  v.fill_values(rng);
  out.poison();
  one.poison();
  std::vector<int32_t> offsets = {7, 500, 0};
  attention::SdpaOptions options;
  options.mask.causal = Causal::BottomRight;
  attention::RopeOptions rope;
  rope.style = RopeStyle::Interleaved;
  rope.position_offsets = TensorView::contiguous(offsets.data(), DType::Int32, {3});
  options.rope = rope;
  const attention::Status status = attention::scaled_dot_product_attention_varlen(
      q.view(), k.view(), v.view(), out.view(),
      TensorView::contiguous(const_cast<int32_t*>(cu_q.data()), DType::Int32, {4}),
      TensorView::contiguous(const_cast<int32_t*>(cu_k.data()), DType::Int32, {4}), options);
  ASSERT_TRUE(status.ok()) << status.message();
  // Sequence by sequence as [1, H, S, D] views of the packed tensors ([T, H, D] rows).
  const auto rows = [&](Tensor& t, int64_t first, int64_t count) {
    const TensorView view = t.view();
    return TensorView::strided(static_cast<float*>(view.data) + first * view.strides[0],
                               {1, H, count, D},
                               {0, view.strides[1], view.strides[0], view.strides[2]});
  };
  for (int b = 0; b < 3; ++b) {
    attention::SdpaOptions single = options;
    single.rope->position_offsets = TensorView::contiguous(&offsets[b], DType::Int32, {1});
    const int64_t sq = cu_q[b + 1] - cu_q[b], sk = cu_k[b + 1] - cu_k[b];
    ASSERT_TRUE(attention::scaled_dot_product_attention(rows(q, cu_q[b], sq), rows(k, cu_k[b], sk),
                                                        rows(v, cu_k[b], sk),
                                                        rows(one, cu_q[b], sq), single)
                    .ok());
  }
  EXPECT_TRUE(attention_test::same_bits(out.to_dense(), one.to_dense()))
      << "varlen differs from its sequences";
}

TEST(SdpaRope, BadArgumentsLeaveOutputUntouched) {
  const int64_t B = 2, H = 2, Sq = 5, Sk = 3, D = 8;
  std::vector<float> q(B * H * Sq * D, 0.5f), k(B * H * Sk * D, 0.5f), v(k), out(q.size(), kNaN);
  const TensorView qv = TensorView::contiguous(q.data(), {B, H, Sq, D});
  const TensorView kv = TensorView::contiguous(k.data(), {B, H, Sk, D});
  const TensorView vv = TensorView::contiguous(v.data(), {B, H, Sk, D});
  const TensorView ov = TensorView::contiguous(out.data(), {B, H, Sq, D});
  auto expect_error = [&](const attention::RopeOptions& rope, const std::string& needle) {
    attention::SdpaOptions options;
    options.rope = rope;
    expect_refused_untouched(attention::scaled_dot_product_attention(qv, kv, vv, ov, options),
                             needle, out);
  };
  attention::RopeOptions rope;
  rope.rotary_dim = 3;
  expect_error(rope, "rope.rotary_dim: must be even and in [2, D=8]");
  rope = {};
  rope.base = 0.0f;
  expect_error(rope, "rope.base");
  // Sq = 5 queries over Sk = 3 keys sit at positions offset - 2 to offset + 2.
  rope = {};
  std::vector<int32_t> offsets = {2, 1};
  rope.position_offsets = TensorView::contiguous(offsets.data(), DType::Int32, {B});
  expect_error(rope, "rope.position_offsets[1] = 1: positions -1 to 3");
  rope.position_offsets = TensorView::contiguous(offsets.data(), DType::Int32, {1});
  expect_error(rope, "rope.position_offsets: expected shape [B=2]");
  rope.position_offsets = {};
  expect_error(rope, "rope.position_offsets: absent (0), so positions run from -2");
}

}  // namespace
