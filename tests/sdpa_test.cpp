// scaled_dot_product_attention against the double-precision reference: chosen shapes, layouts,
// grouped-query heads, scales, large logits and zero sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "attention/attention.h"
#include "reference/sdpa_reference.h"
#include "test_util.h"

namespace attention_test {
namespace {

class Sdpa : public ::testing::TestWithParam<SdpaCase> {};

TEST_P(Sdpa, MatchesReference) {
  expect_sdpa_matches_reference(GetParam(), seed_for_current_test());
}

std::string case_name(const ::testing::TestParamInfo<SdpaCase>& info) {
  return identifier(info.param);
}

// Sizes: 1, odd and prime, D off the vector width, Sq != Sk, Sq on both sides of a 48-query tile,
// and Sq = 2, 3 around the switch from the decode kernel to the prefill kernel.
INSTANTIATE_TEST_SUITE_P(
    Shapes, Sdpa,
    ::testing::Values(
        sdpa_case(1, 1, 1, 1, 1, 8, 8), sdpa_case(1, 1, 1, 1, 1, 64, 64).with_logsumexp(),
        sdpa_case(1, 2, 2, 239, 1, 64, 64), sdpa_case(1, 2, 2, 799, 3, 59, 59).with_logsumexp(),
        sdpa_case(2, 3, 3, 7, 13, 8, 8), sdpa_case(1, 2, 2, 13, 97, 59, 80).with_logsumexp(),
        sdpa_case(1, 2, 2, 47, 64, 64, 32), sdpa_case(1, 2, 2, 48, 64, 64, 32).with_logsumexp(),
        sdpa_case(1, 4, 2, 2, 300, 128, 128).with_logsumexp(), sdpa_case(1, 4, 2, 3, 300, 59, 64),
        sdpa_case(1, 1, 1, 97, 131, 111, 111), sdpa_case(1, 2, 2, 131, 7, 80, 80).with_logsumexp(),
        sdpa_case(2, 4, 4, 100, 100, 64, 64), sdpa_case(1, 2, 2, 1, 1000, 64, 64).with_logsumexp(),
        sdpa_case(1, 2, 2, 130, 77, 128, 128).with_logsumexp(),
        sdpa_case(1, 3, 3, 49, 50, 128, 128), sdpa_case(1, 2, 2, 5, 9, 1, 1),
        sdpa_case(3, 1, 1, 2, 200, 8, 130)),
    case_name);

// Non-contiguous views: padded strides and transposed batch/head layouts, alone and mixed.
INSTANTIATE_TEST_SUITE_P(
    Layouts, Sdpa,
    ::testing::Values(sdpa_case(2, 4, 4, 100, 100, 64, 64).layout(Layout::kBSHD).with_logsumexp(),
                      sdpa_case(1, 2, 2, 130, 77, 128, 128).layout(Layout::kPadded),
                      sdpa_case(1, 1, 1, 97, 131, 111, 111).layout(Layout::kSHBD).with_logsumexp(),
                      sdpa_case(2, 3, 3, 7, 13, 59, 80).layout(Layout::kPadded).with_logsumexp(),
                      sdpa_case(2, 2, 2, 1, 37, 64, 64).layout(Layout::kBSHD),
                      sdpa_case(2, 4, 2, 50, 70, 64, 64)
                          .layouts(Layout::kBSHD, Layout::kSHBD, Layout::kPadded, Layout::kBSHD)
                          .with_logsumexp(),
                      sdpa_case(2, 2, 2, 13, 29, 128, 64)
                          .layouts(Layout::kSHBD, Layout::kDense, Layout::kBSHD, Layout::kPadded)),
    case_name);

// Grouped-query (H = 4 Hkv) and multi-query (Hkv = 1) attention.
INSTANTIATE_TEST_SUITE_P(
    GroupedQuery, Sdpa,
    ::testing::Values(sdpa_case(1, 8, 2, 61, 67, 64, 64),
                      sdpa_case(2, 8, 2, 53, 29, 128, 128).layout(Layout::kBSHD).with_logsumexp(),
                      sdpa_case(1, 8, 2, 7, 300, 59, 80).layout(Layout::kPadded),
                      sdpa_case(1, 8, 1, 50, 33, 64, 64).with_logsumexp(),
                      sdpa_case(1, 8, 1, 3, 200, 80, 80).layout(Layout::kSHBD),
                      sdpa_case(3, 4, 1, 1, 7, 64, 64).with_logsumexp()),
    case_name);

// Explicit scales, negative ones included (they turn the softmax towards the least similar keys).
INSTANTIATE_TEST_SUITE_P(
    Scales, Sdpa,
    ::testing::Values(sdpa_case(1, 2, 2, 17, 19, 64, 64).with_scale(-0.3f).with_logsumexp(),
                      sdpa_case(1, 2, 2, 96, 96, 64, 64).with_scale(-0.3f).layout(Layout::kPadded),
                      sdpa_case(1, 2, 2, 37, 41, 59, 59).with_scale(0.125f),
                      sdpa_case(2, 2, 2, 64, 64, 128, 128).with_scale(1.0f).with_logsumexp(),
                      sdpa_case(1, 2, 2, 1, 50, 64, 64).with_scale(2.0f)),
    case_name);

// Self-attention straight from one buffer: inputs may alias each other (only out must not).
TEST(SdpaAliasing, InputsMayShareStorage) {
  const SdpaCase c = sdpa_case(2, 3, 3, 37, 37, 24, 24).with_logsumexp();
  const uint64_t seed = seed_for_current_test();
  SCOPED_TRACE(describe(c) + ", " + seed_note(seed));
  std::mt19937_64 rng(seed);
  SdpaTensors tensors(c);
  tensors.q.fill_uniform(rng, -1.0f, 1.0f);
  const attention::TensorView shared = tensors.q.view();
  run_and_compare(c, shared, shared, shared, tensors.out, tensors.lse);
}

// Scores far beyond ±88, where exp over- or underflows in fp32: only a softmax that subtracts the
// row max survives. q and k hold ±8, so q·k (a multiple of 64, |q·k| <= 4096) is exact in fp32 and
// the scale is a power of two; every row's top score is unique and at least 64·|scale| above the
// next, so the result does not hinge on how a kernel rounds scores of this size.
TEST(SdpaLargeLogits, DoNotOverflow) {
  constexpr int64_t kHeadDim = 64, kKeys = 20;
  const uint64_t seed = seed_for_current_test();
  for (float scale : {1.0f, 0.5f, -0.5f}) {
    for (int64_t queries : {5, 64}) {
      const SdpaCase c =
          sdpa_case(1, 2, 1, queries, kKeys, kHeadDim, 32).with_scale(scale).with_logsumexp();
      SCOPED_TRACE(describe(c) + ", " + seed_note(seed));
      std::mt19937_64 rng(seed);
      std::vector<float> pattern(kHeadDim);
      for (float& value : pattern) value = (rng() & 1) ? 8.0f : -8.0f;

      SdpaTensors tensors(c);
      // Key j negates the first (7 j mod 20) coordinates: every key is a distinct distance from the
      // pattern.
      tensors.k.fill([&](const Index& i) {
        return i[3] < (7 * i[2]) % kKeys ? -pattern[i[3]] : pattern[i[3]];
      });
      // Query rows are +pattern or -pattern (top scores near +4096·scale and -4096·scale), each
      // with one more negated coordinate beyond the keys' range, which shifts all its scores alike.
      tensors.q.fill([&](const Index& i) {
        const float sign = (i[1] + i[2]) % 2 == 0 ? 1.0f : -1.0f;
        const bool negated = i[3] == kKeys + i[2] % (kHeadDim - kKeys);
        return (negated ? -sign : sign) * pattern[i[3]];
      });
      tensors.v.fill_uniform(rng, -1.0f, 1.0f);
      run_and_compare(c, tensors.q.view(), tensors.k.view(), tensors.v.view(), tensors.out,
                      tensors.lse);

      // The premise: every row's logsumexp (about its top score) lies far outside exp's fp32 range.
      std::vector<double> reference_out, reference_lse;
      reference_sdpa(tensors.q.view(), tensors.k.view(), tensors.v.view(), scale, &reference_out,
                     &reference_lse);
      const auto [lowest, highest] =
          std::minmax_element(reference_lse.begin(), reference_lse.end());
      EXPECT_LT(*lowest, -500.0);
      EXPECT_GT(*highest, 1500.0);
      EXPECT_TRUE(std::all_of(reference_lse.begin(), reference_lse.end(),
                              [](double value) { return std::abs(value) > 500.0; }));
    }
  }
}

// B, H, Sq or Dv == 0: nothing to compute; run_and_compare checks that the whole (poisoned) out
// storage is untouched, since none of it is inside the empty view.
TEST(SdpaZeroSize, EmptyOutputSucceedsWithoutWriting) {
  const uint64_t seed = seed_for_current_test();
  for (const SdpaCase& c : {sdpa_case(0, 2, 2, 5, 7, 8, 8).with_logsumexp(),
                            sdpa_case(2, 0, 1, 5, 7, 8, 8).with_logsumexp(),
                            sdpa_case(2, 2, 2, 0, 7, 8, 8).with_logsumexp(),
                            sdpa_case(2, 2, 2, 0, 7, 64, 64).layout(Layout::kPadded)}) {
    expect_sdpa_matches_reference(c, seed);
  }
}

// Sk == 0: every row has nothing to attend to, like a fully masked row.
TEST(SdpaZeroSize, NoKeysGiveZerosAndMinusInfinityLogsumexp) {
  const uint64_t seed = seed_for_current_test();
  for (int64_t queries : {5, 50}) {
    const SdpaCase c =
        sdpa_case(2, 4, 2, queries, 0, 8, 6).layout(Layout::kPadded).with_logsumexp();
    SCOPED_TRACE(describe(c) + ", " + seed_note(seed));
    std::mt19937_64 rng(seed);
    SdpaTensors tensors(c);
    tensors.q.fill_uniform(rng, -1.0f, 1.0f);
    run_and_compare(c, tensors.q.view(), tensors.k.view(), tensors.v.view(), tensors.out,
                    tensors.lse);

    const std::vector<float> out = tensors.out.to_dense(), lse = tensors.lse.to_dense();
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float value) { return value == 0.0f; }));
    EXPECT_TRUE(std::all_of(lse.begin(), lse.end(), [](float value) {
      return value == -std::numeric_limits<float>::infinity();
    }));
  }
}

// Input views may walk memory backwards: q's positions and k's and v's heads reversed through
// negative strides (the reference reads through the same views).
TEST(SdpaStrides, NegativeStridesMatchReference) {
  const SdpaCase c = sdpa_case(2, 4, 2, 50, 33, 64, 40).with_logsumexp();
  const uint64_t seed = seed_for_current_test();
  SCOPED_TRACE(describe(c) + ", " + seed_note(seed));
  SdpaTensors tensors(c, seed);
  const auto reversed = [](attention::TensorView view, int dim) {
    view.data = static_cast<float*>(view.data) + (view.shape[dim] - 1) * view.strides[dim];
    view.strides[dim] = -view.strides[dim];
    return view;
  };
  run_and_compare(c, reversed(tensors.q.view(), 2), reversed(tensors.k.view(), 1),
                  reversed(tensors.v.view(), 1), tensors.out, tensors.lse);
}

// Decode over a sequence-major KV cache (memory [B, capacity, Hkv, D] with the first Sk positions
// used, heads padded), which the CPU runs as a paged call over the same memory
// (detail::run_decode_as_paged): GQA, Dv != D, logsumexp, with and without a mask (BottomRight,
// key lengths 0, 1 and Sk, a softcap; a window with ALiBi). Sk = 256 in a capacity of 272 makes
// blocks of 16 positions, Sk = 261 blocks of one, Sk = 20 (a short cache, routed as a batch with
// 4 kv heads) blocks of 4; a batch stride that is no whole number of positions keeps the
// contiguous kernel.
TEST(SdpaSequenceMajorCache, DecodeMatchesReference) {
  const uint64_t seed = seed_for_current_test();
  constexpr int64_t B = 3, Hkv = 4, D = 64, Dv = 48, head_stride = 72;
  constexpr int64_t position_stride = Hkv * head_stride;
  std::mt19937_64 rng(seed);
  for (int64_t Sk : {256, 261, 20}) {
    for (int64_t batch_padding : {16 * position_stride, int64_t{5}}) {
      const SdpaCase c = sdpa_case(B, 8, Hkv, 1, Sk, D, Dv).with_logsumexp();
      SCOPED_TRACE(describe(c) + ", batch padding " + std::to_string(batch_padding) + ", " +
                   seed_note(seed));
      SdpaTensors tensors(c, rng());
      // Levels from the innermost: features (then padding up to the head stride), heads,
      // positions (then the batch padding), batches.
      Tensor k({B, Hkv, Sk, D},
               StridePlan{{0, 2, 1, 3}, {head_stride - D, 0, batch_padding, 0}, {}});
      Tensor v({B, Hkv, Sk, Dv},
               StridePlan{{0, 2, 1, 3}, {head_stride - Dv, 0, batch_padding, 0}, {}});
      k.fill_uniform(rng, -1.0f, 1.0f);
      v.fill_values(rng);
      run_and_compare(c, tensors.q.view(), k.view(), v.view(), tensors.out, tensors.lse);
      MaskSpec spec;
      spec.causal = attention::Causal::BottomRight;
      spec.key_lengths = true;
      spec.softcap = 2.5f;
      MaskTensors masks(spec, c, rng());
      masks.key_lengths = {static_cast<int32_t>(Sk), 0, 1};
      masks.options.key_lengths =
          attention::TensorView::contiguous(masks.key_lengths.data(), attention::DType::Int32, {B});
      run_and_compare(c, tensors.q.view(), k.view(), v.view(), tensors.out, tensors.lse,
                      masks.options);
      // Without key lengths a window and ALiBi take the same diagonal (Sk - 1) in both calls.
      MaskSpec band;
      band.causal = attention::Causal::BottomRight;
      band.window = 40;
      band.alibi = true;
      MaskTensors band_masks(band, c, rng());
      run_and_compare(c, tensors.q.view(), k.view(), v.view(), tensors.out, tensors.lse,
                      band_masks.options);
    }
  }
}

// GQA calls of a few query rows run as one head's rows of each kv head
// (detail::run_grouped_query_rows): groups of 2 and 4 and MQA, Sq from 3 to 64 with 2 and 65 on
// either side of the route, Sk = 8·Sq the least it takes with a causal mask (31 keys for 4 rows
// stay); at D = 128 a decode call's row blocks of 4 or 8 rows per kv head: without GQA 3 and 4
// rows (padded to 4), 5 and 8 over 128 keys (padded to 8) and 2 (from a sequence-major cache
// only), 3 rows of a pair of heads (padded to 4 each), 2 rows of a pair over 256 keys, and 2 rows
// of a group of 4 over 256 keys (from a sequence-major cache only). Unmasked, and
// bottom-right causal (the prefix every row sees, then the last Sq - 1 keys, merged by logsumexp)
// alone and with key lengths that end in either part (0, 1, the prefix's last key or the tail's
// first, Sk) and a softcap. Every tensor dense or sequence-major ([B, S, H, D] in memory), Dv != D.
TEST(SdpaGroupedQueryRows, MatchesReference) {
  const uint64_t seed = seed_for_current_test();
  std::mt19937_64 rng(seed);
  struct Shape {
    int64_t H, Hkv, Sq, Sk, D = 64;
  };
  for (const Shape& s :
       {Shape{8, 2, 3, 96}, Shape{8, 2, 4, 32}, Shape{4, 1, 8, 70}, Shape{6, 2, 64, 512},
        Shape{8, 2, 4, 31}, Shape{4, 2, 65, 200}, Shape{8, 2, 2, 50}, Shape{4, 4, 4, 40, 128},
        Shape{4, 4, 3, 40, 128}, Shape{4, 4, 2, 40, 128}, Shape{8, 4, 2, 256, 128},
        Shape{2, 2, 5, 128, 128}, Shape{2, 2, 8, 130, 128}, Shape{4, 2, 3, 60, 128},
        Shape{8, 2, 2, 256, 128}}) {
    for (Layout layout : {Layout::kDense, Layout::kBSHD}) {
      const SdpaCase c = sdpa_case(3, s.H, s.Hkv, s.Sq, s.Sk, s.D, 48)
                             .layouts(layout, layout, layout, layout)
                             .with_logsumexp();
      SCOPED_TRACE(describe(c) + ", " + seed_note(seed));
      SdpaTensors tensors(c, rng());
      const auto run = [&](const attention::MaskOptions& mask) {
        run_and_compare(c, tensors.q.view(), tensors.k.view(), tensors.v.view(), tensors.out,
                        tensors.lse, mask);
      };
      run({});
      const int32_t prefix_end = static_cast<int32_t>(s.Sk - s.Sq + 1), Sk = s.Sk;
      for (attention::Causal causal : {attention::Causal::None, attention::Causal::BottomRight}) {
        for (const std::vector<int32_t>& lengths :
             {std::vector<int32_t>{}, {Sk, 0, prefix_end + 1}, {1, prefix_end, Sk - 1}}) {
          MaskSpec spec;
          spec.causal = causal;
          spec.key_lengths = !lengths.empty();
          spec.softcap = lengths.empty() ? 0.0f : 2.5f;
          MaskTensors masks(spec, c, rng());
          if (!lengths.empty()) {
            masks.key_lengths = lengths;
            masks.options.key_lengths = attention::TensorView::contiguous(
                masks.key_lengths.data(), attention::DType::Int32, {3});
          }
          SCOPED_TRACE(describe(spec));
          run(masks.options);
        }
      }
    }
  }
}

// attention.h: logsumexp is skipped when its data is null, whatever its rank and shape say (a
// caller filling the shape and leaving the pointer unset). Every CPU route must skip it: the
// fuzzer found the grouped-rows route writing the causal prefix's logsumexps through it.
TEST(SdpaLogsumexp, ShapeWithoutDataIsSkippedOnEveryRoute) {
  const uint64_t seed = seed_for_current_test();
  std::mt19937_64 rng(seed);
  struct Route {
    int64_t H, Hkv, Sq, Sk, D;
    attention::Causal causal;
  };
  // GQA decode (read as paged), grouped rows with and without the causal tail, MHA's 4 rows as
  // decode rows, and the prefill kernel.
  for (const Route& r : {Route{8, 2, 1, 70, 64, attention::Causal::None},
                         Route{8, 2, 4, 96, 64, attention::Causal::BottomRight},
                         Route{8, 2, 4, 96, 64, attention::Causal::None},
                         Route{4, 4, 4, 40, 128, attention::Causal::BottomRight},
                         Route{2, 2, 70, 80, 64, attention::Causal::BottomRight}}) {
    const SdpaCase c = sdpa_case(2, r.H, r.Hkv, r.Sq, r.Sk, r.D, r.D);
    SCOPED_TRACE(describe(c) + ", " + seed_note(seed));
    SdpaTensors tensors(c, rng());
    tensors.out.poison();
    attention::SdpaOptions options;
    options.mask.causal = r.causal;
    options.logsumexp = attention::TensorView::contiguous(nullptr, {2, r.H, r.Sq});
    const attention::Status status = attention::scaled_dot_product_attention(
        tensors.q.view(), tensors.k.view(), tensors.v.view(), tensors.out.view(), options);
    ASSERT_TRUE(status.ok()) << status.message();
    std::vector<double> reference_out;
    reference_sdpa(tensors.q.view(), tensors.k.view(), tensors.v.view(), c.effective_scale(),
                   &reference_out, nullptr, &options.mask);
    EXPECT_TRUE(matches_reference(tensors.out.to_dense(), reference_out, tensors.out.shape()));
  }
}

// NaN and Inf in a visible position propagate as in PyTorch's math path. A NaN in q makes its query
// row NaN; in k, every row of the query heads reading that kv head; in v, that feature of those
// heads. An Inf gives ±Inf scores (a +Inf score makes its row NaN through inf - inf) or ±Inf in v's
// feature. The reference (plain double loops) follows IEEE the same way, and matches_reference
// requires every non-finite value exactly where the reference has it.
TEST(SdpaNonFinite, NanAndInfInAnInputPropagateLikeTheMathPath) {
  const uint64_t seed = seed_for_current_test();
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  for (int64_t queries : {1, 64}) {  // the decode and the prefill kernel
    for (float special : specials) {
      // First or last along the sequence: a max() may keep or drop a NaN depending on order.
      for (int placement = 0; placement < 6; ++placement) {
        const SdpaCase c = sdpa_case(2, 4, 2, queries, 37, 64, 48).with_logsumexp();
        const bool last = placement >= 3;
        SCOPED_TRACE(describe(c) + ", " + std::to_string(special) + " in " + "qkv"[placement % 3] +
                     (last ? " last" : " first") + ", " + seed_note(seed));
        SdpaTensors tensors(c, seed);
        Tensor* target[] = {&tensors.q, &tensors.k, &tensors.v};
        const attention::TensorView view = target[placement % 3]->view();
        // Batch 1, head 1, the first or last position, feature 5.
        const int64_t offset = view.strides[0] + view.strides[1] +
                               (last ? view.shape[2] - 1 : 0) * view.strides[2] +
                               5 * view.strides[3];
        static_cast<float*>(view.data)[offset] = special;
        run_and_compare(c, tensors.q.view(), tensors.k.view(), tensors.v.view(), tensors.out,
                        tensors.lse);
        if (!std::isnan(special)) continue;  // a -Inf score may legitimately weigh nothing
        const std::vector<float> out = tensors.out.to_dense();
        EXPECT_TRUE(std::any_of(out.begin(), out.end(), [](float x) { return std::isnan(x); }))
            << "the NaN vanished";
      }
    }
  }
}

// D == 0 leaves the default scale 1/sqrt(D) undefined; a head without value features (Dv == 0) is a
// caller bug. Both are errors naming the operand and the dim.
TEST(SdpaZeroSize, ZeroHeadDimIsAnError) {
  struct ZeroDim {
    SdpaCase c;
    const char* expected;
  };
  for (const ZeroDim& z : {ZeroDim{sdpa_case(1, 2, 2, 5, 7, 0, 8), "q: head dim D"},
                           ZeroDim{sdpa_case(1, 2, 2, 5, 7, 8, 0), "v: head dim Dv"}}) {
    SCOPED_TRACE(describe(z.c));
    SdpaTensors tensors(z.c);
    tensors.out.fill_storage(7.0f);
    const std::vector<float> out_before = tensors.out.storage();
    const attention::Status status = attention::scaled_dot_product_attention(
        tensors.q.view(), tensors.k.view(), tensors.v.view(), tensors.out.view());
    EXPECT_FALSE(status.ok());
    EXPECT_NE(status.message().find(z.expected), std::string::npos) << status.message();
    EXPECT_TRUE(same_bits(tensors.out.storage(), out_before));
  }
}

}  // namespace
}  // namespace attention_test
