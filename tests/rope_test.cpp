// apply_rotary_embedding against rotations computed in double from the same fp32 angles (θ_i
// rounded to fp32, the angle the fp32 product p·θ_i, as the frameworks compute both), on every
// layout, both pairings, partial rotary dims, large positions and the half types.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "test_util.h"

namespace {

using attention::DType;
using attention::RopeStyle;
using attention::TensorView;
using attention_test::Layout;
using attention_test::Tensor;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

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

void expect_rope_matches_reference(const RopeCase& c, DType dtype = DType::Float32) {
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
    const attention::Status status = attention::apply_rotary_embedding(x.view(), out.view(), options);
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_TRUE(attention_test::matches_reference(
        out.to_dense(), reference_rope(x.view(), offsets, c.style, options.base, c.R),
        {c.B, c.H, c.S, c.D}));
  } else {
    attention_test::HalfCopy hx(x.view(), dtype), hout(out.view(), dtype);
    const attention::Status status = attention::apply_rotary_embedding(hx.view(), hout.view(), options);
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

TEST(RotaryEmbedding, BadArguments) {
  std::vector<float> x(2 * 2 * 3 * 8, 1.0f), out(x.size(), kNaN);
  const TensorView xv = TensorView::contiguous(x.data(), {2, 2, 3, 8});
  const TensorView ov = TensorView::contiguous(out.data(), {2, 2, 3, 8});
  auto expect_error = [&](const TensorView& in, const TensorView& o,
                          const attention::RopeOptions& options, const std::string& needle) {
    const attention::Status status = attention::apply_rotary_embedding(in, o, options);
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(status.code(), attention::StatusCode::InvalidArgument);
    EXPECT_NE(status.message().find(needle), std::string::npos) << status.message();
    for (float v : out) ASSERT_TRUE(std::isnan(v)) << "out was written";
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
}

}  // namespace
